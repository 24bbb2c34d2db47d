"""Normalisation: batch, sync-batch, layer, group, RMS, instance and local response norms.

Statistics are computed in at least float32 and the result is cast back to
the input dtype, so bfloat16 activations keep float32 statistics.

BatchNorm in training mode writes its running statistics through attribute
assignment (`self.running_mean = ...`), which `dl.jit`/`dl.value_and_grad`
thread out of the traced step like any other module state.

Training-mode BatchNorm (outside a mapped axis) is a `jax.custom_jvp` whose tangent
is the closed-form derivative; reverse mode transposes it into the textbook backward
(two per-channel sums, one elementwise pass) rather than differentiating the two-pass
statistics op by op, which on XLA CPU was about 2x slower (docs/design.md). Forward
mode and higher derivatives still work. SyncBatchNorm across a mapped axis keeps
plain autodiff through its `pmean`-ed moments.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp

from jaxdl import amp
from jaxdl._convert import as_dtype
from jaxdl._dtypes import accumulation_dtype
from jaxdl._module import Module, Parameter
from jaxdl._transforms import data_axis
from jaxdl.nn._distance import vector_norm


def _f32(x):
    return x.astype(accumulation_dtype(x.dtype))


def _channel_shape(x):
    """Shape that broadcasts a per-channel (axis 1) vector against x."""
    return (1, -1) + (1,) * (x.ndim - 2)


def _affine(y, weight, bias, shape):
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _batch_stats(x, axis_name=None):
    """Per-channel mean, biased variance and sample count over every axis but 1.

    With `axis_name` (inside a mapped/sharded step) the moments are averaged
    over that axis, giving statistics of the global batch.
    """
    axes = (0,) + tuple(range(2, x.ndim))
    xf = _f32(x)
    mean = jnp.mean(xf, axes)
    count = x.size // x.shape[1]
    if axis_name is None:
        # One pass (E[x^2] - E[x]^2) is faster, but loses the variance to cancellation when
        # mean^2 >> var; then a second pass over x - mean. Within the bound below the
        # one-pass error is at most about 100 float32 roundings of the variance.
        fast = jnp.mean(jnp.square(xf), axes) - jnp.square(mean)
        safe = jnp.all(fast >= 1e-2 * jnp.square(mean))
        var = jax.lax.cond(safe, lambda: jnp.maximum(fast, 0.0), lambda: jnp.mean(
            jnp.square(xf - mean.reshape(_channel_shape(x))), axes))
        return mean, var, count
    mean, meansq = jax.lax.pmean((mean, jnp.mean(jnp.square(xf), axes)), axis_name)
    count = count * jax.lax.psum(1, axis_name)
    # E[x^2] - E[x]^2 can dip below zero by rounding.
    return mean, jnp.maximum(meansq - jnp.square(mean), 0.0), count


def _normalize_channels(x, mean, var, weight, bias, eps):
    shape = _channel_shape(x)
    y = (_f32(x) - mean.reshape(shape)) * jax.lax.rsqrt(var.reshape(shape) + eps)
    return _affine(y, weight, bias, shape).astype(x.dtype)


def _train_norm_primal(x, weight, bias, eps):
    shape = _channel_shape(x)
    mean, var, _ = _batch_stats(x)
    scale = jax.lax.rsqrt(var + eps)
    xhat = (_f32(x) - mean.reshape(shape)) * scale.reshape(shape)
    y = xhat * weight.reshape(shape) + bias.reshape(shape)
    return (y.astype(x.dtype), mean, var), (xhat, scale)


@partial(jax.custom_jvp, nondiff_argnums=(3,))
def _train_norm(x, weight, bias, eps):
    """Training-mode BatchNorm: (output, batch mean, biased batch variance).

    Its tangent is the closed form, linear in the input tangents, so reverse mode
    transposes it into the textbook backward (per-channel sums of g and g * xhat, then
    one elementwise pass) instead of differentiating the two-pass statistics.
    """
    return _train_norm_primal(x, weight, bias, eps)[0]


@_train_norm.defjvp
def _train_norm_jvp(eps, primals, tangents):
    x, weight, bias = primals
    dx, dweight, dbias = tangents
    (y, mean, var), (xhat, scale) = _train_norm_primal(x, weight, bias, eps)
    shape, n = _channel_shape(x), x.size // x.shape[1]
    dx = _f32(dx)
    # mean(dx) and mean(dx * xhat) per channel; the per-channel factors multiply the
    # reduced vectors, not the full map, so the transpose reduces g and g * xhat only
    # (the same two sums as the weight and bias gradients).
    axes = (0,) + tuple(range(2, x.ndim))
    dmean, dxhat_sum = jnp.sum(dx, axes) / n, jnp.sum(dx * xhat, axes) / n
    gain = weight * scale
    # One product xhat * (per-channel vector) and one per-channel shift, so that the
    # transpose computes sum(g * xhat) and sum(g) once for the input and weight gradients.
    dy = (dx * gain.reshape(shape) + xhat * (dweight - gain * dxhat_sum).reshape(shape)
          + (dbias - gain * dmean).reshape(shape))
    dvar = 2 * dxhat_sum / scale  # d mean((x - mean)^2), with x - mean = xhat / scale
    return (y, mean, var), (dy.astype(y.dtype), dmean, dvar)


def _batch_norm_train(x, weight, bias, eps):
    """`_train_norm` with torch's optional affine parameters (None: scale 1, shift 0)."""
    c = x.shape[1]
    weight = jnp.ones((c,), jnp.float32) if weight is None else weight
    bias = jnp.zeros((c,), jnp.float32) if bias is None else bias
    return _train_norm(x, weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """PyTorch's F.batch_norm output. Arrays are immutable: the running statistics are NOT
    updated here (use nn.BatchNorm*d, which writes them back as module state)."""
    input = amp.full(input)
    if input.ndim < 2:
        if input.size == 0:  # torch passes an empty 1-d input through
            return input
        raise ValueError(f"batch_norm: expected input (N, C, ...) of at least 2 dimensions, got "
                         f"shape {tuple(input.shape)}")
    for name, value in (("running_mean", running_mean), ("running_var", running_var),
                        ("weight", weight), ("bias", bias)):
        if value is not None and jnp.shape(value) != (input.shape[1],):
            raise ValueError(f"batch_norm: {name} must have shape ({input.shape[1]},) (the "
                             f"input's channels), got {jnp.shape(value)}")
    if training or running_mean is None:
        return _batch_norm_train(input, weight, bias, eps)[0]
    return _normalize_channels(input, running_mean, running_var, weight, bias, eps)


def _last_axes_norm(input, normalized_shape, eps, center: bool, weight=None, bias=None):
    """Normalise over the trailing `normalized_shape` axes, then scale and shift.

    It runs on the input as a (rows, features) array: XLA on CPU hands the reductions to
    YNNPACK, which ran them 3.7x slower on a (1, 512, 128) input than on (512, 128) (a
    leading axis of extent 1, as in a batch of one; 2026-12-01, forward+backward)."""
    if tuple(input.shape[input.ndim - len(normalized_shape):]) != normalized_shape:
        raise ValueError(f"normalized_shape {normalized_shape} is not the trailing shape of the "
                         f"input {tuple(input.shape)}")
    features = math.prod(normalized_shape)
    rows = math.prod(input.shape[:input.ndim - len(normalized_shape)])
    x = _f32(input).reshape((rows, features) if rows != 1 else (features,))
    if center:
        x = x - jnp.mean(x, -1, keepdims=True)
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps)
    return _affine(y, weight, bias, (features,)).reshape(input.shape)


