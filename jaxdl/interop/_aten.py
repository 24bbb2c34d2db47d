"""The one table from torch.export's ATen operators to jaxdl / JAX functions.

`ATEN["add"]` is called with the node's arguments as torch.export records them
(positional in the operator's schema order, keyword-only ones by their schema
names), after torch dtypes have become numpy dtypes and devices, layouts and
memory formats `None`. A key is an overload packet (`"add"`) or, where the
overloads of one packet differ in meaning, `"packet.overload"` (`"max.dim"`),
which is looked up first. In-place variants (`add_`) use the entry of their
functional form; the replay rebinds the mutated value. Python operators that
export records for shape arithmetic (`operator.mul` on sizes) are under their
qualified names. Random operators are listed in `NEEDS_KEY` and get a fresh key as `rng=`.

An operator missing here is refused at conversion time with the line of the
user's forward it came from: never guessed.
"""

import math
import operator

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl import amp
from jaxdl.nn import _kinks
from jaxdl.nn import functional as F
from jaxdl.nn._distance import vector_norm

ATEN = {}
NEEDS_KEY = set()
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _register(*names, key=False):
    def decorate(fn):
        for name in names:
            ATEN[name] = fn
            if key:
                NEEDS_KEY.add(name)
        return fn
    return decorate


def _ignore(*names):
    """Markers torch.export inserts (shape and metadata assertions): nothing to compute."""
    for name in names:
        ATEN[name] = lambda *args, **kwargs: None


_ignore("_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range_for_size",
        "sym_constrain_range", "_assert_async")


def _same(*names, fn):
    for name in names:
        ATEN[name] = fn


def _dims(dim, ndim):
    """aten's `int[1]? dim`: None or [] means every axis."""
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
        return tuple(range(ndim))
    return tuple(dim) if isinstance(dim, list | tuple) else (dim,)


def _alpha(fn):
    def op(self, other, *, alpha=1):
        return fn(self, other if alpha == 1 else other * alpha)
    return op


# ---- elementwise -------------------------------------------------------------------------------
_same("add", fn=_alpha(jnp.add))
_same("sub", fn=_alpha(jnp.subtract))
_same("mul", fn=jnp.multiply)
_register("rsub")(lambda self, other, *, alpha=1: jnp.subtract(other, self * alpha))
_same("div", "true_divide", fn=jnp.true_divide)


