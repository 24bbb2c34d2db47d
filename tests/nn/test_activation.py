"""Activations and the softmax family (functional forms and modules) against PyTorch; gumbel_softmax by
statistics, structure and gradients (JAX's and torch's random streams differ)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_by_name, positive
from torch_twin import check_twin, pair, rand

import jaxdl.nn.functional as F


@pytest.mark.parametrize("name,args", [
    ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.7,)), ("GELU", ()),
    ("GELU", ("tanh",)), ("SiLU", ()), ("Mish", ()), ("Tanh", ()), ("Sigmoid", ()),
    ("Hardswish", ()), ("Softplus", ()), ("Softplus", (2.0, 3.0)), ("Softmax", (1,)),
    ("LogSoftmax", (-1,)),
])
def test_activation_matches_torch(name, args, rng):
    check_twin(*pair(name, *args), [rand(rng, 3, 4, 5, scale=4.0)], modes=("train",))


@pytest.mark.parametrize("dim", [-1, 1])
def test_gumbel_softmax_hard_one_hot_and_straight_through_gradient(dim):
    logits = jnp.asarray(rand(np.random.default_rng(1), 3, 5, 4))
    key = jax.random.key(3)
    soft = F.gumbel_softmax(logits, tau=0.7, dim=dim, key=key)
    hard = F.gumbel_softmax(logits, tau=0.7, hard=True, dim=dim, key=key)
    np.testing.assert_allclose(np.asarray(soft.sum(dim)), 1, rtol=1e-5)
    assert set(np.unique(np.asarray(hard))) == {0.0, 1.0}
    np.testing.assert_array_equal(np.asarray(hard.sum(dim)), 1)
    np.testing.assert_array_equal(np.argmax(np.asarray(hard), dim), np.argmax(np.asarray(soft), dim))
    w = jnp.asarray(rand(np.random.default_rng(2), 3, 5, 4))
    g_hard = jax.grad(lambda z: jnp.sum(w * F.gumbel_softmax(z, 0.7, True, dim=dim, key=key)))(logits)
    g_soft = jax.grad(lambda z: jnp.sum(w * F.gumbel_softmax(z, 0.7, dim=dim, key=key)))(logits)
    np.testing.assert_allclose(np.asarray(g_hard), np.asarray(g_soft), rtol=1e-5, atol=1e-6)


def test_gumbel_softmax_samples_the_softmax_distribution():
    logits = jnp.asarray([0.5, -1.0, 2.0, 0.0])
    samples = F.gumbel_softmax(jnp.broadcast_to(logits, (40000, 4)), hard=True, key=jax.random.key(4))
    freq = np.asarray(samples.mean(0))
    np.testing.assert_allclose(freq, np.asarray(jax.nn.softmax(logits)), atol=0.01)
    # and torch's samples have the same distribution
    t = TF.gumbel_softmax(torch.tensor(np.asarray(logits)).expand(40000, 4), hard=True).mean(0)
    np.testing.assert_allclose(freq, t.numpy(), atol=0.015)


rng = np.random.default_rng(0)


def arr(*shape, positive=False):
    x = rng.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


def test_inplace_names_return_results():
    x = jnp.asarray(arr(3, 4))
    np.testing.assert_array_equal(np.asarray(F.relu_(x)), np.asarray(F.relu(x)))
    np.testing.assert_array_equal(np.asarray(F.leaky_relu_(x, 0.2)), np.asarray(F.leaky_relu(x, 0.2)))


# F.<name>(*float inputs, *constant inputs, **kwargs): values and input gradients against torch
FUNCTIONAL_CASES = {
    "softmin": lambda rng: ([rand(rng, 4, 7)], [], dict(dim=1)),
    "hardshrink": lambda rng: ([rand(rng, 5, 6)], [], dict(lambd=0.3)),
    "softshrink": lambda rng: ([rand(rng, 5, 6)], [], dict(lambd=0.3)),
    "tanhshrink": lambda rng: ([rand(rng, 5, 6)], [], {}),
    "rrelu-eval": lambda rng: ([rand(rng, 5, 6)], [], dict(training=False)),
    "prelu-channels": lambda rng: ([rand(rng, 2, 3, 4, 4), positive(rng, 3)], [], {}),
    "prelu-single": lambda rng: ([rand(rng, 2, 3, 4), positive(rng, 1)], [], {}),
}


@pytest.mark.parametrize("case", FUNCTIONAL_CASES)
def test_functional_matches_torch(case, rng):
    floats, constants, kwargs = FUNCTIONAL_CASES[case](rng)
    check_by_name(case, floats, constants, kwargs)


# values on, inside and outside each function's kinks, where autodiff of a max, min or clip
# splits a tie in half: torch's derivative is zero at a clamp's bound (hardtanh_backward) and
# at softshrink's +-lambd, the negative side's at ELU's 0
KINK_CASES = {
    "relu6": ([-1.0, 0.0, 0.5, 6.0, 7.0, 3.0], {}),
    "hardtanh": ([-2.0, -0.5, 0.0, 0.5, 0.5, 1.0], dict(min_val=-0.5, max_val=0.5)),
    "hardsigmoid": ([-4.0, -3.0, 0.0, 1.5, 3.0, 4.0], {}),
    "hardswish": ([-4.0, -3.0, 0.0, 1.5, 3.0, 4.0], {}),
    "elu": ([-1.0, 0.0, 0.0, 1.0, 2.0, -0.5], dict(alpha=0.7)),
    "celu": ([-1.0, 0.0, 0.0, 1.0, 2.0, -0.5], dict(alpha=0.7)),
    "softshrink": ([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0], dict(lambd=0.5)),
    "prelu": ([-1.0, 0.0, 0.0, 0.5, 2.0, -0.5], dict(weight=np.asarray([0.25], np.float32))),
}


@pytest.mark.parametrize("name", KINK_CASES)
def test_activation_gradient_at_its_kinks_matches_torch(name):
    values, kwargs = KINK_CASES[name]
    x = np.asarray(values, np.float32)
    weights = np.arange(1, len(values) + 1, dtype=np.float32)
    tx = torch.tensor(x, requires_grad=True)
    t_kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    t_out = getattr(TF, name)(tx, **t_kwargs)
    (t_out * torch.tensor(weights)).sum().backward()

    def loss(v):
        return jnp.sum(getattr(F, name)(v, **kwargs) * weights)

    out, grad = jax.value_and_grad(loss)(jnp.asarray(x))
    np.testing.assert_allclose(float(out), float((t_out * torch.tensor(weights)).sum().detach()), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), tx.grad.numpy(), rtol=1e-6)
    # forward mode agrees with the reverse-mode gradient
    jvp = jax.jvp(lambda v: getattr(F, name)(v, **kwargs), (jnp.asarray(x),),
                  (jnp.ones_like(x),))[1]
    np.testing.assert_allclose(np.asarray(jvp) * weights, np.asarray(grad), rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_relu6_keeps_half_precision(dtype):
    x = jnp.asarray([-1.0, 2.0, 9.0], dtype)
    out, grad = jax.value_and_grad(lambda v: jnp.sum(F.relu6(v).astype(jnp.float32)))(x)
    assert F.relu6(x).dtype == dtype and grad.dtype == dtype
    np.testing.assert_array_equal(np.asarray(grad, np.float32), [0.0, 1.0, 0.0])
