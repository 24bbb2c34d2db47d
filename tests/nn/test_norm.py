"""Normalisation layers against PyTorch, incl. BatchNorm running statistics over many steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import assert_close, check_twin, pair, rand

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn


@pytest.mark.parametrize("name,args,opts,shape", [
    ("BatchNorm2d", (3,), {}, (4, 3, 5, 3)),
    ("BatchNorm2d", (3,), {"momentum": None, "affine": False}, (2, 3, 1, 3)),
    ("BatchNorm2d", (3,), {"track_running_stats": False}, (2, 3, 4, 4)),
    ("BatchNorm1d", (5,), {"momentum": 0.3}, (6, 5)),
    ("BatchNorm1d", (4,), {}, (3, 4, 7)),
    ("SyncBatchNorm", (3,), {}, (2, 3, 4, 5)),
    ("LayerNorm", ((4, 5),), {}, (2, 3, 4, 5)),
    ("LayerNorm", (5,), {"bias": False, "eps": 1e-3}, (3, 5)),
    ("LayerNorm", (5,), {"elementwise_affine": False}, (1, 1, 5)),
    ("LayerNorm", ((7, 5),), {}, (1, 7, 5)),  # one row: normalised as a 1-d array
    ("LayerNorm", (5,), {}, (1, 7, 5)),  # a batch of one: as (7, 5) rows
    ("GroupNorm", (2, 6), {}, (3, 6, 4, 5)),
    ("GroupNorm", (3, 3), {"affine": False}, (2, 3, 7)),
    ("RMSNorm", (6,), {}, (2, 3, 6)),
    ("RMSNorm", ((2, 6),), {"eps": 1e-4}, (4, 2, 6)),
    ("RMSNorm", (6,), {}, (1, 6)),
    ("InstanceNorm2d", (3,), {}, (2, 3, 4, 5)),
    ("InstanceNorm2d", (3,), {"affine": True}, (3, 4, 5)),
    ("LocalResponseNorm", (3,), {}, (2, 5, 4, 4)),
    ("LocalResponseNorm", (4,), {"alpha": 0.1, "beta": 0.5, "k": 2.0}, (2, 6, 3)),
])
def test_norm_matches_torch_train_and_eval(name, args, opts, shape, rng):
    t, j = pair(name, *args, **opts)
    with torch.no_grad():  # non-trivial affine parameters and running stats
        for p in t.parameters():
            p.add_(torch.randn(p.shape) * 0.3)
        if getattr(t, "running_var", None) is not None:
            t.running_mean.add_(0.5)
            t.running_var.mul_(1.7)
    check_twin(t, j, [rand(rng, *shape, scale=2.0) + 0.5])


def test_batchnorm_running_stats_over_training_steps(rng):
    """Several jitted training steps (SGD on a conv+BN net): stats and weights track torch."""
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4, momentum=None),
                            torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 9, 3))
    j = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.ReLU(),
                      nn.Flatten(), nn.Linear(4 * 9, 3))
    j.load_state_dict(t.state_dict())
    topt = torch.optim.SGD(t.parameters(), lr=0.1)
    jopt = dl.optim.SGD(j.parameters(), lr=0.1)

    @dl.jit
    def step(model, opt, x):
        loss, grads = dl.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
        opt.step(grads)
        return loss

    for _ in range(4):
        x = rand(rng, 5, 2, 5, 5) * 3 + 1
        topt.zero_grad()
        (t(torch.tensor(x)) ** 2).mean().backward()
        topt.step()
        step(j, jopt, x)
    jsd = j.state_dict()
    for key, value in t.state_dict().items():
        assert_close(jsd[key], value, key, 1e-4)
    assert int(jsd["1.num_batches_tracked"]) == 4
    t.eval()
    j.eval()
    x = rand(rng, 2, 2, 5, 5)
    assert_close(j(x), t(torch.tensor(x)), "eval output after training")


def test_functional_norms_match_torch(rng):
    x = rand(rng, 3, 4, 5)
    tx = torch.tensor(x)
    mean, var = rand(rng, 4), np.abs(rand(rng, 4)) + 0.5
    tf = torch.nn.functional
    assert_close(F.batch_norm(x, mean, var), tf.batch_norm(tx, torch.tensor(mean),
                                                           torch.tensor(var)), "batch_norm")
    assert_close(F.normalize(x, p=3.0, dim=2), tf.normalize(tx, p=3.0, dim=2), "normalize")
    assert_close(F.instance_norm(x), tf.instance_norm(tx), "instance_norm")


def test_norm_bad_input(rng):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(5))
    with pytest.raises(nn.ShapeError, match=r"1 \(BatchNorm1d\).*size 5 on axis 1"):
        model(rand(rng, 2, 3))
    with pytest.raises(nn.ShapeError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(rand(rng, 1, 3))
    with pytest.raises(nn.ShapeError, match=r"LayerNorm.*trailing shape is \(4,\)"):
        nn.LayerNorm(4)(rand(rng, 2, 5))
    with pytest.raises(NotImplementedError, match="track_running_stats"):
        nn.InstanceNorm2d(3, track_running_stats=True)


def test_sync_batchnorm_axis_name_gives_global_batch_statistics(rng):
    """Under a mapped axis, each shard normalises with the statistics of the whole batch."""
    x = rand(rng, 8, 3, 2, 2) * 2 + 1
    bn = nn.SyncBatchNorm(3, axis_name="data", affine=False, track_running_stats=False)
    shards = jax.vmap(bn, axis_name="data")(x.reshape(4, 2, 3, 2, 2))
    expected = torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True)
    assert_close(shards.reshape(x.shape), expected, "sharded SyncBatchNorm")


def test_normalize_bfloat16_gradient_is_computed_in_float32(rng):
    """One element per vector: x / |x| is constant, its gradient 0. Computed in bfloat16 the
    two terms of the quotient rule left up to 0.19 (torch's bfloat16 backward: 0.13)."""
    x = jnp.asarray(rand(rng, 1, 2, 4, 5) * 4, jnp.bfloat16)
    cotangent = jnp.asarray(rand(rng, 1, 2, 4, 5), jnp.bfloat16)
    _, pullback = jax.vjp(lambda x: F.normalize(x, p=0.5, dim=0), x)
    assert float(jnp.max(jnp.abs(pullback(cotangent)[0]))) < 1e-2
    expected = torch.nn.functional.normalize(torch.tensor(np.asarray(x, np.float32)), dim=1)
    np.testing.assert_allclose(np.asarray(F.normalize(x, dim=1), np.float32), expected.numpy(),
                               rtol=1e-2, atol=1e-2)


def _torch_batch_norm(x, weight, bias):
    return torch.nn.functional.batch_norm(x, None, None, weight, bias, training=True)


@pytest.mark.parametrize("shape,affine,offset", [
    ((3, 5), True, 0.0),  # BatchNorm1d on (N, C)
    ((2, 3, 7), True, 0.0),
    ((2, 3, 5, 3), False, 0.0),
    ((1, 4, 3, 2, 5), True, 0.0),  # 3-d
    ((2, 3, 4, 5), True, 15.0),  # mean 7 std: one-pass statistics, some cancellation
    ((2, 3, 4, 5), True, 1e4),  # large mean: the two-pass fallback keeps the variance
])
def test_batch_norm_training_values_and_gradients_match_torch(shape, affine, offset, rng):
    """The closed-form BatchNorm derivative (custom JVP) in reverse mode, against torch's
    float64 autograd: output, input/weight/bias gradients for a fixed cotangent."""
    x = rand(rng, *shape, scale=2.0) + offset
    c = shape[1]
    w, b = (rand(rng, c) + 1, rand(rng, c)) if affine else (None, None)
    g = rand(rng, *shape)
    jax_args = [a for a in (x, w, b) if a is not None]
    y, pullback = jax.vjp(lambda *a: F.batch_norm(a[0], None, None, *a[1:], training=True),
                          *jax_args)
    grads = pullback(jnp.asarray(g))
    targs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in jax_args]
    ty = _torch_batch_norm(targs[0], *(targs[1:] if affine else (None, None)))
    ty.backward(torch.tensor(g, dtype=torch.float64))
    assert_close(y, ty.detach(), "output", 1e-4)
    for name, got, want in zip(("input", "weight", "bias"), grads, targs):
        assert_close(got, want.grad, f"{name} gradient", 1e-4)


