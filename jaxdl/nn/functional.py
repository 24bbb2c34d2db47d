"""`torch.nn.functional` on jax arrays: same names, arguments and defaults.

Differences from PyTorch, by necessity:
- random functions (`dropout`) take `key=`; without it they draw from the
  global stream, which is refused inside a trace (the key would be frozen
  into the compiled code). Inside `dl.jit` use the `nn.Dropout` module.
"""

import enum
import math

import jax
import jax.numpy as jnp

from jaxdl import amp, ops

# The layer families define their functional forms next to their modules; re-exported here.
from jaxdl.nn._conv import (  # noqa: F401
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    pad,
)
from jaxdl.nn._ctc import ctc_loss  # noqa: F401
from jaxdl.nn._distance import (  # noqa: F401
    cosine_embedding_loss,
    cosine_similarity,
    gaussian_nll_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    pairwise_distance,
    pdist,
    poisson_nll_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from jaxdl.nn._embedding import embedding, embedding_bag, one_hot  # noqa: F401
from jaxdl.nn._fold import fold, unfold  # noqa: F401
from jaxdl.nn._keys import fresh_key as _fresh_key
from jaxdl.nn._norm import (  # noqa: F401
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    local_response_norm,
    normalize,
    rms_norm,
)
from jaxdl.nn._pool import (  # noqa: F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool1d_with_indices,
    adaptive_max_pool2d,
    adaptive_max_pool2d_with_indices,
    adaptive_max_pool3d,
    adaptive_max_pool3d_with_indices,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
    max_pool3d,
    max_pool3d_with_indices,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
)
from jaxdl.nn._reduction import REDUCTIONS as _REDUCTIONS
from jaxdl.nn._reduction import reduce_loss as _reduce
from jaxdl.nn._resample import interpolate  # noqa: F401
from jaxdl.nn._sampling import affine_grid, grid_sample  # noqa: F401

# ---- linear -------------------------------------------------------------------------------


def linear(input, weight, bias=None):
    """y = x W^T + b, W of shape (out_features, in_features)."""
    input, weight, bias = amp.lower(input, weight, bias)
    out = jnp.matmul(input, weight.T)
    return out if bias is None else out + bias


def bilinear(input1, input2, weight, bias=None):
    """y_o = x1^T W_o x2 + b_o, W of shape (out_features, in1_features, in2_features)."""
    input1, input2, weight, bias = amp.lower(input1, input2, weight, bias)
    out = jnp.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else out + bias


def conv_tbc(input, weight, bias, pad: int = 0):  # noqa: F811 (torch's argument name)
    """torch's time-batch-channel conv1d: input (T, B, C_in), weight (K, C_in, C_out), bias
    (C_out), `pad` zero steps on both ends of T; output (T + 2 pad - K + 1, B, C_out)."""
    out = conv1d(jnp.transpose(input, (1, 2, 0)), jnp.transpose(weight, (2, 1, 0)), bias,
                 padding=pad)
    return jnp.transpose(out, (2, 0, 1))


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None,
                         reduction: str = "mean", ignore_index=None, label_smoothing: float = 0.0,
                         options=None):
    """cross_entropy(linear(input, linear_weight, linear_bias), target, ...), as torch.

    input (in_features) or (N, in_features); linear_weight (C, in_features), or (C, d_1..d_K,
    in_features) for a K-dimensional loss (batched input only). Targets holding probabilities are
    told apart by having the logits' shape, as torch does. `options` (torch's chunking to save
    memory) is accepted and ignored: the math is the same."""
    if input.ndim not in (1, 2):
        raise ValueError(f"linear_cross_entropy: expected input with dimensionality 1 or 2, got "
                         f"{input.ndim}")
    if linear_weight.ndim < 2 or linear_weight.shape[-1] != input.shape[-1]:
        raise ValueError(f"linear_cross_entropy: expected linear_weight (C, ..., in_features) with "
                         f"in_features={input.shape[-1]}, got shape {tuple(linear_weight.shape)}")
    num_classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise ValueError(f"linear_cross_entropy: expected linear_bias shape "
                         f"{(num_classes, *out_features)}, got {tuple(linear_bias.shape)}")
    if out_features and input.ndim == 1:
        raise ValueError("linear_cross_entropy: a K-dimensional linear_weight "
                         f"{tuple(linear_weight.shape)} requires batched (N, in_features) input")
    logits_shape = (*input.shape[:-1], num_classes, *out_features)
    if tuple(jnp.shape(target)) == logits_shape and ignore_index is not None:
        raise ValueError("linear_cross_entropy: ignore_index cannot be specified when target "
                         "contains probabilities")
    rows = math.prod(out_features, start=num_classes)
    bias = None if linear_bias is None else linear_bias.reshape(rows)
    logits = linear(input, linear_weight.reshape(rows, -1), bias).reshape(logits_shape)
    return cross_entropy(logits, target, weight, ignore_index=-100 if ignore_index is None
                         else ignore_index, reduction=reduction, label_smoothing=label_smoothing)


