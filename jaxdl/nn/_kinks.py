"""Piecewise functions with PyTorch's derivative at their kinks.

Autodiff of `jnp.abs`, `jnp.maximum`, `jnp.minimum` and `jnp.clip` takes a side at a kink
that PyTorch does not: abs'(0) = 1 where torch's is sign(0) = 0, and a max or min splits a
tie in half, where torch's kernels pass the whole gradient or none, by the rule each op
states. A user proving a model equal to its torch twin meets these ties whenever inputs
are exact (integer data, ReLU zeros, saturated activations). Each function here has the
value of its jnp counterpart and the derivative of the torch op named in its docstring
(tested at the kinks in tests/nn/test_activation.py, test_distance.py and
tests/interop/test_from_torch_export.py).
"""

import jax
import jax.numpy as jnp


def abs(x):  # noqa: A001 - torch's name
    """|x| whose derivative at 0 is torch's sign(0) = 0: x sign(x), the same value for
    every real x, -0.0 and NaN included."""
    if jnp.issubdtype(jnp.result_type(x), jnp.complexfloating):
        return jnp.abs(x)
    return x * jnp.sign(x)


def clamp_min_zero(z):
    """max(z, 0) with `torch.clamp_min(z, 0)`'s derivative: the gradient passes at 0."""
    return jnp.where(z >= 0, z, 0)


def hinge(z):
    """max(z, 0) with the derivative of torch's margin-loss kernels (`if (z > 0)`): none at 0."""
    return jnp.where(z > 0, z, 0)


def negative_part(z):
    """min(z, 0) with the derivative torch's ELU family takes: all of it at 0."""
    return jnp.where(z > 0, 0, z)


@jax.custom_jvp
def hardtanh_clamp(x, low, high):
    """clip(x, low, high) with hardtanh's derivative: the tangent where low < x < high, zero
    elsewhere, the bounds included (relu6, hardtanh, hardsigmoid). Autodiff of `jnp.clip`
    also costs time: XLA's CPU backend evaluated it as four selects and two divides per
    element in each backward loop that reads it, and MobileNetV2's training step at 224 px
    ran 3-5% faster with this derivative (docs/design.md, "Clamps with PyTorch's
    derivative")."""
    return jnp.clip(x, low, high).astype(x.dtype)


@hardtanh_clamp.defjvp
def _hardtanh_clamp_jvp(primals, tangents):
    x, low, high = primals
    inside = (x > low) & (x < high)
    return (hardtanh_clamp(x, low, high),
            jnp.where(inside, tangents[0], jnp.zeros_like(tangents[0])))


@jax.custom_jvp
def clamp(x, low, high):
    """`torch.clamp` (a bound may be None, a number or an array), with its derivative: x's
    tangent passes where low <= x <= high, the bounds included, and an array bound's where
    x is beyond it."""
    return jnp.clip(x, low, high)


@clamp.defjvp
def _clamp_jvp(primals, tangents):
    x, low, high = primals
    d_x, d_low, d_high = tangents
    inside = jnp.ones(x.shape, bool)
    beyond = []
    if low is not None:
        inside = inside & (x >= low)
        beyond.append((x < low, d_low))
    if high is not None:
        inside = inside & (x <= high)
        beyond.append((x > high, d_high))
    zero = jnp.zeros_like(d_x)
    tangent = jnp.where(inside, d_x, zero)
    for mask, d_bound in beyond:
        if jnp.issubdtype(d_bound.dtype, jnp.inexact):  # an integer bound's is float0
            tangent = tangent + jnp.where(mask, d_bound, zero).astype(d_x.dtype)
    return clamp(x, low, high), tangent