@_register("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(self, other, *, rounding_mode=None):
    if rounding_mode == "floor":
        return jnp.floor_divide(self, other)
    quotient = jnp.true_divide(self, other)
    return quotient if rounding_mode is None else jnp.trunc(quotient).astype(quotient.dtype)


_same("floor_divide", fn=jnp.floor_divide)
_same("remainder", fn=jnp.remainder)
_same("fmod", fn=jnp.fmod)
_same("pow", fn=jnp.power)
_same("maximum", "max.other", fn=jnp.maximum)
_same("minimum", "min.other", fn=jnp.minimum)
_same("atan2", fn=jnp.arctan2)
for _name, _fn in {"neg": jnp.negative, "abs": _kinks.abs, "exp": jnp.exp, "log": jnp.log,
                   "log2": jnp.log2, "log10": jnp.log10, "log1p": jnp.log1p,
                   "expm1": jnp.expm1, "sqrt": jnp.sqrt, "rsqrt": jax.lax.rsqrt,
                   "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "tanh": jnp.tanh,
                   "sigmoid": jax.nn.sigmoid, "erf": jax.scipy.special.erf,
                   "reciprocal": jnp.reciprocal, "floor": jnp.floor, "ceil": jnp.ceil,
                   "trunc": jnp.trunc, "round": jnp.round, "sign": jnp.sign,
                   "square": jnp.square, "relu": jax.nn.relu, "silu": jax.nn.silu,
                   "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "mish": F.mish,
                   "logical_not": jnp.logical_not, "bitwise_not": jnp.invert,
                   "isnan": jnp.isnan, "isinf": jnp.isinf, "isfinite": jnp.isfinite,
                   "eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less,
                   "le": jnp.less_equal, "gt": jnp.greater, "ge": jnp.greater_equal,
                   "logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
                   "logical_xor": jnp.logical_xor, "bitwise_and": jnp.bitwise_and,
                   "bitwise_or": jnp.bitwise_or}.items():
    _same(_name, fn=_fn)
_register("gelu")(lambda self, *, approximate="none": F.gelu(self, approximate))
_register("leaky_relu")(lambda self, negative_slope=0.01: F.leaky_relu(self, negative_slope))
_register("hardtanh")(lambda self, min_val=-1.0, max_val=1.0: F.hardtanh(self, min_val, max_val))
_register("softplus")(lambda self, beta=1, threshold=20: F.softplus(self, beta, threshold))
_register("prelu")(F.prelu)
# expm1 of the negative part only: of large positive inputs it is inf, and the unselected
# branch's gradient (0 * inf) would be NaN
_register("elu")(lambda self, alpha=1, scale=1, input_scale=1:
                 scale * jnp.where(self > 0, self,
                                   alpha * jnp.expm1(_kinks.negative_part(self) * input_scale)))
_register("clamp", "clip")(lambda self, min=None, max=None: _kinks.clamp(self, min, max))
_register("clamp_min")(lambda self, min: _kinks.clamp(self, min, None))
_register("clamp_max")(lambda self, max: _kinks.clamp(self, None, max))
_register("where")(lambda condition, self, other: jnp.where(condition, self, other))
_register("masked_fill")(lambda self, mask, value: jnp.where(mask, jnp.asarray(value, self.dtype),
                                                               self))
_register("lerp")(lambda self, end, weight: self + weight * (end - self))


# ---- reductions --------------------------------------------------------------------------------
def _reduction(fn):
    def op(self, dim=None, keepdim=False, *, dtype=None):
        out = fn(self, axis=_dims(dim, self.ndim), keepdims=keepdim)
        return out if dtype is None else out.astype(dtype)
    return op


_register("sum")(lambda self, *, dtype=None: jnp.sum(self, dtype=dtype))
_register("sum.dim_IntList")(_reduction(jnp.sum))
_register("mean")(lambda self, *, dtype=None: jnp.mean(self, dtype=dtype))
_register("mean.dim")(_reduction(jnp.mean))
_register("prod")(lambda self, *, dtype=None: jnp.prod(self, dtype=dtype))
_register("prod.dim_int")(lambda self, dim, keepdim=False, *, dtype=None:
                          jnp.prod(self, axis=dim, keepdims=keepdim, dtype=dtype))
_register("amax")(_reduction(jnp.max))
_register("amin")(_reduction(jnp.min))
_register("max")(jnp.max)
_register("min")(jnp.min)
_register("all")(jnp.all)
_register("any")(jnp.any)
_register("all.dim", "all.dims")(_reduction(jnp.all))
_register("any.dim", "any.dims")(_reduction(jnp.any))
_register("logsumexp")(lambda self, dim, keepdim=False:
                       jax.scipy.special.logsumexp(self, _dims(dim, self.ndim), keepdims=keepdim))
_register("cumsum")(lambda self, dim, *, dtype=None: jnp.cumsum(self, dim, dtype=dtype))


def _value_and_index(indices):
    """max.dim / min.dim: the value read at the index, so that its gradient goes to that one
    entry (the first of a tie), as torch's; a max over the axis would split it among ties."""
    def op(self, dim, keepdim=False):
        index = indices(self, axis=dim, keepdims=True)
        value = jnp.take_along_axis(self, index, axis=dim)
        if not keepdim:
            value, index = jnp.squeeze(value, dim), jnp.squeeze(index, dim)
        return value, index
    return op


_register("max.dim")(_value_and_index(jnp.argmax))
_register("min.dim")(_value_and_index(jnp.argmin))
_register("argmax")(lambda self, dim=None, keepdim=False: jnp.argmax(self, dim, keepdims=keepdim))
_register("argmin")(lambda self, dim=None, keepdim=False: jnp.argmin(self, dim, keepdims=keepdim))


def _moment(fn):
    def op(self, dim=None, *, correction=None, keepdim=False):
        ddof = 1 if correction is None else correction
        return fn(self, axis=_dims(dim, self.ndim), ddof=ddof, keepdims=keepdim)
    return op


_register("var.correction")(_moment(jnp.var))
_register("std.correction")(_moment(jnp.std))
# a zero vector's gradient is 0, as torch's (autodiff of jnp.linalg.vector_norm: NaN)
_register("linalg_vector_norm")(
    lambda self, ord=2, dim=None, keepdim=False, *, dtype=None: vector_norm(
        self if dtype is None else self.astype(dtype), ord,
        None if dim is None else _dims(dim, self.ndim), keepdim))


# ---- shapes, views and copies ------------------------------------------------------------------
def _reshape(self, shape):
    return jnp.reshape(self, tuple(shape))


_same("view", "reshape", "_unsafe_view", fn=_reshape)
_register("flatten.using_ints")(
    lambda self, start_dim=0, end_dim=-1: jax.lax.collapse(
        self, start_dim % max(self.ndim, 1), end_dim % max(self.ndim, 1) + 1)
    if self.ndim else jnp.reshape(self, (1,)))
_register("unflatten")(lambda self, dim, sizes: jnp.reshape(
    self, self.shape[:dim % self.ndim] + tuple(sizes) + self.shape[dim % self.ndim + 1:]))
_register("permute")(lambda self, dims: jnp.transpose(self, tuple(dims)))
_register("transpose.int")(lambda self, dim0, dim1: jnp.swapaxes(self, dim0, dim1))
_register("t")(lambda self: self.T)
_register("numpy_T")(lambda self: self.T)
_register("unsqueeze")(lambda self, dim: jnp.expand_dims(self, dim))
_register("movedim.int")(lambda self, source, destination: jnp.moveaxis(self, source, destination))
_register("squeeze")(lambda self: jnp.squeeze(self))


@_register("squeeze.dim", "squeeze.dims")
def _squeeze(self, dim):
    dims = [d % max(self.ndim, 1) for d in _dims(dim, self.ndim)]
    return jnp.squeeze(self, tuple(d for d in dims if self.shape[d] == 1)) if self.ndim else self


@_register("expand")
def _expand(self, size, *, implicit=False):
    lead = len(size) - self.ndim
    shape = [s if s != -1 else self.shape[i - lead] for i, s in enumerate(size)]
    return jnp.broadcast_to(self, tuple(shape))


_register("broadcast_tensors")(lambda tensors: list(jnp.broadcast_arrays(*tensors)))


def _identity(self, *args, **kwargs):
    return self


_same("contiguous", "clone", "alias", "lift_fresh_copy", fn=_identity)
_register("detach")(jax.lax.stop_gradient)  # x.detach(): no gradient flows back through it
_register("_to_copy", "to.dtype_layout")(
    lambda self, *, dtype=None, **kwargs: self if dtype is None else self.astype(dtype))
_register("to.dtype")(lambda self, dtype, *args, **kwargs: self.astype(dtype))
_register("to.device")(lambda self, device, dtype, *args, **kwargs: self.astype(dtype))
_register("type_as")(lambda self, other: self.astype(other.dtype))
_register("copy")(lambda self, src, non_blocking=False:
                  jnp.broadcast_to(jnp.asarray(src).astype(self.dtype), self.shape))
_register("fill.Scalar", "fill.Tensor")(lambda self, value: jnp.full_like(self, value))
_register("zero")(jnp.zeros_like)
_register("cat", "concat")(lambda tensors, dim=0: jnp.concatenate(
    [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1], dim))
_register("stack")(lambda tensors, dim=0: jnp.stack(tensors, dim))
_register("split.Tensor")(lambda self, split_size, dim=0: tuple(jnp.split(
    self, list(range(split_size, self.shape[dim], split_size)), dim)))
_register("split_with_sizes")(lambda self, split_sizes, dim=0: tuple(jnp.split(
    self, list(np.cumsum(split_sizes)[:-1]), dim)))
_register("chunk")(lambda self, chunks, dim=0: ATEN["split.Tensor"](
    self, -(-self.shape[dim] // chunks), dim))
_register("unbind.int")(lambda self, dim=0: tuple(jnp.moveaxis(self, dim, 0)))


@_register("slice.Tensor")
def _slice(self, dim=0, start=None, end=None, step=1):
    index = [slice(None)] * self.ndim
    index[dim] = slice(start, end, step)
    return self[tuple(index)]


@_register("select.int")
def _select(self, dim, index):
    return jnp.take(self, index, axis=dim) if -self.shape[dim] <= index < self.shape[dim] else (
        _out_of_range(index, dim, self.shape))


def _out_of_range(index, dim, shape):
    raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {shape[dim]}")


_register("narrow")(lambda self, dim, start, length: _slice(self, dim, start, start + length))


@_register("index.Tensor")
def _index(self, indices):
    # aten.index: None keeps an axis, tensors index (advanced indexing, numpy's rules as torch's).
    return self[tuple(slice(None) if i is None else i for i in indices)]


_register("index_select")(lambda self, dim, index: jnp.take(self, index, axis=dim))
_register("gather")(lambda self, dim, index, *, sparse_grad=False:
                    jnp.take_along_axis(self, index, axis=dim))
_register("repeat")(lambda self, repeats: jnp.tile(
    self.reshape((1,) * (len(repeats) - self.ndim) + self.shape), tuple(repeats)))
_register("flip")(lambda self, dims: jnp.flip(self, tuple(dims)))
_register("roll")(lambda self, shifts, dims=(): jnp.roll(
    self, tuple(shifts), tuple(dims) if len(dims) else None))
_register("tril")(lambda self, diagonal=0: jnp.tril(self, diagonal))
_register("triu")(lambda self, diagonal=0: jnp.triu(self, diagonal))
_register("constant_pad_nd")(lambda self, pad, value=0: F.pad(self, list(pad), "constant", value))
_register("pad")(lambda self, pad, mode="constant", value=None: F.pad(self, list(pad), mode, value))
_register("one_hot")(lambda self, num_classes=-1: jax.nn.one_hot(
    self, int(self.max()) + 1 if num_classes == -1 else num_classes, dtype=jnp.int32))


# ---- new tensors -------------------------------------------------------------------------------
def _full(size, fill_value, dtype):
    if dtype is None:  # torch's default dtype follows the fill value
        dtype = jnp.float32 if isinstance(fill_value, float) else (
            jnp.bool_ if isinstance(fill_value, bool) else jnp.int32)
    return jnp.full(tuple(size), fill_value, dtype)


_register("zeros", "empty.memory_format", "new_empty")(
    lambda *args, dtype=None, **kwargs: _full(args[-1], 0.0 if dtype is None else 0, dtype))
_register("ones")(lambda size, *, dtype=None, **kwargs: _full(size, 1.0 if dtype is None else 1,
                                                              dtype))
_register("full")(lambda size, fill_value, *, dtype=None, **kwargs: _full(size, fill_value, dtype))
_register("scalar_tensor")(lambda s, *, dtype=None, **kwargs: jnp.asarray(s, dtype or jnp.float32))
for _name, _value in {"zeros_like": 0, "ones_like": 1, "empty_like": 0}.items():
    _register(_name)(lambda self, *, dtype=None, _value=_value, **kwargs:
                     jnp.full(self.shape, _value, dtype or self.dtype))
_register("full_like")(lambda self, fill_value, *, dtype=None, **kwargs:
                       jnp.full(self.shape, fill_value, dtype or self.dtype))
for _name, _value in {"new_zeros": 0, "new_ones": 1}.items():
    _register(_name)(lambda self, size, *, dtype=None, _value=_value, **kwargs:
                     jnp.full(tuple(size), _value, dtype or self.dtype))
_register("new_full")(lambda self, size, fill_value, *, dtype=None, **kwargs:
                      jnp.full(tuple(size), fill_value, dtype or self.dtype))


@_register("arange")
def _arange(*args, dtype=None, **kwargs):
    if dtype is None:  # torch: int64 unless a bound is a float
        dtype = jnp.float32 if any(isinstance(a, float) for a in args) else jnp.int32
    return jnp.arange(*args, dtype=dtype)


_register("linspace")(lambda start, end, steps, *, dtype=None, **kwargs:
                      jnp.linspace(start, end, steps, dtype=dtype or jnp.float32))


# ---- linear algebra ----------------------------------------------------------------------------
# Matrix products follow dl.amp.autocast (amp.lower), as jaxdl's layers do.
_same("matmul", "mm", "bmm", fn=lambda self, other: jnp.matmul(*amp.lower(self, other)))
_register("linear")(lambda input, weight, bias=None: F.linear(input, weight, bias))
_register("addmm", "baddbmm", "addbmm")(
    lambda self, mat1, mat2, *, beta=1, alpha=1: beta * self + alpha * jnp.matmul(
        *amp.lower(mat1, mat2)))
_register("einsum")(lambda equation, tensors, *, path=None: jnp.einsum(
    equation, *amp.lower(*tensors)) if len(tensors) > 1 else jnp.einsum(equation, *tensors))
_register("outer")(lambda self, vec2: jnp.outer(*amp.lower(self, vec2)))


# ---- layers ------------------------------------------------------------------------------------
def _conv(n):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    return lambda input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1: conv(
        input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(n):
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    return (lambda input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
            dilation=1: conv(input, weight, bias, stride, padding, output_padding, groups,
                             dilation))


for _n in (1, 2, 3):
    _register(f"conv{_n}d", f"conv{_n}d.padding")(_conv(_n))
    _register(f"conv_transpose{_n}d.input")(_conv_transpose(_n))


@_register("convolution")
def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    n = weight.ndim - 2
    if transposed:
        return _conv_transpose(n)(input, weight, bias, stride, padding, output_padding, groups,
                                  dilation)
    return _conv(n)(input, weight, bias, stride, padding, dilation, groups)


@_register("batch_norm")
def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
                cudnn_enabled=False):
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


_register("layer_norm")(lambda input, normalized_shape, weight=None, bias=None, eps=1e-5,
                        cudnn_enable=True: F.layer_norm(input, normalized_shape, weight, bias, eps))
_register("group_norm")(lambda input, num_groups, weight=None, bias=None, eps=1e-5,
                        cudnn_enabled=True: F.group_norm(input, num_groups, weight, bias, eps))
_register("rms_norm")(lambda input, normalized_shape, weight=None, eps=None:
                      F.rms_norm(input, normalized_shape, weight, eps))
_register("embedding")(lambda weight, indices, padding_idx=-1, scale_grad_by_freq=False,
                       sparse=False: F.embedding(indices, weight,
                                                 None if padding_idx == -1 else padding_idx))
_register("softmax.int", "_softmax")(lambda self, dim, dtype=None: F.softmax(
    self if not isinstance(dtype, np.dtype | type) else self.astype(dtype), dim))
_register("log_softmax.int", "_log_softmax")(lambda self, dim, dtype=None: F.log_softmax(
    self if not isinstance(dtype, np.dtype | type) else self.astype(dtype), dim))


def _random_dropout(functional):
    def op(input, p, train, *, rng):
        return functional(input, p, train, key=rng) if train and p > 0 else input
    return op


for _name, _fn in {"dropout": F.dropout, "feature_dropout": F.dropout2d,
                   "alpha_dropout": F.alpha_dropout,
                   "feature_alpha_dropout": F.feature_alpha_dropout}.items():
    _register(_name, key=True)(_random_dropout(_fn))


@_register("scaled_dot_product_attention", key=True)
def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
          enable_gqa=False, rng):
    return F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                          scale, enable_gqa, dropout_key=rng)


def _with_indices(pool):
    return lambda *args: pool(*args, return_indices=True)


for _n in (1, 2, 3):
    _register(f"max_pool{_n}d")(getattr(F, f"max_pool{_n}d"))
    _register(f"max_pool{_n}d_with_indices")(_with_indices(getattr(F, f"max_pool{_n}d")))
    _register(f"avg_pool{_n}d")(getattr(F, f"avg_pool{_n}d"))
    _register(f"adaptive_avg_pool{_n}d", f"_adaptive_avg_pool{_n}d")(
        getattr(F, f"adaptive_avg_pool{_n}d"))
    _register(f"adaptive_max_pool{_n}d")(_with_indices(getattr(F, f"adaptive_max_pool{_n}d")))


def _upsample(mode):
    def op(input, output_size, *args):
        # .vec overloads: (input, output_size, [align_corners,] scale_factors)
        align_corners = args[0] if len(args) == 2 else None
        scales = args[-1] if args else None
        if output_size is not None:
            return F.interpolate(input, size=tuple(output_size), mode=mode,
                                 align_corners=align_corners)
        return F.interpolate(input, scale_factor=tuple(scales), mode=mode,
                             align_corners=align_corners)
    return op


for _n, _linear in ((1, "linear"), (2, "bilinear"), (3, "trilinear")):
    _register(f"upsample_nearest{_n}d.vec")(_upsample("nearest"))
    _register(f"_upsample_nearest_exact{_n}d.vec")(_upsample("nearest-exact"))
    _register(f"upsample_{_linear}{_n}d.vec")(_upsample(_linear))


# ---- losses (aten's reduction is an int: 0 none, 1 mean, 2 sum) -------------------------------
_register("cross_entropy_loss")(
    lambda self, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0:
    F.cross_entropy(self, target, weight, ignore_index=ignore_index,
                    reduction=_REDUCTIONS[reduction], label_smoothing=label_smoothing))
_register("nll_loss", "nll_loss_nd", "nll_loss2d")(
    lambda self, target, weight=None, reduction=1, ignore_index=-100:
    F.nll_loss(self, target, weight, ignore_index=ignore_index, reduction=_REDUCTIONS[reduction]))
_register("mse_loss")(lambda self, target, reduction=1:
                      F.mse_loss(self, target, reduction=_REDUCTIONS[reduction]))
_register("l1_loss")(lambda self, target, reduction=1:
                     F.l1_loss(self, target, reduction=_REDUCTIONS[reduction]))
_register("smooth_l1_loss")(lambda self, target, reduction=1, beta=1.0:
                            F.smooth_l1_loss(self, target, reduction=_REDUCTIONS[reduction],
                                             beta=beta))
_register("huber_loss")(lambda self, target, reduction=1, delta=1.0:
                        F.huber_loss(self, target, reduction=_REDUCTIONS[reduction], delta=delta))
_register("binary_cross_entropy")(lambda self, target, weight=None, reduction=1:
                                  F.binary_cross_entropy(self, target, weight,
                                                         reduction=_REDUCTIONS[reduction]))
_register("soft_margin_loss")(lambda self, target, reduction=1:
                              F.soft_margin_loss(self, target, reduction=_REDUCTIONS[reduction]))
_register("kl_div")(lambda self, target, reduction=1, *, log_target=False:
                    F.kl_div(self, target, reduction=_REDUCTIONS[reduction],
                             log_target=log_target))
_register("margin_ranking_loss")(lambda input1, input2, target, margin=0.0, reduction=1:
                                 F.margin_ranking_loss(input1, input2, target, margin,
                                                       reduction=_REDUCTIONS[reduction]))
_register("hinge_embedding_loss")(lambda self, target, margin=1.0, reduction=1:
                                  F.hinge_embedding_loss(self, target, margin,
                                                         reduction=_REDUCTIONS[reduction]))
_register("binary_cross_entropy_with_logits")(
    lambda self, target, weight=None, pos_weight=None, reduction=1:
    F.binary_cross_entropy_with_logits(self, target, weight, reduction=_REDUCTIONS[reduction],
                                       pos_weight=pos_weight))


# ---- shape arithmetic (Python operators on sizes) ----------------------------------------------
_register("sym_size.int")(lambda self, dim: self.shape[dim])
_register("sym_numel")(lambda self: math.prod(self.shape))
for _fn in (operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
            operator.truediv, operator.mod, operator.neg, operator.pow, operator.eq,
            operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
    ATEN[f"operator.{_fn.__name__}"] = _fn
ATEN.update({"torch.sym_int": int, "torch.sym_float": float, "torch.sym_max": max,
             "torch.sym_min": min, "torch.sym_not": operator.not_, "math.ceil": math.ceil,
             "math.floor": math.floor, "math.sqrt": math.sqrt})
