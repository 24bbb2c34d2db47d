"""Convolutions as matrix products, for XLA's CPU backend.

On CPU, XLA runs a convolution's weight gradient as one more convolution whose
"kernel" is the whole output gradient; for layers with large feature maps that
is its slowest kernel by far (docs/design.md: the layer-2 weight gradient of the
benchmark CNN took 18.5 ms of a 27 ms layer). The same gradient is one matrix
product of the input's patches with the output gradient, and XLA's CPU matrix
products run near the machine's peak. Forward passes and input gradients stay
XLA convolutions, except where the patches matrix is narrow (few input channels,
as in a network's first layer), where the product is again faster.

Transposed convolutions are the adjoint of the patches product: one matrix
product spreads every input pixel into its k*k window, then the windows are
summed back into the image ("col2im", the transpose of `patches`).

Everything here is channels-last: x (N, *S, C), weights (*K, C_in, C_out).
Only `groups == 1` comes here; `_conv.py` decides when.
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp

# Patches at most this wide (kernel volume * input channels) make the forward pass a
# matrix product too: below it XLA's direct convolution loses (benchmarks/layers.py --conv).
NARROW_PATCHES = 64


def _out_sizes(spatial, kernel, stride, dilation):
    return tuple((size - d * (k - 1) - 1) // s + 1
                 for size, k, s, d in zip(spatial, kernel, stride, dilation))


def patches(x, kernel, stride, dilation):
    """(N, *S, C) -> (N, *out, prod(kernel) * C): for every output position, its window's
    elements, kernel-offset-major then channel (the order of `weight_matrix`). Built from
    one strided slice per kernel offset, which XLA fuses into a single copy."""
    outs = _out_sizes(x.shape[1:-1], kernel, stride, dilation)
    views = []
    for offset in itertools.product(*map(range, kernel)):
        start = (0, *(o * d for o, d in zip(offset, dilation)), 0)
        limit = (x.shape[0], *(st + (n - 1) * s + 1 for st, n, s in zip(start[1:-1], outs, stride)),
                 x.shape[-1])
        views.append(jax.lax.slice(x, start, limit, (1, *stride, 1)))
    stacked = jnp.stack(views, axis=-2)
    return stacked.reshape(*stacked.shape[:-2], -1)


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def _xla_conv(x, w, stride, dilation):
    letters = "DHW"[3 - (x.ndim - 2):]
    spec = ("N" + letters + "C", letters + "IO", "N" + letters + "C")
    return jax.lax.conv_general_dilated(x, w, stride, "VALID", rhs_dilation=dilation,
                                        dimension_numbers=spec)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def conv(x, w, stride, dilation):
    """Valid (pre-padded) convolution of x (N, *S, C) with w (*K, C, O) -> (N, *out, O)."""
    return _conv_fwd(x, w, stride, dilation)[0]


def _conv_fwd(x, w, stride, dilation):
    kernel, c_in = w.shape[:-2], w.shape[-2]
    if math.prod(kernel) * c_in <= NARROW_PATCHES:
        cols = patches(x, kernel, stride, dilation)
        y = (_flat(cols) @ w.reshape(-1, w.shape[-1])).reshape(*cols.shape[:-1], w.shape[-1])
    else:
        y = _xla_conv(x, w, stride, dilation)
    # Only x and w are kept: the patches are k*k times larger than x, so the backward
    # pass rebuilds them rather than holding them through the forward pass.
    return y, (x, w)


def _conv_bwd(stride, dilation, residuals, dy):
    x, w = residuals
    cols = patches(x, w.shape[:-2], stride, dilation)
    dw = jax.lax.dot_general(_flat(cols), _flat(dy), (((0,), (0,)), ((), ())))
    _, input_vjp = jax.vjp(lambda x: _xla_conv(x, w, stride, dilation), x)
    (dx,) = input_vjp(dy)
    return dx, dw.reshape(w.shape).astype(w.dtype)


conv.defvjp(_conv_fwd, _conv_bwd)


def conv_transpose(x, w, stride, dilation, spatial):
    """The adjoint of `conv` with respect to its input: x (N, *out, O), w (*K, C, O) ->
    (N, *spatial, C), where `spatial` is the (padded) size of the image `conv` would read."""
    kernel, c = w.shape[:-2], w.shape[-2]
    # (N*out, O) @ (O, K*C): each input pixel's contribution to its whole window ...
    windows = _flat(x) @ jnp.moveaxis(w, -1, 0).reshape(w.shape[-1], -1)
    windows = windows.reshape(*x.shape[:-1], math.prod(kernel) * c)
    # ... summed back into the image by the transpose of `patches` (pads and adds, fused).
    image = jax.ShapeDtypeStruct((x.shape[0], *spatial, c), windows.dtype)
    (y,) = jax.linear_transpose(lambda im: patches(im, kernel, stride, dilation), image)(windows)
    return y