def _shape_tuple(normalized_shape):
    """torch takes an int for a 1-d normalized_shape."""
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    input = amp.full(input)
    y = _last_axes_norm(input, _shape_tuple(normalized_shape), eps, True, weight, bias)
    return y.astype(input.dtype)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """y = x / sqrt(mean(x^2) + eps) * weight; eps=None means finfo(input.dtype).eps."""
    input = amp.full(input)
    eps = jnp.finfo(input.dtype).eps if eps is None else eps
    y = _last_axes_norm(input, _shape_tuple(normalized_shape), eps, False, weight)
    return y.astype(input.dtype)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    input = amp.full(input)
    n, c = input.shape[:2]
    if c % num_groups:
        raise ValueError(f"group_norm: {c} channels are not divisible into {num_groups} groups")
    grouped = input.reshape(n, num_groups, -1)
    y = _last_axes_norm(grouped, (grouped.shape[-1],), eps, center=True).reshape(input.shape)
    return _affine(y, weight, bias, _channel_shape(input)).astype(input.dtype)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Per-sample, per-channel normalisation over the spatial axes."""
    input = amp.full(input)
    if not use_input_stats:
        return _normalize_channels(input, running_mean, running_var, weight, bias, eps)
    n_spatial = input.ndim - 2
    y = _last_axes_norm(input, input.shape[2:], eps, center=True) if n_spatial else _f32(input)
    return _affine(y, weight, bias, _channel_shape(input)).astype(input.dtype)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha/size * sum of x^2 over `size` neighbouring channels)^beta."""
    sq = jnp.square(_f32(input))
    lead, trail = size // 2, (size - 1) // 2
    padded = jnp.pad(sq, [(0, 0), (lead, trail)] + [(0, 0)] * (input.ndim - 2))
    window = (1, size) + (1,) * (input.ndim - 2)
    summed = jax.lax.reduce_window(padded, 0.0, jax.lax.add, window, (1,) * input.ndim, "VALID")
    return (input / (k + alpha / size * summed) ** beta).astype(input.dtype)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """x / max(||x||_p along dim, eps) (p = 0 counts non-zero entries, as torch)."""
    if input.ndim == 0:  # torch: a 0-d input is a one-element vector
        return normalize(input[None], p, 0, eps)[0]
    x = input.astype(accumulation_dtype(input.dtype))  # as the other norms (module docstring)
    return (x / jnp.maximum(vector_norm(x, p, dim, keepdims=True), eps)).astype(input.dtype)


