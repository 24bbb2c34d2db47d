"""`written_out`: an exact identity that makes XLA compute its argument once (CPU)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxdl as dl
from jaxdl.nn import functional as F
from jaxdl.nn._written_out import written_out

SPECIAL = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-40]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_every_bit_survives_under_jit(dtype):
    x = jnp.asarray(np.array(SPECIAL, np.float32)).astype(dtype).reshape(2, 4)
    y = jax.jit(written_out)(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(np.asarray(y).view(np.uint8), np.asarray(x).view(np.uint8))
    assert float(written_out(jnp.asarray(-0.0, dtype))) == 0.0
    assert np.signbit(np.float32(written_out(jnp.asarray(-0.0, dtype))))


def test_integers_pass_through():
    x = jnp.arange(5)
    assert written_out(x) is x


def test_derivatives_are_the_identity():
    x = jnp.array([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(jax.grad(lambda v: (written_out(v) ** 3).sum())(x), 3 * x**2)
    _, tangent = jax.jvp(written_out, (x,), (jnp.array([1.0, 2.0, 3.0]),))
    np.testing.assert_array_equal(tangent, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(jax.hessian(lambda v: (written_out(v) ** 3).sum())(x),
                                  np.diag(6 * np.asarray(x)))
    np.testing.assert_array_equal(jax.vmap(written_out)(jnp.ones((3, 2))), np.ones((3, 2)))


def _maximums(fn, *args):
    text = jax.jit(fn, compiler_options=dl.xla_compiler_options()).lower(*args).compile().as_text()
    return len(re.findall(r"= f32\[[0-9,]*\]\{[0-9,]*\} maximum\(", text))


def test_relu_chain_is_computed_once_for_all_its_consumers():
    """A residual-style chain of two ReLUs read by three loops: F.relu's outputs are written
    out, so each maximum is compiled once; with jax.nn.relu XLA copies the chain into the
    consumers (the check can fail)."""

    def chain(relu):
        def f(x, a, b):
            y = relu(relu(x * a + b) + x)
            return y.sum(axis=0), (y * y).sum(axis=1), jnp.where(y > 0, x, 0.0) * 2.0

        return f

    args = (jnp.ones((64, 256)), jnp.ones(256), jnp.ones(256))
    assert _maximums(chain(F.relu), *args) == 2
    assert _maximums(chain(jax.nn.relu), *args) > 2


def test_relu_matches_torch_values_and_gradient():
    x = np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32)
    x[0, :2] = [0.0, -0.0]  # (at NaN torch's gradient is 1 and JAX's 0, as before this change)
    t = torch.tensor(x, requires_grad=True)
    torch.relu(t).sum().backward()
    value, grad = jax.jit(jax.value_and_grad(lambda v: F.relu(v).sum()))(jnp.asarray(x))
    np.testing.assert_array_equal(jax.jit(F.relu)(jnp.asarray(x)), torch.relu(t).detach().numpy())
    np.testing.assert_array_equal(grad, t.grad.numpy())
