"""Loss modules: thin wrappers over `functional` with PyTorch's constructor arguments."""

import jax.numpy as jnp

from jaxdl._module import Module
from jaxdl.nn import functional as F
from jaxdl.nn._reduction import REDUCTIONS


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        if size_average is not None or reduce is not None:
            raise NotImplementedError(
                "size_average and reduce are deprecated in PyTorch; use reduction='mean'|'sum'|'none'"
            )
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction={reduction!r} is not valid; use one of {REDUCTIONS}")
        self.reduction = reduction

    def _check_same_shape(self, input, target):
        if input.shape != target.shape:
            raise self._input_error("target of shape", tuple(input.shape), tuple(target.shape))


class MSELoss(_Loss):
    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.l1_loss(input, target, reduction=self.reduction)


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
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
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
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__(weight, size_average, reduce, reduction)
        pos_weight = None if pos_weight is None else jnp.asarray(pos_weight, jnp.float32)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """KL divergence; `input` holds log-probabilities. reduction='batchmean' is the true KL."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        batchmean = reduction == "batchmean"
        super().__init__(size_average, reduce, "mean" if batchmean else reduction)
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        self._check_same_shape(input, target)
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CTCLoss(_Loss):
    """CTC loss; forward(log_probs (T, N, C), targets, input_lengths, target_lengths)."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        self._check_input(log_probs, (2, 3))
        if targets.ndim not in (1, 2):
            raise self._input_error("targets of rank", "1-d or 2-d", f"shape {tuple(targets.shape)}")
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                          self.reduction, self.zero_infinity)

    def extra_repr(self):
        return f"blank={self.blank}, reduction={self.reduction!r}, zero_infinity={self.zero_infinity}"


class MultiLabelMarginLoss(_Loss):
    def forward(self, input, target):
        self._check_input(input, (1, 2))
        if tuple(target.shape) != tuple(input.shape):
            raise self._input_error("target of shape", tuple(input.shape), tuple(target.shape))
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet loss with any distance (a callable of two arrays, e.g. a jaxdl function or module;
    None is F.pairwise_distance)."""

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
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)

    def extra_repr(self):
        return f"margin={self.margin}, swap={self.swap}, reduction={self.reduction!r}"