def _register_affine(module, shape, dtype, weight: bool = True, bias: bool = True):
    """The learnable scale (ones) and shift (zeros) of a norm layer, or None parameters."""
    dtype = as_dtype(dtype, jnp.float32)
    module.register_parameter("weight", Parameter(jnp.ones(shape, dtype)) if weight else None)
    module.register_parameter("bias", Parameter(jnp.zeros(shape, dtype)) if weight and bias else None)


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d and SyncBatchNorm: PyTorch's momentum convention
    (new = (1 - momentum) * old + momentum * batch; momentum=None: cumulative average),
    unbiased running variance, `num_batches_tracked` counter."""

    _ranks = ()
    axis_name = None

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        dtype = as_dtype(dtype, jnp.float32)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _register_affine(self, (num_features,), dtype, affine)
        if track_running_stats:
            self.register_buffer("running_mean", jnp.zeros((num_features,), dtype))
            self.register_buffer("running_var", jnp.ones((num_features,), dtype))
            # PyTorch stores int64; jax defaults to 32-bit integers.
            self.register_buffer("num_batches_tracked", jnp.zeros((), jnp.int32))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def _check(self, input):
        self._check_input(input, self._ranks, 1, self.num_features)
        self._check_floating(input)

    def _stats_axis(self):
        return self.axis_name

    def forward(self, input):
        self._check(input)
        if not (self.training or self.running_mean is None):
            return _normalize_channels(input, self.running_mean, self.running_var, self.weight,
                                       self.bias, self.eps)
        axis_name = self._stats_axis()
        count = input.size // input.shape[1]
        if axis_name is None and count <= 1 and self.training:
            raise self._input_error("more than 1 value per channel when training, input shape",
                                    "", tuple(input.shape))
        if axis_name is None:
            out, mean, var = _batch_norm_train(input, self.weight, self.bias, self.eps)
        else:  # statistics across the mapped axis: plain autodiff
            mean, var, count = _batch_stats(input, axis_name)
            out = _normalize_channels(input, mean, var, self.weight, self.bias, self.eps)
        if self.training and self.track_running_stats:
            tracked = self.num_batches_tracked + 1
            self.num_batches_tracked = tracked
            factor = 1.0 / tracked if self.momentum is None else self.momentum
            unbiased = var * (count / jnp.maximum(count - 1, 1))
            stats = jax.lax.stop_gradient((mean, unbiased))
            dtype = self.running_mean.dtype
            self.running_mean = ((1 - factor) * self.running_mean + factor * stats[0]).astype(dtype)
            self.running_var = ((1 - factor) * self.running_var + factor * stats[1]).astype(dtype)
        return out

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over (N, C, *) whose statistics can span devices.

    Inside `dl.distributed.data_parallel` the statistics are `pmean`-ed over
    the data axis, so every device normalises with the global batch
    statistics, as torch's SyncBatchNorm does across processes. In a
    hand-written `shard_map`/`pmap` step, set `axis_name` (constructor
    argument or attribute) to the mapped axis. Outside any mapped step it is
    exactly BatchNorm.
    """

    _ranks = tuple(range(2, 33))

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None,
                 *, axis_name=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        if process_group is not None:
            raise NotImplementedError("SyncBatchNorm(process_group=...): use axis_name")
        self.axis_name = axis_name

    def _stats_axis(self):
        return self.axis_name or data_axis()


