"""Convolutions: `F.pad`, `F.conv{1,2,3}d`, `F.conv_transpose{1,2}d` and their modules.

Activations are channels-first (N, C, *spatial) and weights are PyTorch's
(out, in/groups, *k) for convolutions and (in, out/groups, *k) for transposed
convolutions. Unbatched inputs (C, *spatial) are accepted, as in PyTorch.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl import amp, backends
from jaxdl._convert import as_dtype
from jaxdl._dtypes import accumulation_dtype
from jaxdl._module import Module, Parameter, ShapeError
from jaxdl._random import KeyStream
from jaxdl.nn import _conv_cpu
from jaxdl.nn.init import bias_uniform, default_weight

_PAD_MODES = ("circular", "constant", "reflect", "replicate")


def _tuple(value, n: int, what: str) -> tuple:
    value = (value,) * n if isinstance(value, int) else tuple(value)
    if len(value) == 1:  # torch repeats a one-element tuple over the spatial axes
        return value * n
    if len(value) != n:
        raise ValueError(f"{what} must be an int or a tuple of {n} ints, got {value}")
    if what in ("stride", "dilation") and min(value) <= 0:
        raise ValueError(f"{what} must be positive, got {value}")
    return value


def _source_indices(mode, lo, hi, size):
    """Input index of every output position along one axis padded by (lo, hi) (negative crops),
    torch's rules: replicate clamps, reflect mirrors without repeating the edge, circular wraps
    what is left after cropping."""
    if mode == "circular":
        crop_lo, crop_hi = max(-lo, 0), max(-hi, 0)
        kept = size - crop_lo - crop_hi
        if max(lo, hi, 0) > kept or kept <= 0:
            raise ValueError(f"pad: circular padding ({lo}, {hi}) of an axis of size {size} wraps "
                             "around more than once")
        return crop_lo + (np.arange(kept + max(lo, 0) + max(hi, 0)) - max(lo, 0)) % kept
    j = np.arange(size + lo + hi) - lo
    if mode == "replicate":
        return np.clip(j, 0, size - 1)
    return (size - 1) - np.abs((size - 1) - np.abs(j))  # reflect


def pad(input, pad, mode: str = "constant", value=None):
    """PyTorch's F.pad: `pad` lists (left, right) pairs starting from the LAST axis.

    Negative padding crops, as in PyTorch.
    """
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad must have an even length of at most 2 * {input.ndim}, got {pad}")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"F.pad mode={mode!r}; supported: {sorted(_PAD_MODES)}")
    pairs = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        pairs[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        fill = jnp.asarray(0 if value is None else value, input.dtype)
        return jax.lax.pad(input, fill, [(lo, hi, 0) for lo, hi in pairs])
    out = input
    for axis, ((lo, hi), size) in enumerate(zip(pairs, input.shape)):
        if lo == hi == 0:
            continue
        if mode == "reflect" and max(lo, hi) >= size:
            raise ValueError(f"pad: reflect padding ({lo}, {hi}) must be smaller than the padded "
                             f"axis (size {size}; input shape {tuple(input.shape)})")
        if mode == "replicate" and size == 0:
            raise ValueError(f"pad: replicate padding of an empty axis (input shape "
                             f"{tuple(input.shape)})")
        out = jnp.take(out, _source_indices(mode, lo, hi, size), axis=axis)
    return out


def _padding_pairs(padding, kernel, dilation, stride, n):
    """(left, right) per spatial axis for an int/tuple padding or 'same'/'valid'."""
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return [(t // 2, t - t // 2) for t in totals]  # the odd element goes right, as PyTorch
    if isinstance(padding, str):
        raise ValueError(f"padding={padding!r} is not valid; use an int, a tuple, 'same' or 'valid'")
    return [(p, p) for p in _tuple(padding, n, "padding")]


def _on_cpu(groups):
    """Whether transposed convolutions take `_conv_cpu`'s matrix-product formulation
    (grouped ones and other backends keep XLA's convolution)."""
    return groups == 1 and jax.default_backend() == "cpu"


def _to_last(x, n):
    return jnp.transpose(x, (0, *range(2, n + 2), 1))


def _to_first(x, n):
    return jnp.transpose(x, (0, n + 1, *range(1, n + 1)))


def _channels_last_conv(x, w, stride, pairs, n, **options):
    """Convolution of channels-first x (N, C, *S) with w (O, I, *K), computed channels-last.

    XLA's CPU convolutions are about 2x faster in NHWC/HWIO than in NCHW/OIHW
    (docs/layers.md); the transposes around each conv mostly cancel between
    consecutive layers, and on GPU XLA's layout assignment absorbs them.
    """
    letters = "DHW"[3 - n:]
    y = jax.lax.conv_general_dilated(
        _to_last(x, n), jnp.transpose(w, (*range(2, n + 2), 1, 0)), stride, pairs,
        dimension_numbers=("N" + letters + "C", letters + "IO", "N" + letters + "C"), **options)
    return _to_first(y, n)


def _add_bias(out, bias, n):
    """out + bias per channel, summed in at least float32 so that the bias gradient (a sum over
    batch and space) accumulates there, as torch's kernels do: a bfloat16 sum was 10% off."""
    acc = accumulation_dtype(out.dtype)
    return (out.astype(acc) + bias.reshape((-1,) + (1,) * n).astype(acc)).astype(out.dtype)


def _check_conv(n, input, weight, groups, where):
    if weight.ndim != n + 2 or input.ndim not in (n + 1, n + 2):
        raise ValueError(f"{where}: expected input of {n + 1} or {n + 2} dimensions and weight of "
                         f"{n + 2}, got input {tuple(input.shape)} and weight {tuple(weight.shape)}")
    if input.shape[-n - 1] != weight.shape[1] * groups:
        raise ValueError(f"{where}: input has {input.shape[-n - 1]} channels, weight "
                         f"{tuple(weight.shape)} with groups={groups} expects "
                         f"{weight.shape[1] * groups}")


def _kernel_overflow(spatial, kernel, pairs, dilation) -> str | None:
    """Why the kernel (dilated) does not fit the padded input, which torch refuses (the output
    would be empty), or None where it fits."""
    padded = tuple(size + lo + hi for size, (lo, hi) in zip(spatial, pairs))
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    if all(e <= size for e, size in zip(extent, padded)):
        return None
    return (f"the padded input is {padded} per channel and the kernel (dilated) {extent}: the "
            "kernel can't be larger than the input; pad the input or use a smaller kernel")


def _convnd(n, input, weight, bias, stride, padding, dilation, groups, padding_mode="zeros"):
    _check_conv(n, input, weight, groups, f"F.conv{n}d")
    input, weight, bias = amp.lower(input, weight, bias)
    stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    unbatched = input.ndim == n + 1
    x = input[None] if unbatched else input
    pairs = _padding_pairs(padding, weight.shape[2:], dilation, stride, n)
    if padding_mode != "zeros":
        x = pad(x, [p for pair in reversed(pairs) for p in pair], padding_mode)
        pairs = [(0, 0)] * n
    overflow = _kernel_overflow(x.shape[2:], weight.shape[2:], pairs, dilation)
    if overflow:
        raise ValueError(f"F.conv{n}d: {overflow}")
    weight = weight.astype(x.dtype)
    if jax.default_backend() == "cpu":
        out = _cpu_conv(x, weight, stride, pairs, dilation, groups, n)
    else:
        out = _channels_last_conv(x, weight, stride, pairs, n, rhs_dilation=dilation,
                                  feature_group_count=groups)
    if bias is not None:
        out = _add_bias(out, bias, n)
    return out[0] if unbatched else out


def _cpu_conv(x, w, stride, pairs, dilation, groups, n):
    """On CPU the lowering of each pass depends on the shape (`_conv_cpu.plan`), after kernel
    offsets that read only padding are cropped (`_conv_cpu.crop_dead_taps`); the choice and
    the kernel that runs are recorded for `dl.backends.cpu.choices()`."""
    key = {"input": x.shape, "weight": w.shape, "stride": tuple(stride),
           "padding": tuple(map(tuple, pairs)), "dilation": tuple(dilation), "groups": groups,
           "dtype": jnp.dtype(x.dtype).name}
    if backends.cpu.benchmark:
        x, w, pairs = _conv_cpu.crop_dead_taps(x, w, stride, pairs, dilation)
    last_shape = (x.shape[0], *x.shape[2:], x.shape[1])
    plan = _conv_cpu.plan(last_shape, w.shape, stride, pairs, dilation, groups,
                          choose=backends.cpu.benchmark)
    backends.cpu._record(key, {"forward": plan.forward, "input_grad": plan.input_grad,
                               "weight_grad": plan.weight_grad, "kernel": w.shape[2:]})
    if not plan.channels_last:
        return _conv_cpu.conv(x, w, plan)
    return _to_first(_conv_cpu.conv(_to_last(x, n), w, plan), n)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution of (N, C_in, L) with weight (C_out, C_in/groups, k)."""
    return _convnd(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution of (N, C_in, H, W) with weight (C_out, C_in/groups, kH, kW)."""
    return _convnd(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d convolution of (N, C_in, D, H, W) with weight (C_out, C_in/groups, kD, kH, kW)."""
    return _convnd(3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transposend(n, input, weight, bias, stride, padding, output_padding, groups, dilation):
    """The gradient of a convolution with respect to its input (see the two formulations
    below)."""
    input, weight, bias = amp.lower(input, weight, bias)
    stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    padding = _tuple(padding, n, "padding")
    output_padding = _tuple(output_padding, n, "output_padding")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= max(s, d):
            raise ValueError(
                f"output_padding {output_padding} must be smaller than stride {stride} or "
                f"dilation {dilation}")
    unbatched = input.ndim == n + 1
    x = input[None] if unbatched else input
    if _on_cpu(groups):
        out = _conv_transpose_cpu(x, weight.astype(x.dtype), stride, padding, output_padding,
                                  dilation, n)
    else:
        out = _conv_transpose_xla(x, weight.astype(x.dtype), stride, padding, output_padding,
                                  groups, dilation, n)
    if bias is not None:
        out = _add_bias(out, bias, n)
    return out[0] if unbatched else out


def _conv_transpose_cpu(x, weight, stride, padding, output_padding, dilation, n):
    """The adjoint of a convolution over the padded output image (output_padding widens it
    at the far end), cropped by `padding` on each side."""
    kernel = weight.shape[2:]
    full = [(size - 1) * s + d * (k - 1) + 1 + op for size, s, d, k, op in
            zip(x.shape[2:], stride, dilation, kernel, output_padding)]
    w_last = jnp.transpose(weight, (*range(2, n + 2), 1, 0))  # (*k, out, in)
    y = _conv_cpu.conv_transpose(_to_last(x, n), w_last, stride, dilation, full)
    y = y[(slice(None), *(slice(p, size - p) for p, size in zip(padding, full)))]
    return _to_first(y, n)


def _conv_transpose_xla(x, weight, stride, padding, output_padding, groups, dilation, n):
    """Dilate the input by `stride`, convolve with the flipped, transposed kernel, padding each
    side by dilation * (k - 1) - padding (+ output_padding)."""
    c_in, c_out_g, *kernel = weight.shape
    # (in, out/g, *k) -> (out, in/g, *k), spatially flipped.
    w = weight.reshape(groups, c_in // groups, c_out_g, *kernel)
    w = jnp.swapaxes(w, 1, 2).reshape(groups * c_out_g, c_in // groups, *kernel)
    w = jnp.flip(w, axis=tuple(range(2, 2 + n)))
    pairs = [(d * (k - 1) - p, d * (k - 1) - p + op)
             for k, d, p, op in zip(kernel, dilation, padding, output_padding)]
    return _channels_last_conv(x, w, (1,) * n, pairs, n, lhs_dilation=stride,
                               rhs_dilation=dilation, feature_group_count=groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 1-d convolution; weight (C_in, C_out/groups, k)."""
    return _conv_transposend(1, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 2-d convolution; weight (C_in, C_out/groups, kH, kW)."""
    return _conv_transposend(2, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 3-d convolution; weight (C_in, C_out/groups, kD, kH, kW)."""
    return _conv_transposend(3, input, weight, bias, stride, padding, output_padding, groups,
                             dilation)


def conv_tbc(input, weight, bias, pad: int = 0):  # noqa: F811 (torch's argument name)
    """torch's time-batch-channel conv1d: input (T, B, C_in), weight (K, C_in, C_out), bias
    (C_out), `pad` zero steps on both ends of T; output (T + 2 pad - K + 1, B, C_out)."""
    out = conv1d(jnp.transpose(input, (1, 2, 0)), jnp.transpose(weight, (2, 1, 0)), bias,
                 padding=pad)
    return jnp.transpose(out, (2, 0, 1))


class _ConvNd(Module):
    _n = 0
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None,
                 output_padding=0, *, key=None):
        super().__init__()
        n = self._n
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels {in_channels} and out_channels {out_channels} must "
                             f"be divisible by groups {groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode={padding_mode!r}; use 'zeros', 'reflect', "
                             "'replicate' or 'circular'")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f"Only 'zeros' padding mode is supported for {type(self).__name__}")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"padding={padding!r}; use 'same', 'valid', an int or a tuple")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride = _tuple(stride, n, "stride")
        if padding == "same" and any(s != 1 for s in self.stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n, "padding")
        self.dilation = _tuple(dilation, n, "dilation")
        self.output_padding = _tuple(output_padding, n, "output_padding")
        self.groups, self.padding_mode = groups, padding_mode
        keys = KeyStream(key)
        dtype = as_dtype(dtype, jnp.float32)
        shape = ((in_channels, out_channels // groups) if self._transposed
                 else (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(default_weight(keys(), shape).astype(dtype))
        if bias:
            fan_in = shape[1] * math.prod(self.kernel_size)
            self.bias = Parameter(bias_uniform(keys(), (out_channels,), fan_in).astype(dtype))
        else:
            self.register_parameter("bias", None)

    def _check(self, input):
        self._check_input(input, (self._n + 1, self._n + 2), -self._n - 1, self.in_channels)
        self._check_floating(input)
        if not self._transposed:
            pairs = _padding_pairs(self.padding, self.kernel_size, self.dilation, self.stride,
                                   self._n)
            overflow = _kernel_overflow(input.shape[-self._n:], self.kernel_size, pairs,
                                        self.dilation)
            if overflow:
                raise ShapeError(f"{self._describe()}: input of shape {tuple(input.shape)}: "
                                 f"{overflow}")

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding!r}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None, *, key=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         bias, padding_mode, device, dtype, key=key)

    def forward(self, input):
        self._check(input)
        return _convnd(self._n, input, self.weight, self.bias, self.stride, self.padding,
                       self.dilation, self.groups, self.padding_mode)


class Conv1d(_Conv):
    _n = 1


class Conv2d(_Conv):
    _n = 2


class Conv3d(_Conv):
    _n = 3


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None, *, key=None):
        if isinstance(padding, str):
            raise ValueError(f"padding={padding!r} is not supported for {type(self).__name__}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         bias, padding_mode, device, dtype, output_padding, key=key)

    def forward(self, input, output_size=None):
        if output_size is not None:
            raise NotImplementedError(f"{self._describe()}: forward(output_size=...)")
        self._check(input)
        return _conv_transposend(self._n, input, self.weight, self.bias, self.stride,
                                 self.padding, self.output_padding, self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    _n = 1


class ConvTranspose2d(_ConvTranspose):
    _n = 2


class ConvTranspose3d(_ConvTranspose):
    _n = 3