def _group_sizes(offs):
    """Group sizes from torch's end offsets; rows (or columns) past offs[-1] belong to no group."""
    offs = jnp.asarray(offs).astype(jnp.int32)
    if offs.ndim != 1:
        raise ValueError(f"grouped_mm: offs must be 1-d, got shape {tuple(offs.shape)}")
    return jnp.diff(offs, prepend=0)


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """torch's grouped matrix multiply (Mixture-of-Experts layers), by `jax.lax.ragged_dot`
    (a masked einsum for the ragged contraction, which ragged_dot cannot differentiate):

    - a (M, K), b (G, K, N), offs (G,): rows offs[g-1]:offs[g] of a times b[g] -> (M, N);
    - a (G, M, K), b (K, N), offs (G,): a[g] times columns offs[g-1]:offs[g] of b -> (M, N);
    - a (M, K), b (K, N), offs (G,): the K slices offs[g-1]:offs[g], one product each -> (G, M, N);
    - a (G, M, K), b (G, K, N), no offs: a batched product -> (G, M, N).

    Rows/columns past offs[-1] are zeros here (torch leaves them unspecified). `out_dtype`
    sets the accumulation and output dtype (default: the inputs'). torch refuses `bias`, so do we.
    """
    if bias is not None:
        raise NotImplementedError("grouped_mm(bias=...): torch does not support it yet either")
    out_dtype = out_dtype or mat_a.dtype
    kinds = (mat_a.ndim, mat_b.ndim)
    if kinds == (3, 3):
        if offs is not None:
            raise ValueError("grouped_mm: offs must be None when both operands are 3-d")
        return jnp.matmul(mat_a, mat_b, preferred_element_type=out_dtype)
    if kinds not in ((2, 3), (3, 2), (2, 2)) or offs is None:
        raise ValueError(f"grouped_mm: expected 2-d/3-d operands with offs for any 2-d one, got "
                         f"shapes {tuple(mat_a.shape)}, {tuple(mat_b.shape)}, offs={offs is not None}")
    if kinds == (2, 3):
        return jax.lax.ragged_dot(mat_a, mat_b, _group_sizes(offs),
                                  preferred_element_type=out_dtype)
    if kinds == (3, 2):  # the transposed problem: b's columns are the ragged rows
        out = jax.lax.ragged_dot(mat_b.T, jnp.swapaxes(mat_a, 1, 2),
                                 _group_sizes(offs), preferred_element_type=out_dtype)
        return out.T
    # ragged contraction: a mask per group over K (ragged_dot_general has no gradient for it)
    ends = jnp.asarray(offs).astype(jnp.int32)
    k = jnp.arange(mat_a.shape[1])
    member = (k >= (ends - _group_sizes(offs))[:, None]) & (k < ends[:, None])
    return jnp.einsum("mk,gk,kn->gmn", mat_a, member.astype(mat_a.dtype), mat_b,
                      preferred_element_type=out_dtype)


class ScalingType(enum.Enum):
    """How `scaled_mm` operands were scaled (torch's names; torch's own enum is accepted too)."""
    TensorWise = 0
    RowWise = 1
    BlockWise1x16 = 2
    BlockWise1x32 = 3
    BlockWise1x128 = 4
    BlockWise128x128 = 5


class SwizzleType(enum.Enum):
    """Layouts of block scales (torch's names); only NO_SWIZZLE is meaningful here."""
    NO_SWIZZLE = 0
    SWIZZLE_32_4_4 = 1


def _single(value, what):
    """torch passes one scale/recipe or a list of one; several mean block-scaled MX formats."""
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise NotImplementedError(f"scaled_mm: several {what} (block-scaled formats) are "
                                      "not supported")
        return value[0]
    return value


