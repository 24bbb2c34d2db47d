"""`F.interpolate`: nearest, (bi|tri)linear, bicubic and area resizing of the trailing spatial axes.

Each spatial axis is resized by a small (out, in) interpolation matrix built
with numpy from the static sizes, so the op is one contraction per axis and
its gradient is exact.
"""

import math

import jax.numpy as jnp
import numpy as np

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}
_CUBIC_A = -0.75  # PyTorch's cubic convolution coefficient


def _cubic_weights(t):
    """Weights of the taps at floor - 1, floor, floor + 1, floor + 2 for fraction t (Keys)."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _source_coords(out_len, in_len, scale, align_corners):
    """Fractional source coordinate of every output position, PyTorch's formulas."""
    dst = np.arange(out_len, dtype=np.float64)
    if align_corners:
        return dst * ((in_len - 1) / (out_len - 1) if out_len > 1 else 0.0)
    return np.maximum((dst + 0.5) * scale - 0.5, 0.0)


def _axis_matrix(mode, out_len, in_len, scale, align_corners):
    m = np.zeros((out_len, in_len))  # float64: cast to the input dtype when applied
    rows = np.arange(out_len)
    if mode == "nearest":
        m[rows, np.minimum(np.floor(rows * scale).astype(int), in_len - 1)] = 1
    elif mode == "nearest-exact":
        m[rows, np.minimum(np.floor((rows + 0.5) * scale).astype(int), in_len - 1)] = 1
    elif mode == "area":  # adaptive average pooling: the window [floor(o in/out), ceil((o+1) in/out))
        for o in rows:
            start, end = (o * in_len) // out_len, -((-(o + 1) * in_len) // out_len)
            m[o, start:end] = 1 / (end - start)
    elif mode == "bicubic":  # torch does not clamp the source coordinate at 0 here
        src = (_source_coords(out_len, in_len, scale, True) if align_corners
               else (rows + 0.5) * scale - 0.5)
        base = np.floor(src).astype(int)
        for tap, weight in zip(range(-1, 3), _cubic_weights(src - base)):
            np.add.at(m, (rows, np.clip(base + tap, 0, in_len - 1)), weight)
    else:
        src = _source_coords(out_len, in_len, scale, align_corners)
        lo = np.minimum(np.floor(src).astype(int), in_len - 1)
        hi = np.minimum(lo + 1, in_len - 1)
        frac = src - lo
        np.add.at(m, (rows, lo), 1 - frac)
        np.add.at(m, (rows, hi), frac)
    return m


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize (N, C, *spatial) with PyTorch's index conventions.

    Arguments:
        size: output spatial size (int or tuple); or
        scale_factor: multiplier(s) of the spatial size (output size floored).
        mode: 'nearest', 'nearest-exact', 'linear', 'bilinear', 'trilinear', 'bicubic' or
            'area' (adaptive average pooling).
        align_corners: for the linear and bicubic modes, as in PyTorch (default False).
    """
    if antialias:
        raise NotImplementedError("F.interpolate(antialias=True)")
    n = input.ndim - 2
    if mode not in ("nearest", "nearest-exact", "area") and mode not in _LINEAR:
        raise ValueError(f"F.interpolate: mode={mode!r} is not one of 'nearest', 'nearest-exact', "
                         f"'linear', 'bilinear', 'trilinear', 'bicubic', 'area'")
    if mode in _LINEAR and _LINEAR[mode] != n:
        raise ValueError(f"mode={mode!r} expects {_LINEAR[mode] + 2}-d input, got {input.ndim}-d")
    if mode not in _LINEAR and align_corners is not None:
        raise ValueError(f"align_corners is only valid for the linear modes, not {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ValueError("give exactly one of size and scale_factor")
    spatial = input.shape[2:]
    if size is not None:
        outs = (size,) * n if isinstance(size, int) else tuple(size)
        scales = [i / o for i, o in zip(spatial, outs)]
    else:
        factors = (scale_factor,) * n if isinstance(scale_factor, int | float) else scale_factor
        outs = tuple(math.floor(i * f) for i, f in zip(spatial, factors))
        scales = ([i / o for i, o in zip(spatial, outs)] if recompute_scale_factor
                  else [1.0 / f for f in factors])
    x = input
    for axis, o, i, s in zip(range(2, input.ndim), outs, spatial, scales):
        m = _axis_matrix(mode, o, i, s, bool(align_corners))
        x = jnp.moveaxis(jnp.tensordot(x, jnp.asarray(m.T, x.dtype), axes=([axis], [0])), -1,
                         axis)
    return x


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated in PyTorch in favour of interpolate; kept for ported code."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