def test_batch_norm_training_forward_mode_and_second_order_match_torch(rng):
    x, w, b = rand(rng, 3, 4, 2, 3) * 2 + 1, rand(rng, 4) + 1, rand(rng, 4)
    dx, dw, db = rand(rng, 3, 4, 2, 3), rand(rng, 4), rand(rng, 4)

    def jbn(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True)

    y, dy = jax.jvp(jbn, (x, w, b), (dx, dw, db))
    t = [torch.tensor(a, dtype=torch.float64) for a in (x, w, b, dx, dw, db)]
    ty, tdy = torch.func.jvp(_torch_batch_norm, tuple(t[:3]), tuple(t[3:]))
    assert_close(y, ty, "output", 1e-4)
    assert_close(dy, tdy, "forward-mode tangent", 1e-4)
    # the batch statistics it returns for the running averages carry tangents too
    from jaxdl.nn._norm import _batch_norm_train
    _, (_, dmean, dvar) = jax.jvp(lambda x: _batch_norm_train(x, w, b, 1e-5), (x,), (dx,))
    _, (tdvar, tdmean) = torch.func.jvp(
        lambda x: torch.var_mean(x, (0, 2, 3), correction=0), (t[0],), (t[3],))
    assert_close(dmean, tdmean, "mean tangent", 1e-4)
    assert_close(dvar, tdvar, "variance tangent", 1e-4)

    # grad of a function of the input gradient (double backward)
    def jloss(x, w, b):
        gx = jax.grad(lambda x: jnp.sum(jbn(x, w, b) ** 3))(x)
        return jnp.sum(jnp.sin(gx))

    jgrads = jax.grad(jloss, argnums=(0, 1, 2))(x, w, b)
    tx, tw, tb = (a.clone().requires_grad_(True) for a in t[:3])
    (tgx,) = torch.autograd.grad((_torch_batch_norm(tx, tw, tb) ** 3).sum(), tx, create_graph=True)
    tgrads = torch.autograd.grad(torch.sin(tgx).sum(), (tx, tw, tb))
    for name, got, want in zip(("input", "weight", "bias"), jgrads, tgrads):
        assert_close(got, want, f"second-order {name} gradient", 1e-4)