def scaled_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a=None,
              swizzle_b=None, bias=None, output_dtype=jnp.bfloat16, contraction_dim=(),
              use_fast_accum: bool = False):
    """(a @ b) * scale_a * scale_b + bias for float8 a (M, K) and b (K, N), accumulated in
    float32, as torch's CPU kernel: the recipes torch runs on CPU, TensorWise (scalar scales)
    and RowWise (scale_a (M, 1), scale_b (1, N)). The block-scaled MX recipes and swizzled
    scales are GPU formats (NotImplementedError)."""
    recipes = [getattr(_single(r, "recipes"), "name", r) for r in (scale_recipe_a, scale_recipe_b)]
    swizzles = [getattr(_single(z, "swizzles"), "name", z) for z in (swizzle_a, swizzle_b)]
    if recipes[0] != recipes[1] or recipes[0] not in ("TensorWise", "RowWise"):
        raise NotImplementedError(f"scaled_mm: scaling {recipes} is not supported; TensorWise "
                                  "and RowWise are (the block-scaled recipes need GPU fp8 support)")
    if any(z not in (None, "NO_SWIZZLE") for z in swizzles) or contraction_dim:
        raise NotImplementedError("scaled_mm: swizzled scales and contraction_dim are not supported")
    fp8 = (jnp.float8_e4m3fn, jnp.float8_e5m2)
    if mat_a.ndim != 2 or mat_b.ndim != 2 or mat_a.dtype not in fp8 or mat_b.dtype not in fp8:
        raise ValueError(f"scaled_mm: expected 2-d float8 operands, got {mat_a.dtype} "
                         f"{tuple(mat_a.shape)} and {mat_b.dtype} {tuple(mat_b.shape)}")
    scale_a, scale_b = (jnp.asarray(_single(x, "scales"), jnp.float32) for x in (scale_a, scale_b))
    want = [(), ()] if recipes[0] == "TensorWise" else [(mat_a.shape[0], 1), (1, mat_b.shape[1])]
    for scale, shape, name in zip((scale_a, scale_b), want, "ab"):
        if scale.size != math.prod(shape) or (shape and scale.shape != shape):
            raise ValueError(f"scaled_mm: {recipes[0]} scale_{name} must have shape {shape or (1,)}, "
                             f"got {tuple(scale.shape)}")
    out = jnp.matmul(mat_a, mat_b, preferred_element_type=jnp.float32)
    out = out * scale_a.reshape(want[0]) * scale_b.reshape(want[1])
    if bias is not None:
        out = out + bias.astype(jnp.float32)
    return out.astype(output_dtype or jnp.bfloat16)


def scaled_grouped_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a=None,
                      swizzle_b=None, bias=None, offs=None, output_dtype=jnp.bfloat16,
                      contraction_dim=(), use_fast_accum: bool = False):
    """Not implemented: torch's fp8 grouped scaled matmul has no CPU kernel (it needs GPU fp8
    hardware support), so there is nothing to check an implementation against."""
    raise NotImplementedError(
        "F.scaled_grouped_mm: the fp8 grouped scaled matmul needs GPU hardware fp8 support (torch "
        "has no CPU kernel for it either); use grouped_mm on dequantized operands")


# ---- activations ----------------------------------------------------------------------------


def relu(input, inplace: bool = False):
    return jax.nn.relu(input)


def tanh(input):
    return jnp.tanh(input)


def sigmoid(input):
    return jax.nn.sigmoid(input)


def relu6(input, inplace: bool = False):
    return jnp.clip(input, 0, 6).astype(input.dtype)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace: bool = False):
    return jnp.clip(input, min_val, max_val).astype(input.dtype)


def leaky_relu(input, negative_slope=0.01, inplace: bool = False):
    return jnp.where(input > 0, input, input * negative_slope)


def elu(input, alpha=1.0, inplace: bool = False):
    return jnp.where(input > 0, input, alpha * jnp.expm1(jnp.minimum(input, 0)))


def celu(input, alpha=1.0, inplace: bool = False):
    return jnp.where(input > 0, input, alpha * jnp.expm1(jnp.minimum(input, 0) / alpha))


def selu(input, inplace: bool = False):
    return jax.nn.selu(input)


def gelu(input, approximate: str = "none"):
    """GELU: exact erf form for approximate='none' (PyTorch's default), or the tanh form."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate={approximate!r}; use 'none' or 'tanh'")
    return jax.nn.gelu(input, approximate=approximate == "tanh")


def silu(input, inplace: bool = False):
    return jax.nn.silu(input)


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as PyTorch)."""
    scaled = input * beta
    soft = jnp.logaddexp(scaled, 0.0) / beta
    return jnp.where(scaled > threshold, input, soft)


