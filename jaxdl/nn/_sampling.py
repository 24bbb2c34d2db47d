"""Spatial transformers: `affine_grid` and `grid_sample` on 2-d (NCHW) inputs, as in PyTorch.

Grid coordinates are normalised to [-1, 1] (x = width axis first). Sampling gathers the
corner pixels from the flattened H*W plane, so the input gradient is a scatter-add and the grid
gradient comes from the interpolation weights, both by autodiff. Out-of-range coordinates are
handled as PyTorch does: 'zeros' drops out-of-bounds corners, 'border' clamps the coordinate,
'reflection' folds it back (then clamps).
"""

import jax
import jax.numpy as jnp

_MODES = ("bilinear", "nearest")
_PADDING_MODES = ("zeros", "border", "reflection")


def _base_coords(size, align_corners):
    """The normalised positions of `size` pixel centres (align_corners: of the corner pixels)."""
    if align_corners:
        return jnp.linspace(-1.0, 1.0, size) if size > 1 else jnp.zeros((1,))
    return (jnp.arange(size) * 2 + 1) / size - 1.0


def affine_grid(theta, size, align_corners=None):
    """A (N, H, W, 2) sampling grid of (x, y) = theta @ (x_out, y_out, 1) for size (N, C, H, W)."""
    size = tuple(size)
    if len(size) == 5:
        raise NotImplementedError("affine_grid: 5-d size (3-d volumes) is not supported")
    if len(size) != 4:
        raise ValueError(f"affine_grid: expected size (N, C, H, W), got {size}")
    theta = jnp.asarray(theta)
    if not jnp.issubdtype(theta.dtype, jnp.floating):
        raise TypeError(f"affine_grid: expected a floating theta, got dtype {theta.dtype}")
    if theta.shape != (size[0], 2, 3):
        raise ValueError(f"affine_grid: expected theta of shape ({size[0]}, 2, 3) for size "
                         f"{size}, got {tuple(theta.shape)}")
    h, w = size[2], size[3]
    xs = _base_coords(w, bool(align_corners)).astype(theta.dtype)
    ys = _base_coords(h, bool(align_corners)).astype(theta.dtype)
    base = jnp.stack([jnp.broadcast_to(xs[None, :], (h, w)), jnp.broadcast_to(ys[:, None], (h, w)),
                      jnp.ones((h, w), theta.dtype)], axis=-1)  # (H, W, 3)
    return jnp.einsum("hwk,nck->nhwc", base, theta)


def _reflect(coord, twice_low, twice_high):
    """Fold coord into [twice_low / 2, twice_high / 2] by mirroring at its ends (PyTorch's rule)."""
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    dist = jnp.abs(coord - low)
    extra = jnp.fmod(dist, span)
    flips = jnp.floor(dist / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _source_coords(coord, size, padding_mode, align_corners):
    """Normalised coordinate -> pixel coordinate along one axis, after padding_mode."""
    if align_corners:
        pixel = (coord + 1) / 2 * (size - 1)
    else:
        pixel = ((coord + 1) * size - 1) / 2
    if padding_mode == "reflection":
        pixel = _reflect(pixel, 0, 2 * (size - 1)) if align_corners else _reflect(pixel, -1, 2 * size - 1)
    if padding_mode in ("border", "reflection"):
        # torch's clip_coordinates_set_grad: no gradient at the ends either (in bfloat16 a
        # coordinate lands on them often)
        inside = (pixel > 0) & (pixel < size - 1)
        pixel = jnp.where(inside, pixel, jax.lax.stop_gradient(jnp.clip(pixel, 0, size - 1)))
    return pixel


def _gather(flat, ix, iy, width, height):
    """flat (N, C, H*W) at integer pixels (N, P): zero where (ix, iy) falls outside."""
    inside = (ix >= 0) & (ix < width) & (iy >= 0) & (iy < height)
    index = jnp.where(inside, iy * width + ix, 0).astype(jnp.int32)
    values = jnp.take_along_axis(flat, index[:, None, :], axis=2)
    return jnp.where(inside[:, None, :], values, 0)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Samples input (N, C, H, W) at grid (N, Ho, Wo, 2) -> (N, C, Ho, Wo)."""
    if mode not in _MODES:
        raise NotImplementedError(f"grid_sample: mode={mode!r} is not supported (use one of "
                                  f"{_MODES})")
    if padding_mode not in _PADDING_MODES:
        raise NotImplementedError(f"grid_sample: padding_mode={padding_mode!r} is not supported "
                                  f"(use one of {_PADDING_MODES})")
    input, grid = jnp.asarray(input), jnp.asarray(grid)
    if input.ndim == 5:
        raise NotImplementedError("grid_sample: 5-d input (3-d volumes) is not supported")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise ValueError(f"grid_sample: expected input (N, C, H, W) and grid (N, H_out, W_out, 2) "
                         f"with the same N, got input {tuple(input.shape)} and grid "
                         f"{tuple(grid.shape)}")
    n, c, height, width = input.shape
    out_h, out_w = grid.shape[1:3]
    g = grid.reshape(n, out_h * out_w, 2).astype(input.dtype)
    x = _source_coords(g[..., 0], width, padding_mode, bool(align_corners))
    y = _source_coords(g[..., 1], height, padding_mode, bool(align_corners))
    flat = input.reshape(n, c, height * width)
    if mode == "nearest":  # PyTorch rounds half to even (nearbyint), as jnp.round does
        out = _gather(flat, jnp.round(x).astype(jnp.int32), jnp.round(y).astype(jnp.int32),
                      width, height)
    else:
        x0, y0 = jnp.floor(x), jnp.floor(y)
        wx, wy = (x - x0)[:, None, :], (y - y0)[:, None, :]
        x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
        out = (_gather(flat, x0, y0, width, height) * (1 - wx) * (1 - wy)
               + _gather(flat, x0 + 1, y0, width, height) * wx * (1 - wy)
               + _gather(flat, x0, y0 + 1, width, height) * (1 - wx) * wy
               + _gather(flat, x0 + 1, y0 + 1, width, height) * wx * wy)
    return out.reshape(n, c, out_h, out_w)
