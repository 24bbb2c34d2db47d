"""Embedding, EmbeddingBag and one_hot against PyTorch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from functional_oracle import check_functional
from torch_twin import check_twin, pair, rand

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn, optim


@pytest.mark.parametrize("opts", [{}, {"padding_idx": 2}, {"padding_idx": -1}])
def test_embedding_matches_torch(opts, rng):
    t, j = pair("Embedding", 7, 4, **opts)
    idx = rng.integers(0, 7, (3, 5))
    idx[0, :3] = [2, 6, 2]
    check_twin(t, j, [idx], modes=("train",))
    if opts:
        assert not np.asarray(nn.Embedding(7, 4, **opts).weight)[opts["padding_idx"]].any()


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_torch(mode, rng):
    t, j = pair("EmbeddingBag", 9, 3, mode=mode)
    flat = rng.integers(0, 9, (10,))
    offsets = np.array([0, 3, 3, 7])  # an empty bag in the middle
    check_twin(t, j, [flat, offsets], modes=("train",))
    check_twin(t, j, [rng.integers(0, 9, (2, 4))], modes=("train",))
    t, j = pair("EmbeddingBag", 9, 3, mode=mode, padding_idx=0, include_last_offset=True)
    flat[1] = 0
    check_twin(t, j, [flat, np.array([0, 2, 5, 10])], modes=("train",))


@pytest.mark.parametrize("opts", [{"max_norm": 1.5}, {"max_norm": 0.5, "norm_type": 1.0},
                                  {"scale_grad_by_freq": True, "padding_idx": 1},
                                  {"sparse": True}])
def test_embedding_options_match_torch(opts, rng):
    """max_norm: the looked-up rows renormalised, the gradient as torch's (taken after its
    in-place renormalisation); scale_grad_by_freq; sparse gives torch's gradient, dense."""
    weight, idx = rand(rng, 7, 4) * 2, rng.integers(0, 7, (3, 5))
    idx[0, :3] = [2, 6, 2]
    dense = {k: v for k, v in opts.items() if k != "sparse"}  # torch's sparse gradient, densely
    check_functional(lambda w, i: F.embedding(i, w, **opts),
                     lambda w, i: torch.nn.functional.embedding(i, w, **dense), [weight], [idx])


@pytest.mark.parametrize("opts", [{"max_norm": 1.0, "mode": "mean"}, {"max_norm": 2.0, "mode": "sum"},
                                  {"scale_grad_by_freq": True, "mode": "sum", "padding_idx": 3},
                                  {"scale_grad_by_freq": True, "mode": "mean", "max_norm": 1.0}])
def test_embedding_bag_options_match_torch(opts, rng):
    """Every index of the input occurs twice: where counts differ torch's CPU bag kernel divides
    by the count of another index (see the next test)."""
    flat = rng.permutation(np.repeat([0, 3, 5, 8], 2))
    check_functional(lambda w, i, o: F.embedding_bag(i, w, o, **opts),
                     lambda w, i, o: torch.nn.functional.embedding_bag(i, w, o, **opts),
                     [rand(rng, 9, 3) * 2], [flat, np.array([0, 3, 3, 7])])


def _bags_by_embedding(input, weight, offsets, mode, **opts):
    """torch's embedding_bag built from torch's embedding (its scale_grad_by_freq gradient)."""
    rows = torch.nn.functional.embedding(input, weight, **opts)
    bag = torch.searchsorted(offsets, torch.arange(len(input)), right=True) - 1
    keep = (input != opts.get("padding_idx", -1)).to(rows.dtype)
    sums = torch.zeros(len(offsets), weight.shape[1]).index_add(0, bag, rows * keep[:, None])
    counts = torch.zeros(len(offsets)).index_add(0, bag, keep)
    return sums / counts.clamp(min=1)[:, None] if mode == "mean" else sums


