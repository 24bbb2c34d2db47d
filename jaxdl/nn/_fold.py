"""unfold (im2col) and fold (col2im) on NCHW inputs, and their modules, as in PyTorch.

`unfold` stacks one strided slice of the padded input per kernel offset: no gather, so its
gradient is a plain pad/add. `fold` is the exact linear adjoint of `unfold`
(`jax.linear_transpose`): overlapping blocks are summed, as PyTorch does, and the two can never
disagree on the block layout.
"""


import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._module import Module
from jaxdl.nn._conv import _tuple
from jaxdl.nn._windows import stack_windows, window_views


def _geometry(spatial, kernel_size, dilation, padding, stride, where):
    k = _tuple(kernel_size, 2, "kernel_size")
    d = _tuple(dilation, 2, "dilation")
    p = _tuple(padding, 2, "padding")
    s = _tuple(stride, 2, "stride")
    if min(k) <= 0 or min(d) <= 0 or min(s) <= 0 or min(p) < 0:
        raise ValueError(f"{where}: kernel_size, dilation and stride must be positive and "
                         f"padding non-negative, got kernel_size={k}, dilation={d}, "
                         f"padding={p}, stride={s}")
    blocks = tuple((L + 2 * pi - di * (ki - 1) - 1) // si + 1
                   for L, ki, di, pi, si in zip(spatial, k, d, p, s))
    if min(blocks) <= 0:
        raise ValueError(f"{where}: spatial size {tuple(spatial)} with padding {p} is smaller "
                         f"than the dilated kernel {tuple(di * (ki - 1) + 1 for ki, di in zip(k, d))}")
    return k, d, p, s, blocks


def _unfold4d(x, k, d, p, s, blocks):
    """(N, C, H, W) -> (N, C * kh * kw, L): channel-major, then kernel row, then column."""
    n, c = x.shape[:2]
    x = jnp.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    cols = stack_windows(list(window_views(x, 2, k, d, s, blocks)), k, 2)  # (N, C, kh, kw, oh, ow)
    return cols.reshape(n, c * k[0] * k[1], blocks[0] * blocks[1])


def _float_input(input, where):
    input = jnp.asarray(input)
    if not jnp.issubdtype(input.dtype, jnp.floating):
        raise TypeError(f"{where}: expected a floating input, got dtype {input.dtype}")
    return input


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding blocks of a (N, C, H, W) (or unbatched (C, H, W)) input as (N, C*kh*kw, L)."""
    input = _float_input(input, "unfold")
    if input.ndim not in (3, 4):
        raise ValueError(f"unfold: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got "
                         f"shape {tuple(input.shape)}")
    x = input if input.ndim == 4 else input[None]
    geometry = _geometry(x.shape[2:], kernel_size, dilation, padding, stride, "unfold")
    out = _unfold4d(x, *geometry)
    return out if input.ndim == 4 else out[0]


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sums (N, C*kh*kw, L) blocks (or unbatched (C*kh*kw, L)) into (N, C, *output_size)."""
    input = _float_input(input, "fold")
    if input.ndim not in (2, 3):
        raise ValueError(f"fold: expected a 2-d (C*kh*kw, L) or 3-d (N, C*kh*kw, L) input, got "
                         f"shape {tuple(input.shape)}")
    x = input if input.ndim == 3 else input[None]
    size = _tuple(output_size, 2, "output_size")
    k, d, p, s, blocks = _geometry(size, kernel_size, dilation, padding, stride, "fold")
    per_block = k[0] * k[1]
    if x.shape[1] % per_block:
        raise ValueError(f"fold: expected size of input's dimension 1 to be divisible by the "
                         f"product of kernel_size {k} = {per_block}, got shape "
                         f"{tuple(input.shape)}")
    if x.shape[2] != blocks[0] * blocks[1]:
        raise ValueError(f"fold: output_size {size} with kernel_size {k}, dilation {d}, padding "
                         f"{p}, stride {s} has {blocks[0]} x {blocks[1]} = "
                         f"{blocks[0] * blocks[1]} blocks, but the input (shape "
                         f"{tuple(input.shape)}) has {x.shape[2]}")
    image = jax.ShapeDtypeStruct((x.shape[0], x.shape[1] // per_block) + size, x.dtype)
    (out,) = jax.linear_transpose(lambda im: _unfold4d(im, k, d, p, s, blocks), image)(x)
    return out if input.ndim == 3 else out[0]


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = (kernel_size, dilation,
                                                                      padding, stride)

    def forward(self, input):
        self._check_input(input, (3, 4))
        return unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        self._check_input(input, (2, 3))
        per_block = int(np.prod(_tuple(self.kernel_size, 2, "kernel_size")))
        if input.shape[-2] % per_block:
            raise self._input_error(f"input whose axis {input.ndim - 2} is a multiple of "
                                    f"prod(kernel_size) =", per_block, f"shape {tuple(input.shape)}")
        return fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                    self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")
