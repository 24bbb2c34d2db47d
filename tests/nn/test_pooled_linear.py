"""A linear layer fed by an expanding adaptive average pool (`jaxdl/nn/_pooled_linear.py`):
the rewritten step against PyTorch, and which chains the rewrite takes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import check_twin, rand

import jaxdl as dl
from jaxdl import nn
from jaxdl._jax_compat import called_function
from jaxdl.nn import _pooled_linear


def _head(lib, pool, in_features, out_size, out_features=5):
    """pool -> flatten -> Linear, built from torch.nn or jaxdl.nn."""
    return lib.Sequential(getattr(lib, pool)(out_size), lib.Flatten(),
                          lib.Linear(in_features, out_features))


def _flat_size(pool, shape, out_size):
    """Linear's in_features after `pool` of an input of `shape` and Flatten()."""
    sizes = out_size if isinstance(out_size, tuple) else (out_size,)
    return int(np.prod(shape[1:len(shape) - len(sizes)] + sizes))


# (pool, input shape, output size): every chain here is rewritten.
CHAINS = [
    ("AdaptiveAvgPool2d", (3, 8, 1, 1), (7, 7)),  # VGG at 32 px: each value repeated 49 times
    ("AdaptiveAvgPool2d", (2, 8, 2, 2), (7, 7)),  # VGG at 64 px: a bin that averages two
    ("AdaptiveAvgPool2d", (16, 4, 2, 2), (7, 7)),  # 16 rows: the weight gradient as a product
    ("AdaptiveAvgPool2d", (2, 4, 3, 5), (7, 4)),  # one axis expanded, one reduced
    ("AdaptiveAvgPool1d", (4, 6, 2), 5),
    ("AdaptiveAvgPool2d", (6, 1, 1), (3, 3)),  # unbatched: the channels are the rows
]


def _names(fn, *args):
    return [called_function(e) or e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns]


@pytest.mark.parametrize("pool, shape, out_size", CHAINS)
@pytest.mark.parametrize("jit", [False, True])
def test_rewritten_chain_matches_torch(rng, pool, shape, out_size, jit):
    in_features = _flat_size(pool, shape, out_size)
    torch_head = _head(torch.nn, pool, in_features, out_size)
    head = _head(nn, pool, in_features, out_size)
    x = rand(rng, *shape)
    assert "pooled_product" in _names(_pooled_linear.reassociated(head), x)
    check_twin(torch_head, head, [x], modes=("train",), jit=jit)


def test_training_trajectory_matches_torch(rng):
    """Ten SGD-with-momentum steps of a VGG-like head at 64 px's 2x2 features, against torch."""
    torch_head = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                     *_head(torch.nn, "AdaptiveAvgPool2d", 8 * 49, (7, 7), 10))
    head = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                         *_head(nn, "AdaptiveAvgPool2d", 8 * 49, (7, 7), 10))
    head.load_state_dict(torch_head.state_dict())
    opt = dl.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    torch_opt = torch.optim.SGD(torch_head.parameters(), lr=0.01, momentum=0.9)
    x, target = rand(rng, 4, 3, 2, 2), rng.integers(0, 10, 4)

    @dl.jit
    def step(model, opt, x, target):
        loss, grads = dl.value_and_grad(
            lambda m: dl.nn.functional.cross_entropy(m(x), target))(model)
        opt.step(grads)
        return loss

    for _ in range(10):
        loss = step(head, opt, jnp.asarray(x), jnp.asarray(target))
        torch_opt.zero_grad()
        torch_loss = torch.nn.functional.cross_entropy(torch_head(torch.tensor(x)),
                                                       torch.tensor(target))
        torch_loss.backward()
        torch_opt.step()
        np.testing.assert_allclose(float(loss), torch_loss.item(), rtol=1e-5, atol=1e-6)
    for name, value in torch_head.state_dict().items():
        np.testing.assert_allclose(np.asarray(head.state_dict()[name]), value.numpy(),
                                   rtol=1e-4, atol=1e-6, err_msg=name)


