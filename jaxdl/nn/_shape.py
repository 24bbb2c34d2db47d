"""Flatten and Unflatten; pixel and channel shuffles."""

import math

import jax.numpy as jnp

from jaxdl._module import Module


def pixel_shuffle(input, upscale_factor: int):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = upscale_factor
    if input.ndim < 3 or input.shape[-3] % (r * r):
        raise ValueError(f"pixel_shuffle: expected input (*, C * {r * r}, H, W) for "
                         f"upscale_factor={r}, got shape {tuple(input.shape)}")
    *lead, c, h, w = input.shape
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = jnp.moveaxis(x, (-4, -3), (-3, -1))  # (*, C, H, r, W, r)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of pixel_shuffle."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = jnp.moveaxis(x, (-3, -1), (-4, -3))  # (*, C, r, r, H, W)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(input, groups: int):
    n, c, *rest = input.shape
    return jnp.swapaxes(input.reshape(n, groups, c // groups, *rest), 1, 2).reshape(input.shape)


# torch's kernel-level name for the same permutation
native_channel_shuffle = channel_shuffle


class Flatten(Module):
    """Flattens axes start_dim..end_dim into one (PyTorch's defaults keep the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        n = max(input.ndim, 1)
        start, end = self.start_dim % n, self.end_dim % n
        if input.ndim and start > end:
            raise self._input_error(f"start_dim {self.start_dim} <= end_dim {self.end_dim} for "
                                    "input of shape", "", tuple(input.shape))
        if input.ndim == 0:
            return input.reshape(1)
        shape = input.shape
        return input.reshape(shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits axis `dim` into `unflattened_size` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        if not -input.ndim <= self.dim < input.ndim:
            raise self._input_error(f"input with an axis {self.dim}, got shape", "",
                                    tuple(input.shape))
        dim = self.dim % input.ndim
        sizes = self.unflattened_size
        known = math.prod(s for s in sizes if s != -1)
        if (-1 not in sizes and known != input.shape[dim]) or input.shape[dim] % max(known, 1):
            raise self._input_error(f"axis {dim} of size", math.prod(sizes) if -1 not in sizes
                                    else f"a multiple of {known}", input.shape[dim])
        return input.reshape(input.shape[:dim] + sizes + input.shape[dim + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