@pytest.mark.parametrize("opts", [{"mode": "sum"}, {"mode": "mean", "padding_idx": 1}])
def test_embedding_bag_scale_grad_by_freq_divides_by_the_count(opts, rng):
    """Each row's gradient divided by its count in the input, as F.embedding's: torch's CPU bag
    kernel divides the gradient of the i-th distinct index by the count of the i-th entry of
    the sorted input (`counts[indices_data[i]]` in EmbeddingBag.cpp), so the oracle is torch's
    bags built from torch's F.embedding; torch's own bag kernel gets a different gradient here."""
    weight, flat, offsets = rand(rng, 6, 3), np.array([1, 1, 2, 3, 1, 3, 0, 5]), np.array([0, 3, 5])
    check_functional(lambda w, i, o: F.embedding_bag(i, w, o, scale_grad_by_freq=True, **opts),
                     lambda w, i, o: _bags_by_embedding(i, w, o, scale_grad_by_freq=True, **opts),
                     [weight], [flat, offsets])
    with pytest.raises(AssertionError, match="grad of input 0"):  # the kernel's own gradient
        check_functional(lambda w, i, o: F.embedding_bag(i, w, o, scale_grad_by_freq=True, **opts),
                         lambda w, i, o: torch.nn.functional.embedding_bag(
                             i, w, o, scale_grad_by_freq=True, **opts), [weight], [flat, offsets])
    with pytest.raises(ValueError, match="mode='max' does not support scale_grad_by_freq"):
        F.embedding_bag(jnp.asarray(flat), weight, offsets, mode="max", scale_grad_by_freq=True)


