"""Distances and the losses built on them (torch.nn.functional names and defaults)."""

import jax
import jax.numpy as jnp

from jaxdl._dtypes import accumulation_dtype
from jaxdl._module import Module
from jaxdl.nn import _kinks
from jaxdl.nn._reduction import legacy_reduction
from jaxdl.nn._reduction import reduce_loss as _reduce


def vector_norm(x, p, axis, keepdims: bool = False):
    """torch.linalg.vector_norm: p = 0 counts the non-zero entries, p = +-inf takes the max/min
    of |x|; the gradient at a zero vector is 0, as torch's (plain autodiff gives NaN)."""
    if p == 0:
        return jnp.sum(x != 0, axis=axis, keepdims=keepdims).astype(x.dtype)
    if p == float("inf"):
        return jnp.max(jnp.abs(x), axis=axis, keepdims=keepdims)
    if p == -float("inf"):
        return jnp.min(jnp.abs(x), axis=axis, keepdims=keepdims)
    if p == 1:  # the gradient at a zero entry is torch's sign(0) = 0
        return jnp.sum(_kinks.abs(x), axis=axis, keepdims=keepdims)
    zero = jnp.all(x == 0, axis=axis, keepdims=True)
    # powers and sum in at least float32, as torch's reduction (and its gradient with it)
    safe = jnp.where(zero, 1, jnp.abs(x).astype(accumulation_dtype(x.dtype)))
    norm = jnp.where(zero, 0, jnp.sum(safe ** p, axis=axis, keepdims=True) ** (1.0 / p))
    norm = norm.astype(x.dtype)
    return norm if keepdims else jnp.squeeze(norm, axis)