def mish(input, inplace: bool = False):
    return input * jnp.tanh(softplus(input))


def hardsigmoid(input, inplace: bool = False):
    return jnp.clip(input / 6 + 0.5, 0, 1).astype(input.dtype)


def hardswish(input, inplace: bool = False):
    return input * hardsigmoid(input)


def logsigmoid(input):
    return jax.nn.log_sigmoid(input)


def softsign(input):
    return input / (1 + jnp.abs(input))


def threshold(input, threshold, value, inplace: bool = False):
    return jnp.where(input > threshold, input, value).astype(input.dtype)


def glu(input, dim=-1):
    a, b = jnp.split(input, 2, axis=dim)
    return a * jax.nn.sigmoid(b)


def prelu(input, weight):
    """max(0, x) + weight * min(0, x), weight per channel (axis 1) or a single value."""
    w = weight if weight.size == 1 or input.ndim < 2 else weight.reshape(
        (-1,) + (1,) * (input.ndim - 2))
    return jnp.where(input >= 0, input, w * input)


def rrelu(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False, *, key=None):
    """Leaky ReLU with a random slope in [lower, upper] when training, their mean otherwise."""
    if not training:
        return leaky_relu(input, (lower + upper) / 2)
    slope = jax.random.uniform(_fresh_key(key, input, "rrelu"), input.shape, input.dtype, lower, upper)
    return jnp.where(input >= 0, input, slope * input)


def hardshrink(input, lambd: float = 0.5):
    return jnp.where(jnp.abs(input) > lambd, input, 0).astype(input.dtype)


def softshrink(input, lambd: float = 0.5):
    return (jnp.sign(input) * jnp.maximum(jnp.abs(input) - lambd, 0)).astype(input.dtype)


def tanhshrink(input):
    return input - jnp.tanh(input)


# PyTorch's in-place variants: arrays are immutable here, so they return the result.
relu_ = relu
elu_ = elu
celu_ = celu
selu_ = selu
leaky_relu_ = leaky_relu
hardtanh_ = hardtanh
threshold_ = threshold
rrelu_ = rrelu


# ---- shape --------------------------------------------------------------------------------


def pixel_shuffle(input, upscale_factor: int):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = upscale_factor
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


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated in PyTorch in favour of interpolate; kept for ported code."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def _softmax_dim(input, dim):
    if dim is None:  # PyTorch's legacy implicit choice
        return 0 if input.ndim in (0, 1, 3) else 1
    return dim


_OPS_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)  # what jaxdl.ops computes (in float32)


def _ops_supports(x):
    return x.ndim > 0 and x.dtype in _OPS_DTYPES


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    input = amp.full(input)
    x = input if dtype is None else input.astype(dtype)
    if _ops_supports(x):  # the online-normalizer kernels (Pallas on GPU, XLA elsewhere)
        return ops.softmax(x, axis=_softmax_dim(input, dim))
    return jax.nn.softmax(x, axis=_softmax_dim(input, dim))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    input = amp.full(input)
    x = input if dtype is None else input.astype(dtype)
    if _ops_supports(x):
        return ops.log_softmax(x, axis=_softmax_dim(input, dim))
    return jax.nn.log_softmax(x, axis=_softmax_dim(input, dim))


# ---- dropout --------------------------------------------------------------------------------


def _keep_mask(input, p, training, key, mask_shape, what):
    """A dropout's keep mask over `mask_shape`; None where the input passes unchanged (eval,
    p = 0) and False where everything is dropped (p = 1, no key drawn)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return None
    if p == 1.0:
        return False
    return jax.random.bernoulli(_fresh_key(key, input, what), 1.0 - p, mask_shape)


def _dropout(input, p, training, key, mask_shape, what):
    """Zero entries with probability p along a mask broadcast over `mask_shape`, scale the rest."""
    keep = _keep_mask(input, p, training, key, mask_shape, what)
    if keep is None:
        return input
    if keep is False:
        return jnp.zeros_like(input)
    return jnp.where(keep, input / (1.0 - p), 0).astype(input.dtype)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    return _dropout(input, p, training, key, input.shape, "dropout")


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels of (N, C, L) or (C, L) inputs."""
    shape = input.shape[:-1] + (1,)
    return _dropout(input, p, training, key, shape, "dropout1d")


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels of (N, C, D, H, W) inputs."""
    return _dropout(input, p, training, key, input.shape[:2] + (1,) * (input.ndim - 2), "dropout3d")


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels (axis 1 of (N, C, ...)) with probability p, scaling the rest."""
    return _dropout(input, p, training, key, input.shape[:2] + (1,) * (input.ndim - 2), "dropout2d")