class InstanceNorm2d(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__()
        if track_running_stats:
            raise NotImplementedError("InstanceNorm2d(track_running_stats=True)")
        dtype = as_dtype(dtype, jnp.float32)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _register_affine(self, (num_features,), dtype, affine)

    def forward(self, input):
        self._check_input(input, (3, 4), -3, self.num_features)
        self._check_floating(input)
        x = input[None] if input.ndim == 3 else input
        out = instance_norm(x, weight=self.weight, bias=self.bias, eps=self.eps)
        return out[0] if input.ndim == 3 else out

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


def _shape_tuple(shape):
    return (shape,) if isinstance(shape, int) else tuple(shape)


class _LastAxesNorm(Module):
    def _check(self, input):
        n = len(self.normalized_shape)
        if input.ndim < n or tuple(input.shape[input.ndim - n:]) != self.normalized_shape:
            raise self._input_error("input whose trailing shape is", self.normalized_shape,
                                    f"shape {tuple(input.shape)}")
        self._check_floating(input)


class LayerNorm(_LastAxesNorm):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        dtype = as_dtype(dtype, jnp.float32)
        self.normalized_shape = _shape_tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _register_affine(self, self.normalized_shape, dtype, elementwise_affine, bias)

    def forward(self, input):
        self._check(input)
        y = _last_axes_norm(input, self.normalized_shape, self.eps, center=True)
        return _affine(y, self.weight, self.bias, self.normalized_shape).astype(input.dtype)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class RMSNorm(_LastAxesNorm):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        dtype = as_dtype(dtype, jnp.float32)
        self.normalized_shape = _shape_tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(jnp.ones(self.normalized_shape, dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        self._check(input)
        return rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels {num_channels} must be divisible by num_groups "
                             f"{num_groups}")
        dtype = as_dtype(dtype, jnp.float32)
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine)
        _register_affine(self, (num_channels,), dtype, affine)

    def forward(self, input):
        self._check_input(input, tuple(range(2, 33)), 1, self.num_channels)
        self._check_floating(input)
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class LocalResponseNorm(Module):
    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        self._check_input(input, tuple(range(3, 33)))
        self._check_floating(input)
        return local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