def test_frozen_weight_takes_the_input_gradient_only(rng):
    head = _head(nn, "AdaptiveAvgPool2d", 4 * 49, (7, 7))
    torch_head = _head(torch.nn, "AdaptiveAvgPool2d", 4 * 49, (7, 7))
    head.load_state_dict(torch_head.state_dict())
    head.requires_grad_(False)
    x = rand(rng, 3, 4, 2, 2)
    grad = dl.jit(dl.grad(lambda m, x: jnp.sum(m(x) ** 2), argnums=1))(head, jnp.asarray(x))
    tx = torch.tensor(x, requires_grad=True)
    (torch_head(tx) ** 2).sum().backward()
    np.testing.assert_allclose(np.asarray(grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_pooled_product_derivatives_of_both_orders(rng):
    """First and second derivatives (forward over reverse, reverse over reverse) of the
    rewritten product equal the plain chain's."""
    features = jnp.asarray(rand(rng, 2, 3, 2, 2))
    weight = jnp.asarray(rand(rng, 4, 3 * 49, scale=0.1))
    pool = nn.AdaptiveAvgPool2d((7, 7))

    def rewritten(f, w):
        return jnp.sum(jnp.tanh(_pooled_linear.pooled_product(f, w, (3, 7, 7))))

    def plain(f, w):
        return jnp.sum(jnp.tanh(pool(f).reshape(f.shape[0], -1) @ w.T))

    def hessian_vector(fn, f, w):
        grad = jax.grad(fn, argnums=(0, 1))
        return jax.jvp(grad, (f, w), (jnp.ones_like(f), jnp.ones_like(w)))[1]

    for transform in (lambda fn: jax.grad(fn, argnums=(0, 1))(features, weight),
                      lambda fn: jax.hessian(fn)(features, weight),
                      lambda fn: hessian_vector(fn, features, weight)):
        for a, b in zip(jax.tree.leaves(transform(rewritten)), jax.tree.leaves(transform(plain))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def _chain_of(pool):
    linear = nn.Linear(4 * 49, 3)
    return lambda x: linear(pool(x).reshape(x.shape[0], -1)), linear


def test_pooled_values_read_elsewhere_stay_computed(rng):
    pool, linear = nn.AdaptiveAvgPool2d((7, 7)), nn.Linear(4 * 49, 3)

    def both(x):  # the pooled values are an output too
        pooled = pool(x)
        return linear(pooled.reshape(x.shape[0], -1)), pooled

    x = jnp.asarray(rand(rng, 2, 4, 1, 1))
    names = _names(_pooled_linear.reassociated(both), x)
    assert "expanding_adaptive_avg_pool" in names and "pooled_product" not in names
    for ours, plain in zip(_pooled_linear.reassociated(both)(x), both(x)):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(plain))


@pytest.mark.parametrize("shape, dtype", [
    ((2, 4, 9, 9), jnp.float32),  # a pool that reduces: f W'^T would be wider, not narrower
    ((2, 4, 1, 1), jnp.bfloat16),  # W' summed in bfloat16 would be rounded
])
def test_chains_left_as_they_are(rng, shape, dtype):
    chain, linear = _chain_of(nn.AdaptiveAvgPool2d((7, 7)))
    linear.to(dtype)
    x = jnp.asarray(rand(rng, *shape), dtype)
    assert "pooled_product" not in _names(_pooled_linear.reassociated(chain), x)


def test_a_literal_flattened_into_a_linear_layer_is_left_alone():
    """The reshape's operand is a jaxpr literal (not a variable with a producer)."""
    chain = lambda w: dl.nn.functional.linear(jax.lax.reshape(2.0, (1, 1)), w)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(_pooled_linear.reassociated(chain)(jnp.ones((3, 1)))),
                                  np.full((1, 3), 2.0))


def test_auxiliary_results_pass_through_as_they_are():
    head = _head(nn, "AdaptiveAvgPool2d", 4 * 49, (7, 7))
    x = jnp.ones((2, 4, 1, 1))
    aux = {"name": "vgg", "scale": 1.5, "count": 3, "none": None}
    (_, got), _ = dl.value_and_grad(lambda m: (m(x).sum(), aux), has_aux=True)(head)
    assert got == aux and type(got["scale"]) is float and type(got["count"]) is int


def test_only_modules_with_an_adaptive_average_pool_are_traced_first():
    assert _pooled_linear.worth_tracing([_head(nn, "AdaptiveAvgPool2d", 2 * 49, (7, 7))])
    assert not _pooled_linear.worth_tracing([nn.Sequential(nn.Flatten(), nn.Linear(4, 2))])
