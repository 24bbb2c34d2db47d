"""The softmax family in XLA (the CPU path), same signatures as `_pallas` on (rows, n) arrays.

XLA fuses each pass below into one loop over memory. The wins over the textbook
compositions: cross-entropy never writes a (rows, n) log-softmax (one pass for the
max, one for the sum of exponentials, a gather for the label), and softmax+top-k
selects from a few candidate chunks instead of running top_k over whole rows.
"""

import jax.numpy as jnp
from jax import lax

from jaxdl.ops import _online

F32 = jnp.float32
TOPK_CHUNK = 128  # top-k candidates are gathered in chunks of this many columns


def _normalizer(x):
    """(m, d) per row, float32, shape (rows, 1)."""
    x = x.astype(F32)
    m = jnp.max(x, axis=1, keepdims=True)
    return m, jnp.sum(jnp.exp(x - _online.safe_shift(m)), axis=1, keepdims=True)


def softmax(x):
    # one exp per element, shared by the sum and the quotient (XLA fuses both)
    x32 = x.astype(F32)
    e = jnp.exp(x32 - _online.safe_shift(jnp.max(x32, axis=1, keepdims=True)))
    return (e / jnp.sum(e, axis=1, keepdims=True)).astype(x.dtype)


def log_softmax(x):
    m, d = _normalizer(x)
    return (x.astype(F32) - _online.lse(m, d)).astype(x.dtype)


def logsumexp(x):
    m, d = _normalizer(x)
    return _online.lse(m[:, 0], d[:, 0])


def softmax_bwd(y, g):
    y32, g32 = y.astype(F32), g.astype(F32)
    return (y32 * (g32 - jnp.sum(y32 * g32, axis=1, keepdims=True))).astype(g.dtype)


def log_softmax_bwd(y, g):
    g32 = g.astype(F32)
    return (g32 - jnp.exp(y.astype(F32)) * jnp.sum(g32, axis=1, keepdims=True)).astype(g.dtype)


def logsumexp_bwd(x, lse, g):
    return (g[:, None] * jnp.exp(x.astype(F32) - lse[:, None])).astype(x.dtype)


def _chunked(x):
    """x as (rows, chunks, TOPK_CHUNK), padded with -inf."""
    n_rows, n = x.shape
    n_chunks = -(-n // TOPK_CHUNK)
    pad = n_chunks * TOPK_CHUNK - n
    if pad:
        x = jnp.pad(x, ((0, 0), (0, pad)), constant_values=-jnp.inf)
    return x.reshape(n_rows, n_chunks, TOPK_CHUNK)


def softmax_topk(x, k):
    """Top-k logits, their indices and the float32 log-sum-exp per row.

    lax.top_k over whole rows costs more than the softmax itself on CPU, so the search
    is narrowed to the k chunks with the largest maxima: every element of the top k
    lies in one of them (a chunk ranked below k others is beaten by each of their
    maxima), and gathering them in index order keeps lax.top_k's lowest-index-first
    order among ties. The chunk maxima also give the row max for the log-sum-exp.
    """
    x = x.astype(F32)
    n_rows, n = x.shape
    if -(-n // TOPK_CHUNK) < 4 * k:
        values, indices = lax.top_k(x, k)
        return values, indices, logsumexp(x)
    chunks = _chunked(x)
    chunk_max = jnp.max(chunks, axis=2)
    m = jnp.max(chunk_max, axis=1, keepdims=True)
    d = jnp.sum(jnp.exp(x - _online.safe_shift(m)), axis=1, keepdims=True)
    _, best = lax.top_k(chunk_max, k)
    best = jnp.sort(best, axis=1)
    candidates = jnp.take_along_axis(chunks, best[:, :, None], axis=1).reshape(n_rows, -1)
    values, pos = lax.top_k(candidates, k)
    chunk = jnp.take_along_axis(best, pos // TOPK_CHUNK, axis=1)
    return values, chunk * TOPK_CHUNK + pos % TOPK_CHUNK, _online.lse(m[:, 0], d[:, 0])


def softmax_topk_bwd(x, lse, values, indices, g):
    weights = (g * values).astype(F32)
    p = jnp.exp(x.astype(F32) - lse[:, None])
    dx = -p * jnp.sum(weights, axis=1, keepdims=True)
    rows = jnp.arange(x.shape[0])[:, None]
    return dx.at[rows, indices].add(weights).astype(x.dtype)


def cross_entropy_stats(x, labels):
    """Per row: float32 log-sum-exp, the label's logit and the sum of logits."""
    x32 = x.astype(F32)
    target = jnp.take_along_axis(x32, labels[:, None], axis=1)[:, 0]
    return logsumexp(x), target, jnp.sum(x32, axis=1)


def cross_entropy_bwd(x, lse, labels, scale, smoothing):
    n_classes = x.shape[1]
    p = jnp.exp(x.astype(F32) - lse[:, None])
    onehot = jnp.arange(n_classes)[None, :] == labels[:, None]
    target = (1.0 - smoothing) * onehot + smoothing / n_classes
    return (scale[:, None] * (p - target)).astype(x.dtype)
