"""Connectionist Temporal Classification loss (Graves et al. 2006), as `torch.nn.functional.ctc_loss`.

The forward (alpha) recursion runs in log space over time with `lax.scan`, on the extended
label sequence blank, y1, blank, y2, ..., blank (length 2S + 1); the gradient is autodiff of
that recursion. Unreachable states hold -inf; the log-sum-exp used here returns -inf with a
zero (not NaN) gradient when all its terms are -inf, so impossible alignments give an infinite
loss without poisoning the gradients of the other samples.

Gradient convention: PyTorch's hand-written backward returns
`exp(log_probs) - occupation` (the gradient w.r.t. the logits of a log_softmax, written onto
log_probs), while this is the true derivative w.r.t. log_probs, `-occupation`. Through
`log_softmax` (how CTC is fed) both give the same logits gradient.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._tracing import is_traced
from jaxdl.nn._reduction import reduce_loss


def _logsumexp(*terms):
    """log(sum(exp(terms))) elementwise; -inf with zero gradient when every term is -inf."""
    m = functools.reduce(jnp.maximum, terms)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))  # any shift is exact
    total = sum(jnp.exp(t - m) for t in terms)
    positive = total > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, total, 1.0)) + m, -jnp.inf)


def _concrete(x):
    """x as numpy when it is known now (not a tracer), else None."""
    return None if is_traced(x) else np.asarray(x)


def _lengths(value, batch, what):
    lengths = jnp.asarray(value)
    if not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise TypeError(f"ctc_loss: {what} must be integers, got dtype {lengths.dtype}")
    if lengths.size != batch or lengths.ndim > 1:
        raise ValueError(f"ctc_loss: expected {what} of shape ({batch},), got "
                         f"{tuple(lengths.shape)}")
    return lengths.reshape(batch).astype(jnp.int32)


def _padded_targets(targets, target_lengths, batch):
    """(N, S) targets from either torch form: padded (N, S) or concatenated (sum(lengths),)."""
    if targets.ndim == 2:
        if targets.shape[0] != batch:
            raise ValueError(f"ctc_loss: expected padded targets of shape ({batch}, S), got "
                             f"{tuple(targets.shape)}")
        return targets
    if targets.ndim != 1:
        raise ValueError(f"ctc_loss: expected targets (N, S) or concatenated 1-d, got shape "
                         f"{tuple(targets.shape)}")
    known = _concrete(target_lengths)
    if known is not None and int(known.sum()) != targets.shape[0]:
        raise ValueError(f"ctc_loss: concatenated targets have {targets.shape[0]} labels but "
                         f"target_lengths sum to {int(known.sum())}")
    # The padded width must be static: the longest target when the lengths are known now.
    width = int(known.max(initial=0)) if known is not None else targets.shape[0]
    if width == 0 or targets.shape[0] == 0:  # only empty targets
        return jnp.zeros((batch, 1), targets.dtype)
    starts = jnp.cumsum(target_lengths) - target_lengths
    positions = starts[:, None] + jnp.arange(width)[None, :]
    return targets[jnp.clip(positions, 0, targets.shape[0] - 1)]


def _negative_log_likelihood(log_probs, targets, input_lengths, target_lengths, blank):
    """-log p(target | input) per sample, for log_probs (T, N, C) and padded targets (N, S)."""
    steps, batch, classes = log_probs.shape
    if targets.shape[1] == 0:  # every target empty: one (masked) label column keeps shapes simple
        targets = jnp.zeros((batch, 1), jnp.int32)
    states = 2 * targets.shape[1] + 1
    s = jnp.arange(states)
    label_pos = jnp.maximum(s - 1, 0) // 2  # odd states hold labels, even ones the blank
    real = (s % 2 == 1) & (label_pos[None, :] < target_lengths[:, None])  # (N, 2S+1)
    labels = targets[:, label_pos]
    # padding beyond a target's length may hold anything: clip it before gathering
    labels = jnp.where(real, jnp.clip(labels, 0, classes - 1), blank).astype(jnp.int32)
    # A label may be reached from two states back unless it repeats the label there.
    previous = jnp.pad(labels, ((0, 0), (2, 0)), constant_values=blank)[:, :-2]
    can_skip = real & (labels != previous) & (s >= 2)[None, :]
    emit = jnp.take_along_axis(log_probs, jnp.broadcast_to(labels[None], (steps, batch, states)),
                               axis=2)  # (T, N, 2S+1)

    minus_inf = jnp.full((batch, 1), -jnp.inf, log_probs.dtype)
    alpha0 = jnp.where((s < 2)[None, :], emit[0], -jnp.inf)

    def step(alpha, inputs):
        t, emit_t = inputs
        from_one = jnp.concatenate([minus_inf, alpha[:, :-1]], axis=1)
        from_two = jnp.where(can_skip, jnp.concatenate([minus_inf, minus_inf, alpha[:, :-2]], 1),
                             -jnp.inf)
        new = _logsumexp(alpha, from_one, from_two) + emit_t
        return jnp.where((t < input_lengths)[:, None], new, alpha), None

    alpha, _ = jax.lax.scan(step, alpha0, (jnp.arange(1, steps), emit[1:]))
    last = jnp.take_along_axis(alpha, (2 * target_lengths)[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(alpha, jnp.maximum(2 * target_lengths - 1, 0)[:, None], axis=1)[:, 0]
    before = jnp.where(target_lengths > 0, before, -jnp.inf)
    return -_logsumexp(last, before)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False):
    """PyTorch's CTC loss.

    Arguments:
        log_probs: (T, N, C) log-probabilities (e.g. log_softmax over C), or (T, C) unbatched.
        targets: padded (N, S) class indices, or all targets concatenated (sum(target_lengths),);
            (S,) when unbatched. They must not contain `blank`.
        input_lengths, target_lengths: (N,) lengths (or scalars when unbatched).
        reduction: 'mean' divides each loss by its target length (at least 1) and averages
            over the batch, as PyTorch; 'sum'; 'none' gives (N,).
        zero_infinity: replace infinite losses (no alignment possible) and their gradients by 0.
    """
    log_probs = jnp.asarray(log_probs)
    if not jnp.issubdtype(log_probs.dtype, jnp.floating):
        raise TypeError(f"ctc_loss: expected floating log_probs, got dtype {log_probs.dtype}")
    if log_probs.ndim not in (2, 3):
        raise ValueError(f"ctc_loss: expected log_probs (T, N, C) or unbatched (T, C), got shape "
                         f"{tuple(log_probs.shape)}")
    batched = log_probs.ndim == 3
    x = log_probs if batched else log_probs[:, None]
    steps, batch, classes = x.shape
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss: blank={blank} must be a class index in [0, {classes})")
    targets = jnp.asarray(targets)
    if not jnp.issubdtype(targets.dtype, jnp.integer):
        raise TypeError(f"ctc_loss: targets must be integer class indices, got {targets.dtype}")
    input_lengths = _lengths(input_lengths, batch, "input_lengths")
    target_lengths = _lengths(target_lengths, batch, "target_lengths")
    known = _concrete(input_lengths)
    if known is not None and (known.max() > steps or known.min() < 0):
        raise ValueError(f"ctc_loss: input_lengths must lie in [0, {steps}] (log_probs has "
                         f"T={steps}), got {known.tolist()}")
    if batched:
        padded = _padded_targets(targets, target_lengths, batch)
    else:
        if targets.ndim != 1:
            raise ValueError(f"ctc_loss: expected unbatched targets (S,), got shape "
                             f"{tuple(targets.shape)}")
        padded = targets[None]
    known = _concrete(target_lengths)
    if known is not None and known.size and (known.min() < 0 or known.max() > padded.shape[1]):
        raise ValueError(f"ctc_loss: target_lengths must lie in [0, {padded.shape[1]}] "
                         f"(targets have {padded.shape[1]} per sample), got {known.tolist()}")

    loss = _negative_log_likelihood(x, padded, input_lengths, target_lengths, blank)
    if zero_infinity:
        loss = jnp.where(jnp.isinf(loss), 0.0, loss)
    if reduction == "mean":
        return jnp.mean(loss / jnp.maximum(target_lengths, 1).astype(loss.dtype))
    return reduce_loss(loss if batched else loss[0], reduction)