# SELU's negative saturation value -scale * alpha: alpha dropout sets dropped units to it.
_SELU_SATURATION = 1.7580993408473766


def _alpha_dropout(input, p, training, key, mask_shape, what):
    """Drop to SELU's saturation value, then an affine map a x + b that keeps zero mean and unit
    variance for standardised inputs (Klambauer et al. 2017; PyTorch's constants)."""
    keep = _keep_mask(input, p, training, key, mask_shape, what)
    if keep is None:
        return input
    if keep is False:
        return jnp.zeros_like(input)
    a = ((_SELU_SATURATION ** 2 * p + 1) * (1 - p)) ** -0.5
    return (jnp.where(keep, input, -_SELU_SATURATION) * a + _SELU_SATURATION * a * p).astype(
        input.dtype)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False, *,
                  key=None):
    return _alpha_dropout(input, p, training, key, input.shape, "alpha_dropout")


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False, *,
                          key=None):
    """Alpha dropout of whole channels (axis 1 of (N, C, ...))."""
    shape = input.shape[:2] + (1,) * (input.ndim - 2)
    return _alpha_dropout(input, p, training, key, shape, "feature_alpha_dropout")


def gumbel_softmax(logits, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1,
                   *, key=None):
    """softmax((logits + Gumbel noise) / tau); with hard=True the one-hot of its argmax in the
    forward pass and the soft sample's gradient (straight-through). `eps` is unused, as in
    PyTorch."""
    gumbels = jax.random.gumbel(_fresh_key(key, logits, "gumbel_softmax"), logits.shape,
                                jnp.promote_types(logits.dtype, jnp.float32)).astype(logits.dtype)
    soft = softmax((logits + gumbels) / tau, dim=dim)
    if not hard:
        return soft
    axis = dim % logits.ndim
    index = jnp.argmax(soft, axis=axis, keepdims=True)
    one_hot_ = (jnp.arange(logits.shape[axis]).reshape((-1,) + (1,) * (logits.ndim - axis - 1))
                == index).astype(soft.dtype)
    return one_hot_ - jax.lax.stop_gradient(soft) + soft


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, dtype=dtype)


# ---- losses ---------------------------------------------------------------------------------



