"""Transposed convolutions as a matrix product, for XLA's CPU backend.

XLA runs a transposed convolution as a convolution over an input dilated with
zeros and a flipped kernel; on CPU that (and its gradients) measured 4-5x slower
than the same layer written as the adjoint of a patches product (docs/design.md):
one matrix product spreads every input pixel into its k*k window, then the
windows are summed back into the image ("col2im", the transpose of `patches`).
Autodiff turns both steps into matrix products and patch extraction.

Everything here is channels-last: x (N, *S, C), weights (*K, C_in, C_out).
Only `groups == 1` comes here; `_conv.py` decides when.
"""

import math

import jax
import jax.numpy as jnp

from jaxdl.nn._windows import window_views


def _out_sizes(spatial, kernel, stride, dilation):
    return tuple((size - d * (k - 1) - 1) // s + 1
                 for size, k, s, d in zip(spatial, kernel, stride, dilation))


def patches(x, kernel, stride, dilation):
    """(N, *S, C) -> (N, *out, prod(kernel) * C): for every output position, its window's
    elements, kernel-offset-major then channel (the row order of w (*K, C, O) reshaped to
    (-1, O)). One strided slice per kernel offset, stacked."""
    outs = _out_sizes(x.shape[1:-1], kernel, stride, dilation)
    views = list(window_views(x, 1, kernel, dilation, stride, outs, trail=1))
    stacked = jnp.stack(views, axis=-2)
    return stacked.reshape(*stacked.shape[:-2], -1)


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def conv_transpose(x, w, stride, dilation, spatial):
    """The adjoint, with respect to its input, of the valid convolution of an image
    (N, *spatial, C) with w (*K, C, O): x (N, *out, O) -> (N, *spatial, C)."""
    kernel, c = w.shape[:-2], w.shape[-2]
    # (N*out, O) @ (O, K*C): each input pixel's contribution to its whole window ...
    windows = _flat(x) @ jnp.moveaxis(w, -1, 0).reshape(w.shape[-1], -1)
    windows = windows.reshape(*x.shape[:-1], math.prod(kernel) * c)
    # ... summed back into the image by the transpose of `patches` (pads and adds, fused).
    image = jax.ShapeDtypeStruct((x.shape[0], *spatial, c), windows.dtype)
    (y,) = jax.linear_transpose(lambda im: patches(im, kernel, stride, dilation), image)(windows)
    return y
