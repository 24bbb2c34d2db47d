"""`torch.nn.functional` on jax arrays: same names, arguments and defaults.

Differences from PyTorch, by necessity:
- random functions (`dropout`) take `key=`; without it they draw from the
  global stream, which is refused inside a trace (the key would be frozen
  into the compiled code). Inside `dl.jit` use the `nn.Dropout` module.
"""

import jax
import jax.numpy as jnp

from jaxdl._random import next_key

# The layer families define their functional forms next to their modules; re-exported here.
from jaxdl.nn._conv import (  # noqa: F401
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    pad,
)
from jaxdl.nn._embedding import embedding, embedding_bag, one_hot  # noqa: F401
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
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)
from jaxdl.nn._resample import interpolate  # noqa: F401

# ---- linear -------------------------------------------------------------------------------


def linear(input, weight, bias=None):
    """y = x W^T + b, W of shape (out_features, in_features)."""
    out = jnp.matmul(input, weight.T)
    return out if bias is None else out + bias


def bilinear(input1, input2, weight, bias=None):
    """y_o = x1^T W_o x2 + b_o, W of shape (out_features, in1_features, in2_features)."""
    out = jnp.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else out + bias


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


def _softmax_dim(input, dim):
    if dim is None:  # PyTorch's legacy implicit choice
        return 0 if input.ndim in (0, 1, 3) else 1
    return dim


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.astype(dtype)
    return jax.nn.softmax(x, axis=_softmax_dim(input, dim))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.astype(dtype)
    return jax.nn.log_softmax(x, axis=_softmax_dim(input, dim))


# ---- dropout --------------------------------------------------------------------------------


def _fresh_key(key, input, what):
    if key is not None:
        return key
    if isinstance(input, jax.core.Tracer):
        raise ValueError(
            f"F.{what} inside a traced function needs key=...: the global key stream would be "
            f"frozen into the compiled code. Use the nn.{what.capitalize()} module instead."
        )
    return next_key()


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return jnp.zeros_like(input)
    keep = jax.random.bernoulli(_fresh_key(key, input, "dropout"), 1.0 - p, input.shape)
    return jnp.where(keep, input / (1.0 - p), 0).astype(input.dtype)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels (axis 1 of (N, C, ...)) with probability p, scaling the rest."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return jnp.zeros_like(input)
    shape = input.shape[:2] + (1,) * (input.ndim - 2)
    keep = jax.random.bernoulli(_fresh_key(key, input, "dropout2d"), 1.0 - p, shape)
    return jnp.where(keep, input / (1.0 - p), 0).astype(input.dtype)


# ---- losses ---------------------------------------------------------------------------------

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(loss, reduction):
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction={reduction!r} is not valid; use one of {_REDUCTIONS}")


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    return _reduce(jnp.square(input - target), reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    return _reduce(jnp.abs(input - target), reduction)


def _class_last(x):
    """Move the class axis (1 for N-d inputs, 0 for a single sample) to the end."""
    return x if x.ndim == 1 else jnp.moveaxis(x, 1, -1)


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log-likelihood of class indices; `input` holds log-probabilities."""
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
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    target = jnp.asarray(target)
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
    d = jnp.abs(input - target)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(jnp.where(d < beta, 0.5 * jnp.square(d) / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0,
               weight=None):
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)."""
    if weight is not None:
        raise NotImplementedError("F.huber_loss(weight=...)")
    d = jnp.abs(input - target)
    return _reduce(jnp.where(d <= delta, 0.5 * jnp.square(d), delta * (d - 0.5 * delta)),
                   reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch."""
    log_x = jnp.maximum(jnp.log(input), -100.0)
    log_1mx = jnp.maximum(jnp.log1p(-input), -100.0)
    loss = -(target * log_x + (1 - target) * log_1mx)
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """BCE on logits, stable form; pos_weight scales the positive term (per class)."""
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
    if log_target:
        loss = jnp.exp(target) * (target - input)
    else:
        loss = jax.scipy.special.xlogy(target, target) - target * input
    if reduction == "batchmean":
        return jnp.sum(loss) / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)