def _clamp_value(x, low):
    """max(x, low) in value with the gradient of x, as torch's clamp of a norm under no_grad."""
    return x + jax.lax.stop_gradient(jnp.maximum(x, low) - x)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps)) along `dim`, after broadcasting x1 and x2,
    as torch (which clamps the norms without a gradient)."""
    try:
        x1, x2 = jnp.broadcast_arrays(x1, x2)
    except ValueError:
        raise ValueError(f"cosine_similarity: x1 of shape {jnp.shape(x1)} and x2 of shape "
                         f"{jnp.shape(x2)} do not broadcast") from None
    if x1.ndim == 0:  # torch: 0-d inputs are one-element vectors
        return cosine_similarity(x1[None], x2[None], 0, eps)
    n1 = _clamp_value(vector_norm(x1, 2, dim, keepdims=True), eps)
    n2 = _clamp_value(vector_norm(x2, 2, dim, keepdims=True), eps)
    return jnp.sum(x1 / n1 * (x2 / n2), axis=dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """|x1 - x2 + eps|_p over the last axis, as PyTorch (0-d inputs are one-element vectors)."""
    diff = x1 - x2 + eps
    if diff.ndim == 0:
        return vector_norm(diff[None], p, -1, keepdim)
    return vector_norm(diff, p, -1, keepdim)


def pdist(input, p: float = 2.0):
    """Distances between every pair of rows i < j of a 2-d input, in row-major order."""
    if input.ndim != 2:
        raise ValueError(f"pdist: input must be 2-d (N, M), got shape {tuple(input.shape)}")
    if p < 0:
        raise ValueError(f"pdist: p must be >= 0, got {p}")
    i, j = jnp.triu_indices(input.shape[0], k=1)
    return vector_norm(input[i] - input[j], p, -1)


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean"):
    """1 - cos where target == 1, max(0, cos - margin) where target == -1, 0 elsewhere; cos with
    torch's 1e-12 added to each squared norm."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    dot = jnp.sum(input1 * input2, axis=-1)
    squares = (jnp.sum(x * x, axis=-1) + 1e-12 for x in (input1, input2))
    cos = dot / jnp.sqrt(next(squares) * next(squares))
    loss = (jnp.where(target == 1, 1 - cos, 0.0)
            + jnp.where(target == -1, _kinks.clamp_min_zero(cos - margin), 0.0))
    return _reduce(loss, reduction)


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """max(0, margin - x) where target != 1, plus x where target != -1 (torch's rule, which
    also defines targets other than +-1)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    below = margin - input
    # torch's clamp_min: at below == 0 (frequent in bfloat16) the gradient passes whole
    loss = (jnp.where(target != 1, _kinks.clamp_min_zero(below), 0.0)
            + jnp.where(target != -1, input, 0.0))
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _reduce(_kinks.clamp_min_zero(-target * (input1 - input2) + margin), reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _reduce(jax.nn.softplus(-target * input), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = -(target * jax.nn.log_sigmoid(input) + (1 - target) * jax.nn.log_sigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce(jnp.mean(loss, axis=-1), reduction)


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = jnp.exp(input) - target * input if log_input else input - target * jnp.log(input + eps)
    if full:  # Stirling's approximation of log(target!), for target > 1
        stirling = target * jnp.log(target) - target + 0.5 * jnp.log(2 * jnp.pi * target)
        loss = loss + jnp.where(target > 1, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean"):
    if var.ndim == input.ndim - 1 or (var.ndim == input.ndim and var.shape[-1] == 1
                                      and input.shape[-1] != 1):
        var = var.reshape(*input.shape[:-1], 1) if var.ndim == input.ndim - 1 else var
    var = _clamp_value(var, eps)  # torch clamps a clone under no_grad: the gradient passes
    loss = 0.5 * (jnp.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * jnp.log(2 * jnp.pi)
    return _reduce(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = jnp.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(_kinks.clamp_min_zero(margin + d_pos - d_neg), reduction)


def multi_margin_loss(input, target, p: int = 1, margin: float = 1.0, weight=None,
                      size_average=None, reduce=None, reduction: str = "mean"):
    """sum_{i != y} max(0, margin - x[y] + x[i])^p / C, optionally weighted by weight[y]."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: only p == 1 and p == 2 are supported, got {p}")
    if input.ndim > 2:
        raise ValueError(f"multi_margin_loss: expected input (C) or (N, C), got shape "
                         f"{tuple(input.shape)}")
    x = input if input.ndim == 2 else input.reshape(1, -1)  # a 0-d input is one class
    y = jnp.asarray(target).reshape(-1)
    picked = jnp.take_along_axis(x, y[:, None], axis=1)
    terms = _kinks.hinge(margin - picked + x) ** p
    if weight is not None:
        terms = terms * jnp.asarray(weight)[y][:, None]
    terms = jnp.where(jnp.arange(x.shape[1])[None] == y[:, None], 0.0, terms)
    loss = jnp.sum(terms, axis=1) / x.shape[1]
    return _reduce(loss if input.ndim == 2 else loss[0], reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean"):
    """max(0, margin + d(a, p) - d(a, n)) with any distance d (default pairwise_distance)."""
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: margin must be greater than 0, "
                         f"got {margin}")
    shapes = [tuple(jnp.shape(x)) for x in (anchor, positive, negative)]
    if len({len(s) for s in shapes}) != 1:
        raise ValueError(f"triplet_margin_with_distance_loss: anchor, positive and negative must "
                         f"have the same number of dimensions, got shapes {shapes}")
    distance = pairwise_distance if distance_function is None else distance_function
    d_pos, d_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        d_neg = jnp.minimum(d_neg, distance(positive, negative))
    return _reduce(_kinks.clamp_min_zero(margin + d_pos - d_neg), reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """sum over target classes j and non-target classes i of max(0, 1 - (x[j] - x[i])) / C.

    `target` holds class indices, ended by the first -1 (the rest is ignored), as PyTorch.
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    input, target = jnp.asarray(input), jnp.asarray(target)
    if input.ndim > 2 or target.shape != input.shape:
        raise ValueError(f"multilabel_margin_loss: expected input (C) or (N, C) and an integer "
                         f"target of the same shape, got {tuple(input.shape)} and "
                         f"{tuple(target.shape)}")
    # a 0-d input is one class
    x, y = (input, target) if input.ndim == 2 else (input.reshape(1, -1), target.reshape(1, -1))
    classes = x.shape[1]
    listed = jnp.cumprod(y >= 0, axis=1).astype(bool)  # (N, J): entries before the first -1
    safe = jnp.where(listed, y, 0)
    is_target = jnp.any(listed[:, :, None] & (safe[:, :, None] == jnp.arange(classes)), axis=1)
    picked = jnp.take_along_axis(x, safe, axis=1)  # (N, J)
    hinge = _kinks.hinge(1 - picked[:, :, None] + x[:, None, :])  # (N, J, C)
    hinge = jnp.where(listed[:, :, None] & ~is_target[:, None, :], hinge, 0.0)
    loss = jnp.sum(hinge, axis=(1, 2)) / classes
    return _reduce(loss if input.ndim == 2 else loss[0], reduction)


class PairwiseDistance(Module):
    """|x1 - x2 + eps|_p over the last axis (a distance for TripletMarginWithDistanceLoss)."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim  # torch names the order `norm`

    def forward(self, x1, x2):
        return pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return cosine_similarity(x1, x2, self.dim, self.eps)
