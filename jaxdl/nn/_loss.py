"""Losses: functional forms and modules with PyTorch's constructor arguments."""

import functools
import math

import jax
import jax.numpy as jnp

from jaxdl import _anomaly, amp, ops
from jaxdl._dtypes import accumulation_dtype
from jaxdl._module import Module
from jaxdl.nn import _kinks
from jaxdl.nn._activation import _ops_supports, log_softmax
from jaxdl.nn._ctc import ctc_loss
from jaxdl.nn._distance import multilabel_margin_loss, triplet_margin_with_distance_loss
from jaxdl.nn._linear import linear
from jaxdl.nn._reduction import REDUCTIONS, legacy_reduction
from jaxdl.nn._reduction import reduce_loss as _reduce


def _pointwise_pair(where, input, target):
    """input and target in float (amp), after torch's check that their shapes broadcast."""
    try:
        jnp.broadcast_shapes(jnp.shape(input), jnp.shape(target))
    except ValueError:
        raise ValueError(f"{where}: input of shape {jnp.shape(input)} and target of shape "
                         f"{jnp.shape(target)} do not broadcast") from None
    return amp.full(input, target)


def _same_shape(where, input, target):
    if jnp.shape(input) != jnp.shape(target):
        raise ValueError(f"{where}: target of shape {jnp.shape(target)} must have the input's "
                         f"shape {jnp.shape(input)}")
    return amp.full(input, target)


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _pointwise_pair("mse_loss", input, target)
    return _reduce(jnp.square(input - target), reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _pointwise_pair("l1_loss", input, target)
    return _reduce(_kinks.abs(input - target), reduction)


def _class_last(x):
    """Move the class axis (1 for N-d inputs, 0 for a single sample) to the end."""
    return x if x.ndim == 1 else jnp.moveaxis(x, 1, -1)


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log-likelihood of class indices; `input` holds log-probabilities."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    input = amp.full(input)
    logp = _class_last(input)
    num_classes = logp.shape[-1]
    target = jnp.asarray(target)
    if target.shape != logp.shape[:-1]:
        raise ValueError(
            f"nll_loss: expected target of shape {tuple(logp.shape[:-1])} for input of shape "
            f"{tuple(input.shape)}, got {tuple(target.shape)}"
        )
    _anomaly.check_indices(target, num_classes, "Target {} is out of bounds.", ignore_index)
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
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = amp.full(input, target)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    target = jnp.asarray(target)
    indices_shape = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
    if (weight is None and _ops_supports(input) and jnp.issubdtype(target.dtype, jnp.integer)
            and target.shape == indices_shape and reduction in REDUCTIONS):
        # class indices without weights: one online pass, no (N, C) log-softmax written
        _anomaly.check_indices(target, input.shape[0 if input.ndim == 1 else 1],
                               "Target {} is out of bounds.", ignore_index)
        return ops.cross_entropy(input, target, ignore_index, label_smoothing, reduction,
                                 axis=0 if input.ndim == 1 else 1)
    logp = log_softmax(input.astype(accumulation_dtype(input.dtype)),
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
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _pointwise_pair("smooth_l1_loss", input, target)
    if beta == 0.0:  # torch's is then l1_loss's
        return _reduce(_kinks.abs(input - target), reduction)
    d = jnp.abs(input - target)
    return _reduce(jnp.where(d < beta, 0.5 * jnp.square(d) / beta, d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0,
               weight=None):
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)."""
    input, target = _pointwise_pair("huber_loss", input, target)
    if weight is not None:
        raise NotImplementedError("F.huber_loss(weight=...)")
    d = jnp.abs(input - target)
    return _reduce(jnp.where(d <= delta, 0.5 * jnp.square(d), delta * (d - 0.5 * delta)),
                   reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _same_shape("binary_cross_entropy", input, target)
    loss = _binary_cross_entropy_terms(input, target)
    return _reduce(loss if weight is None else loss * weight, reduction)


# torch's binary_cross_entropy_backward divides by max(x (1 - x), EPSILON)
_BCE_EPSILON = 1e-12


@jax.custom_jvp
def _binary_cross_entropy_terms(x, t):
    """Each element's loss, with torch's derivatives: (x - t) / max(x (1 - x), 1e-12) for x
    and log(1 - x) - log(x) for t. Autodiff of the clamped logs gave NaN where x is exactly
    0 or 1 (a saturated sigmoid), where torch's gradient is finite (0 where t equals x)."""
    log_x = jnp.maximum(jnp.log(x), -100.0)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100.0)
    return -(t * log_x + (1 - t) * log_1mx)


@functools.partial(_binary_cross_entropy_terms.defjvp, symbolic_zeros=True)
def _binary_cross_entropy_terms_jvp(primals, tangents):
    x, t = primals
    d_x, d_t = tangents
    loss = _binary_cross_entropy_terms(x, t)
    acc = accumulation_dtype(x.dtype)  # 1e-12 is 0 in half precision
    wide_x = x.astype(acc)
    tangent = jnp.zeros_like(loss)
    if not isinstance(d_x, jax.custom_derivatives.SymbolicZero):
        slope = (wide_x - t) / jnp.maximum((1 - wide_x) * wide_x, _BCE_EPSILON)
        tangent = tangent + (slope * d_x).astype(loss.dtype)
    if not isinstance(d_t, jax.custom_derivatives.SymbolicZero):  # its inf * 0 would be NaN
        tangent = tangent + ((jnp.log1p(-wide_x) - jnp.log(wide_x)) * d_t).astype(loss.dtype)
    return loss, tangent


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """BCE on logits, stable form; pos_weight scales the positive term (per class)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = _same_shape("binary_cross_entropy_with_logits", input, target)
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
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = amp.full(input, target)
    if log_target:
        loss = jnp.exp(target) * (target - input)
    else:
        loss = jax.scipy.special.xlogy(target, target) - target * input
    if reduction == "batchmean":
        return jnp.sum(loss) / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


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


class _Loss(Module):
    _reductions = REDUCTIONS

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in self._reductions:
            raise ValueError(f"reduction={reduction!r} is not valid; use one of {self._reductions}")
        self.reduction = reduction

    def _check_same_shape(self, input, target):
        if input.shape != target.shape:
            raise self._input_error("target of shape", tuple(input.shape), tuple(target.shape))


class MSELoss(_Loss):
    def forward(self, input, target):
        self._check_same_shape(input, target)
        return mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        self._check_same_shape(input, target)
        return l1_loss(input, target, reduction=self.reduction)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        if weight is not None:
            self.register_buffer("weight", jnp.asarray(weight, jnp.float32))
        else:
            self.register_buffer("weight", None)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        if input.ndim == 0:
            raise self._input_error("input of rank", "1 or more", "a scalar")
        return cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        self._check_same_shape(input, target)
        return binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__(weight, size_average, reduce, reduction)
        pos_weight = None if pos_weight is None else jnp.asarray(pos_weight, jnp.float32)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """KL divergence; `input` holds log-probabilities. reduction='batchmean' is the true KL."""

    _reductions = (*REDUCTIONS, "batchmean")

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CTCLoss(_Loss):
    """CTC loss; forward(log_probs (T, N, C), targets, input_lengths, target_lengths)."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        self._check_input(log_probs, (2, 3))
        if targets.ndim not in (1, 2):
            raise self._input_error("targets of rank", "1-d or 2-d", f"shape {tuple(targets.shape)}")
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                          self.reduction, self.zero_infinity)

    def extra_repr(self):
        return f"blank={self.blank}, reduction={self.reduction!r}, zero_infinity={self.zero_infinity}"


class MultiLabelMarginLoss(_Loss):
    def forward(self, input, target):
        self._check_input(input, (1, 2))
        if tuple(target.shape) != tuple(input.shape):
            raise self._input_error("target of shape", tuple(input.shape), tuple(target.shape))
        return multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet loss with any distance (a callable of two arrays, e.g. a jaxdl function or module;
    None is pairwise_distance)."""

    def __init__(self, *, distance_function=None, margin: float = 1.0, swap: bool = False,
                 reduction: str = "mean"):
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: margin must be greater than 0, "
                             f"got {margin}")
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        for name, x in (("positive", positive), ("negative", negative)):
            if x.ndim != anchor.ndim:
                raise self._input_error(f"{name} of the anchor's rank", anchor.ndim,
                                        f"shape {tuple(x.shape)} (anchor {tuple(anchor.shape)})")
        return triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)

    def extra_repr(self):
        return f"margin={self.margin}, swap={self.swap}, reduction={self.reduction!r}"