def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    input, target = amp.full(input, target)
    return _reduce(jnp.square(input - target), reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    input, target = amp.full(input, target)
    return _reduce(jnp.abs(input - target), reduction)


def _class_last(x):
    """Move the class axis (1 for N-d inputs, 0 for a single sample) to the end."""
    return x if x.ndim == 1 else jnp.moveaxis(x, 1, -1)


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log-likelihood of class indices; `input` holds log-probabilities."""
    input = amp.full(input)
    logp = _class_last(input)
    num_classes = logp.shape[-1]
    target = jnp.asarray(target)
    if target.shape != logp.shape[:-1]:
        raise ValueError(
            f"nll_loss: expected target of shape {tuple(logp.shape[:-1])} for input of shape "
            f"{tuple(input.shape)}, got {tuple(target.shape)}"
        )
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    picked = jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    w = jnp.ones((num_classes,), logp.dtype) if weight is None else jnp.asarray(weight, logp.dtype)
    sample_w = jnp.where(valid, w[safe], 0.0)
    loss = -picked * sample_w
    if reduction == "mean":
        return jnp.sum(loss) / jnp.sum(sample_w)
    return _reduce(loss, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """PyTorch's cross_entropy: class indices or class probabilities as targets."""
    input, target = amp.full(input, target)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    target = jnp.asarray(target)
    indices_shape = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
    if (weight is None and _ops_supports(input) and jnp.issubdtype(target.dtype, jnp.integer)
            and target.shape == indices_shape and reduction in _REDUCTIONS):
        # class indices without weights: one online pass, no (N, C) log-softmax written
        return ops.cross_entropy(input, target, ignore_index, label_smoothing, reduction,
                                 axis=0 if input.ndim == 1 else 1)
    logp = log_softmax(input.astype(jnp.promote_types(input.dtype, jnp.float32)),
                       dim=0 if input.ndim == 1 else 1)
    num_classes = logp.shape[0 if input.ndim == 1 else 1]
    w = None if weight is None else jnp.asarray(weight, logp.dtype)

    if jnp.issubdtype(target.dtype, jnp.floating):  # class probabilities
        if target.shape != input.shape:
            raise ValueError(
                f"cross_entropy: probability targets must match input shape {tuple(input.shape)}, "
                f"got {tuple(target.shape)}"
            )
        probs = _class_last(target)
        if label_smoothing:
            probs = probs * (1 - label_smoothing) + label_smoothing / num_classes
        terms = _class_last(logp) * probs
        if w is not None:
            terms = terms * w
        loss = -jnp.sum(terms, axis=-1)
        if reduction == "mean":
            return jnp.sum(loss) / max(loss.size, 1) if loss.ndim else loss
        return _reduce(loss, reduction)

    nll = nll_loss(logp, target, w, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return nll
    # PyTorch: (1 - eps) * nll + eps / C * smooth, where smooth = -sum_c w_c log p_c,
    # zero at ignored positions, normalised like nll (by the target weights) for "mean".
    lp = _class_last(logp)
    smooth = -jnp.sum(lp if w is None else lp * w, axis=-1)
    valid = target != ignore_index
    smooth = jnp.where(valid, smooth, 0.0)
    if reduction == "mean":
        if w is None:
            smooth = jnp.sum(smooth) / jnp.sum(valid)
        else:
            smooth = jnp.sum(smooth) / jnp.sum(jnp.where(valid, w[jnp.where(valid, target, 0)], 0.0))
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / num_classes)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (plain L1 for beta=0)."""
    input, target = amp.full(input, target)
    d = jnp.abs(input - target)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(jnp.where(d < beta, 0.5 * jnp.square(d) / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0,
               weight=None):
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)."""
    input, target = amp.full(input, target)
    if weight is not None:
        raise NotImplementedError("F.huber_loss(weight=...)")
    d = jnp.abs(input - target)
    return _reduce(jnp.where(d <= delta, 0.5 * jnp.square(d), delta * (d - 0.5 * delta)),
                   reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch."""
    input, target = amp.full(input, target)
    log_x = jnp.maximum(jnp.log(input), -100.0)
    log_1mx = jnp.maximum(jnp.log1p(-input), -100.0)
    loss = -(target * log_x + (1 - target) * log_1mx)
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """BCE on logits, stable form; pos_weight scales the positive term (per class)."""
    input, target = amp.full(input, target)
    log_sig_neg = jax.nn.log_sigmoid(-input)  # log(1 - sigmoid(x))
    log_sig = jax.nn.log_sigmoid(input)
    pos = target * log_sig * (1.0 if pos_weight is None else pos_weight)
    loss = -(pos + (1 - target) * log_sig_neg)
    return _reduce(loss if weight is None else loss * weight, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """target * (log target - input), `input` being log-probabilities.

    reduction='batchmean' divides the sum by the batch size (the true KL
    divergence); 'mean' averages over every element, as PyTorch does.
    """
    input, target = amp.full(input, target)
    if log_target:
        loss = jnp.exp(target) * (target - input)
    else:
        loss = jax.scipy.special.xlogy(target, target) - target * input
    if reduction == "batchmean":
        return jnp.sum(loss) / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


# ---- attention (owned by attention/rnn work) ----------------------------------------------


def _additive_mask(mask, dtype, masked_value):
    """A float mask to add to attention scores: bool entries equal to `masked_value` -> -inf."""
    if mask is None:
        return None
    mask = jnp.asarray(mask)
    if mask.dtype == jnp.bool_:
        return jnp.where(mask == masked_value, -jnp.inf, 0.0).astype(dtype)
    if not jnp.issubdtype(mask.dtype, jnp.floating):
        raise TypeError(f"attention masks must be bool or floating, got dtype {mask.dtype}")
    return mask.astype(dtype)


def _attend(query, key, value, bias, dropout_p, dropout_key, scale, zero_masked_rows):
    """softmax(q k^T * scale + bias) v over the last two axes; returns (output, weights).

    With `zero_masked_rows`, a query whose every key is masked gets zero weights (PyTorch's
    scaled_dot_product_attention) instead of NaN (its explicit MultiheadAttention path); the
    scores of such rows are zeroed first so that no NaN reaches the gradient either.
    """
    query, key, value = amp.lower(query, key, value)  # autocast: matmuls low, softmax float32
    scores = jnp.matmul(query * scale, jnp.swapaxes(key, -1, -2))
    if bias is not None:
        scores = scores + bias
    if zero_masked_rows:
        dead = jnp.all(scores == -jnp.inf, axis=-1, keepdims=True)
        weights = jnp.where(dead, 0.0, softmax(jnp.where(dead, 0.0, scores), dim=-1))
    else:
        weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True, key=_fresh_key(dropout_key, query, "dropout"))
    return jnp.matmul(weights.astype(value.dtype), value), weights


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False,
                                 *, dropout_key=None):
    """softmax(Q K^T / sqrt(E) + mask) V, as `torch.nn.functional.scaled_dot_product_attention`.

    Arguments:
        query: (..., L, E); key: (..., S, E); value: (..., S, Ev).
        attn_mask: bool (True = may attend) or float (added to the scores), broadcastable
            to (..., L, S).
        dropout_p: dropout on the attention weights (always applied when > 0, as in PyTorch:
            pass 0.0 in evaluation).
        is_causal: mask out keys after each query (top-left aligned); excludes attn_mask.
        scale: score scale, default 1 / sqrt(E).
        enable_gqa: allow fewer key/value heads (axis -3) than query heads.
        dropout_key: the jax key for dropout (PyTorch's `key` argument name is the key tensor);
            defaults to the global stream outside a trace.

    Returns:
        (..., L, Ev). A query whose every key is masked gets zeros, as in PyTorch.
    """
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ValueError("scaled_dot_product_attention: query, key and value need at least 2 "
                         f"dimensions, got shapes {query.shape}, {key.shape}, {value.shape}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError("scaled_dot_product_attention: expected query (..., L, E), key "
                         f"(..., S, E), value (..., S, Ev), got {query.shape}, {key.shape}, "
                         f"{value.shape}")
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        if query.shape[-3] % key.shape[-3]:
            raise ValueError(f"enable_gqa: {query.shape[-3]} query heads are not a multiple "
                             f"of {key.shape[-3]} key/value heads")
        repeats = query.shape[-3] // key.shape[-3]
        key = jnp.repeat(key, repeats, axis=-3)
        value = jnp.repeat(value, repeats, axis=-3)
    target_len, source_len = query.shape[-2], key.shape[-2]
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: pass either attn_mask or "
                             "is_causal=True, not both")
        attn_mask = jnp.tril(jnp.ones((target_len, source_len), jnp.bool_))
    bias = _additive_mask(attn_mask, query.dtype, masked_value=False)
    if bias is not None:
        try:
            jnp.broadcast_shapes(bias.shape, query.shape[:-2] + (target_len, source_len))
        except ValueError:
            raise ValueError(f"scaled_dot_product_attention: attn_mask of shape {bias.shape} "
                             f"does not broadcast to the scores' shape "
                             f"{query.shape[:-2] + (target_len, source_len)}") from None
    scale = 1.0 / float(query.shape[-1]) ** 0.5 if scale is None else scale
    return _attend(query, key, value, bias, dropout_p, dropout_key, scale, True)[0]


def _split_heads(x, batch_heads, head_dim):
    """(S, N, E) -> (N * heads, S, head_dim), PyTorch's head-major layout."""
    return jnp.swapaxes(x.reshape(x.shape[0], batch_heads, head_dim), 0, 1)


def multi_head_attention_forward(
        query, key, value, embed_dim_to_check: int, num_heads: int, in_proj_weight,
        in_proj_bias, bias_k, bias_v, add_zero_attn: bool, dropout_p: float, out_proj_weight,
        out_proj_bias, training: bool = True, key_padding_mask=None, need_weights: bool = True,
        attn_mask=None, use_separate_proj_weight: bool = False, q_proj_weight=None,
        k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
        average_attn_weights: bool = True, is_causal: bool = False, *, dropout_key=None):
    """PyTorch's `F.multi_head_attention_forward` on (L, N, E) inputs (or unbatched (L, E)).

    Masks follow `nn.MultiheadAttention`: bool True means "may NOT attend"; float masks
    are added. attn_mask is (L, S) or (N * num_heads, L, S); key_padding_mask is (N, S).
    `is_causal` is only a hint in PyTorch: attn_mask must hold the causal mask.

    Returns:
        (output (L, N, E), weights (N, L, S) averaged over heads, (N, heads, L, S)
        otherwise, or None when need_weights=False); unbatched inputs drop N.
    """
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k/static_v are not "
                                  "supported")
    if is_causal and attn_mask is None:
        raise ValueError("multi_head_attention_forward: is_causal=True is only a hint, "
                         "attn_mask must hold the causal mask")
    if is_causal and key_padding_mask is None and not need_weights:
        # PyTorch then trusts the hint and uses its own causal mask instead of attn_mask
        attn_mask = ~jnp.tril(jnp.ones((query.shape[0], key.shape[0]), jnp.bool_))
    batched = query.ndim == 3
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ValueError(f"expected query, key and value all 3-d (L, N, E) or all 2-d (L, E), "
                         f"got shapes {query.shape}, {key.shape}, {value.shape}")
    if not batched:
        query, key, value = query[:, None], key[:, None], value[:, None]
        if key_padding_mask is not None:
            key_padding_mask = jnp.asarray(key_padding_mask)[None]
    target_len, batch, embed_dim = query.shape
    source_len = key.shape[0]
    if embed_dim != embed_dim_to_check:
        raise ValueError(f"expected query embedding size {embed_dim_to_check}, got shape "
                         f"{query.shape}")
    if key.shape[:2] != value.shape[:2] or key.shape[1] != batch:
        raise ValueError(f"expected key and value of matching (S, N) with N={batch}, got shapes "
                         f"{key.shape} and {value.shape}")
    head_dim = embed_dim // num_heads
    if use_separate_proj_weight:
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        weights = jnp.split(in_proj_weight, 3)
    biases = (None,) * 3 if in_proj_bias is None else jnp.split(in_proj_bias, 3)
    for name, x, w in (("key", key, weights[1]), ("value", value, weights[2])):
        if x.shape[-1] != w.shape[1]:
            raise ValueError(f"expected {name} embedding size {w.shape[1]}, got shape {x.shape}")
    q, k, v = (linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    dtype = q.dtype
    attn_mask = _additive_mask(attn_mask, dtype, masked_value=True)
    if attn_mask is not None:
        want = {2: (target_len, source_len), 3: (batch * num_heads, target_len, source_len)}
        if want.get(attn_mask.ndim) != attn_mask.shape:
            raise ValueError(f"expected attn_mask of shape {want[2]} or {want[3]}, got "
                             f"{attn_mask.shape}")
        attn_mask = attn_mask.reshape((-1, target_len, source_len))
    key_padding_mask = _additive_mask(key_padding_mask, dtype, masked_value=True)
    if key_padding_mask is not None and key_padding_mask.shape != (batch, source_len):
        want = (batch, source_len) if batched else (source_len,)
        got = key_padding_mask.shape if batched else key_padding_mask.shape[1:]
        raise ValueError(f"expected key_padding_mask of shape {want}, got {got}")

    def pad_masks():  # one more key position, visible to every query
        nonlocal attn_mask, key_padding_mask
        if attn_mask is not None:
            attn_mask = jnp.pad(attn_mask, ((0, 0), (0, 0), (0, 1)))
        if key_padding_mask is not None:
            key_padding_mask = jnp.pad(key_padding_mask, ((0, 0), (0, 1)))

    if bias_k is not None:
        k = jnp.concatenate([k, jnp.broadcast_to(bias_k, (1, batch, embed_dim))])
        v = jnp.concatenate([v, jnp.broadcast_to(bias_v, (1, batch, embed_dim))])
        pad_masks()
    batch_heads = batch * num_heads
    q, k, v = (_split_heads(x, batch_heads, head_dim) for x in (q, k, v))
    if add_zero_attn:
        zeros = jnp.zeros((batch_heads, 1, head_dim), dtype)
        k, v = jnp.concatenate([k, zeros], axis=1), jnp.concatenate([v, zeros], axis=1)
        pad_masks()
    if key_padding_mask is not None:
        per_head = jnp.repeat(key_padding_mask, num_heads, axis=0)[:, None, :]
        attn_mask = per_head if attn_mask is None else attn_mask + per_head

    dropout_p = dropout_p if training else 0.0
    # PyTorch's explicit path (need_weights) gives NaN for a fully masked query, its fused
    # path (no weights) zeros: reproduce both.
    out, attn = _attend(q, k, v, attn_mask, dropout_p, dropout_key, head_dim ** -0.5,
                        zero_masked_rows=not need_weights)
    out = jnp.swapaxes(out, 0, 1).reshape(target_len, batch, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias)
    if not need_weights:
        attn = None
    else:
        attn = attn.reshape(batch, num_heads, target_len, attn.shape[-1])
        attn = attn.mean(axis=1) if average_attn_weights else attn
    if not batched:
        out = out[:, 0]
        attn = None if attn is None else attn[0]
    return out, attn