def test_batchnorm_bfloat16_keeps_float32_statistics(rng):
    """bf16 activations: output and gradients within bf16 rounding of torch's float32 result,
    running statistics from float32 moments."""
    x = rand(rng, 4, 3, 5, 5, scale=3.0) + 2
    xb = jnp.asarray(x, jnp.bfloat16)
    bn = nn.BatchNorm2d(3)
    y, pullback = jax.vjp(lambda x: bn(x), xb)
    (gx,) = pullback(jnp.ones_like(y) * jnp.asarray(np.linspace(-1, 1, y.size).reshape(y.shape),
                                                    jnp.bfloat16))
    assert y.dtype == gx.dtype == jnp.bfloat16
    tx = torch.tensor(np.asarray(xb, np.float32), requires_grad=True)
    tbn = torch.nn.BatchNorm2d(3)
    ty = tbn(tx)
    ty.backward(torch.tensor(np.linspace(-1, 1, y.size, dtype=np.float32).reshape(y.shape)))
    np.testing.assert_allclose(np.asarray(y, np.float32), ty.detach().numpy(), atol=3e-2)
    np.testing.assert_allclose(np.asarray(gx, np.float32), tx.grad.numpy(), atol=3e-2)
    assert bn.running_mean.dtype == jnp.float32
    assert_close(bn.running_mean, tbn.running_mean, "running_mean", 1e-5)
    assert_close(bn.running_var, tbn.running_var, "running_var", 1e-5)