def _twin_steps(name, args, opts, inputs, jit, rng, steps=3):
    """torch.nn.<name> and ours from the same weight, SGD steps on a random projection of the
    output: the output, the weight's gradient and the weight after every step (torch's forward
    renormalises the looked-up rows of the weight in place before the lookup)."""
    t_module, j_module = pair(name, *args, **opts)
    j_module.load_state_dict(t_module.state_dict())
    t_opt = torch.optim.SGD(t_module.parameters(), lr=0.5)
    j_opt = optim.SGD(j_module.parameters(), lr=0.5)

    def step(module, opt, cotangent, *xs):
        (_, out), grads = dl.value_and_grad(
            lambda m: ((m(*xs) * cotangent).sum(), m(*xs)), has_aux=True)(module)
        opt.step(grads)
        return out, grads["weight"]

    step = dl.jit(step) if jit else step
    for k in range(steps):
        xs = inputs(k)
        out = t_module(*[torch.tensor(x) for x in xs])
        cotangent = rand(rng, *out.shape)
        t_opt.zero_grad()
        (out * torch.tensor(cotangent)).sum().backward()
        t_grad = t_module.weight.grad.clone()
        t_opt.step()
        j_out, j_grad = step(j_module, j_opt, jnp.asarray(cotangent), *map(jnp.asarray, xs))
        np.testing.assert_allclose(j_out, out.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(j_grad, t_grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(j_module.weight, t_module.weight.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=f"weight after step {k}")
    # a forward pass alone writes the renormalised rows back too, eagerly and compiled
    forward = dl.jit(lambda m, *xs: m(*xs)) if jit else (lambda m, *xs: m(*xs))
    with torch.no_grad():
        t_module.weight.mul_(3.0)
    j_module.weight = j_module.weight * 3.0
    xs = inputs(steps)
    np.testing.assert_allclose(forward(j_module, *map(jnp.asarray, xs)),
                               t_module(*[torch.tensor(x) for x in xs]).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(j_module.weight, t_module.weight.detach().numpy(), rtol=1e-5,
                               atol=1e-6, err_msg="weight after a forward pass")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("opts", [{"max_norm": 1.0}, {"max_norm": 0.8, "norm_type": 1.0,
                                                       "padding_idx": 2, "scale_grad_by_freq": True}])
def test_embedding_max_norm_writes_the_weight_back_as_torch(opts, jit, rng):
    _twin_steps("Embedding", (7, 4), opts, lambda k: [rng.integers(0, 7, (3, 5))], jit, rng)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("opts", [{"max_norm": 1.0, "mode": "mean"},
                                  {"max_norm": 1.5, "mode": "max", "padding_idx": 0},
                                  {"max_norm": 1.2, "mode": "sum", "scale_grad_by_freq": True}])
def test_embedding_bag_max_norm_writes_the_weight_back_as_torch(opts, jit, rng):
    def inputs(k):  # 2-d bags, then 1-d with offsets; each index twice (see above)
        if k % 2:
            return [rng.permutation(np.repeat(rng.choice(9, 4, replace=False), 2)), np.array([0, 3, 3, 6])]
        return [rng.permutation(np.repeat(rng.choice(9, 3, replace=False), 2)).reshape(2, 3)]
    _twin_steps("EmbeddingBag", (9, 3), opts, inputs, jit, rng)


def test_embedding_modules_options(rng):
    idx = rng.integers(0, 5, (4, 3))
    check_twin(*pair("Embedding", 5, 3, scale_grad_by_freq=True), [idx], modes=("train",))
    assert nn.Embedding(5, 3, sparse=True).sparse  # accepted; its gradient is dense
    for args, opts in [((5, 3), {"max_norm": 1.0, "norm_type": 1.0, "scale_grad_by_freq": True,
                                 "sparse": True, "padding_idx": 1}), ((5, 3), {})]:
        assert repr(nn.Embedding(*args, **opts)) == repr(torch.nn.Embedding(*args, **opts))
        opts.pop("sparse", None)
        assert repr(nn.EmbeddingBag(*args, **opts)) == repr(torch.nn.EmbeddingBag(*args, **opts))
    with pytest.raises(ValueError, match="mode='max' does not support sparse"):
        nn.EmbeddingBag(5, 2, mode="max", sparse=True)(jnp.zeros((2, 2), jnp.int32))
    with pytest.raises(ValueError, match="per_sample_weights must have the shape of input"):
        nn.EmbeddingBag(5, 2, mode="sum")(jnp.zeros(4, jnp.int32), jnp.array([0, 2]), jnp.ones(3))


def test_embedding_bag_per_sample_weights(rng):
    t, j = pair("EmbeddingBag", 6, 3, mode="sum")
    check_twin(t, j, [rng.integers(0, 6, (7,)), np.array([0, 4]), rand(rng, 7)],
               modes=("train",))


def test_one_hot_and_errors(rng):
    idx = rng.integers(0, 5, (3, 4))
    expected = torch.nn.functional.one_hot(torch.tensor(idx), 6)
    np.testing.assert_array_equal(F.one_hot(idx, 6), expected.numpy())
    np.testing.assert_array_equal(F.one_hot(idx), torch.nn.functional.one_hot(
        torch.tensor(idx)).numpy())
    model = nn.Sequential(nn.Embedding(5, 2))
    with pytest.raises(nn.ShapeError, match=r"0 \(Embedding\).*integer"):
        model(rand(rng, 3))
    with pytest.raises(ValueError, match="num_classes=-1 .* pass num_classes"):
        jax.jit(F.one_hot)(jnp.asarray(idx))
    with pytest.raises(ValueError, match=r"class values must be in \[0, num_classes=3\)"):
        F.one_hot(idx, 3)
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(rand(rng, 1, 1, 4, 4), size=2, mode="bilinear", antialias=True)
    with pytest.raises(nn.ShapeError, match=r"Bilinear.*size 3 on axis 1"):
        nn.Bilinear(3, 4, 2)(rand(rng, 2, 4), rand(rng, 2, 4))
    with pytest.raises(nn.ShapeError, match="axis 1 of size"):
        nn.Unflatten(1, (2, 2))(rand(rng, 2, 5))


def test_embedding_bag_max_gives_a_tie_to_its_first_entry_as_torch():
    """Rows tied in a bag's max (the same index twice, or equal values): torch's gradient goes
    to the first entry that holds the max; a segment max's derivative splits it."""
    weight = np.asarray([[1.0, 2.0], [1.0, 3.0], [0.5, 3.0]], np.float32)
    flat, offsets = np.asarray([0, 1, 2, 1, 1, 0]), np.asarray([0, 3, 3])  # an empty bag
    check_functional(lambda w, i, o: F.embedding_bag(i, w, o, mode="max"),
                     lambda w, i, o: torch.nn.functional.embedding_bag(i, w, o, mode="max"),
                     [weight], [flat, offsets])
