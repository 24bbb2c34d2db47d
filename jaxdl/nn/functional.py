"""`torch.nn.functional` on jax arrays: same names, arguments and defaults.

Differences from PyTorch, by necessity:
- random functions (`dropout`) take `key=`; without it they draw from the
  global stream, which is refused inside a trace (the key would be frozen
  into the compiled code). Inside `dl.jit` use the `nn.Dropout` module.
"""

import jax
import jax.numpy as jnp

from jaxdl._random import next_key

# ---- linear -------------------------------------------------------------------------------


def linear(input, weight, bias=None):
    """y = x W^T + b, W of shape (out_features, in_features)."""
    out = jnp.matmul(input, weight.T)
    return out if bias is None else out + bias


# ---- activations ----------------------------------------------------------------------------


def relu(input, inplace: bool = False):
    return jax.nn.relu(input)


def tanh(input):
    return jnp.tanh(input)


def sigmoid(input):
    return jax.nn.sigmoid(input)


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
    logp = log_softmax(input.astype(jnp.promote_types(input.dtype, jnp.float32)), dim=0 if input.ndim == 1 else 1)
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
