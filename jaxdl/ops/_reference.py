"""The softmax family in XLA (the CPU path), same signatures as `_pallas` on (rows, n) arrays.

XLA fuses each pass below into one loop over memory (on CPU, a YNNPACK fusion when it
holds only the ops YNNPACK knows: max/sum reductions, exp, arithmetic, broadcasts; a
`where` splits a fusion). The wins over the textbook compositions:
- the log-sum-exp (logsumexp, log_softmax, cross-entropy) takes one pass over x
  instead of a max pass and an exp-sum pass, by shifting with a cheap lower bound of
  the row max (`_one_pass_lse`);
- cross-entropy never writes a (rows, n) log-softmax;
- softmax+top-k selects from a few candidate chunks instead of running top_k over
  whole rows.
"""

import jax.numpy as jnp
from jax import lax

from jaxdl.ops import _online

F32 = jnp.float32
TOPK_CHUNK = 128  # top-k candidates are gathered in chunks of this many columns
SEED_COLUMNS = 8  # the max of a row's first columns seeds the one-pass shift
SEED_SOFTMAX_MIN_COLUMNS = 8192  # softmax skips its max sweep for rows this long


def _normalizer(x):
    """(m, d) per row, float32, shape (rows, 1): a max pass, then an exp-sum pass."""
    x = x.astype(F32)
    m = jnp.max(x, axis=1, keepdims=True)
    return m, jnp.sum(jnp.exp(x - _online.safe_shift(m)), axis=1, keepdims=True)


def _two_pass_lse(x):
    m, d = _normalizer(x)
    return _online.lse(m[:, 0], d[:, 0])


def _seed(x, floor=None):
    """A lower bound of each row's max, float32 (rows,): the max of its first few
    columns (and `floor`, a per-row entry already at hand, e.g. the label's logit)."""
    c = jnp.max(x[:, :SEED_COLUMNS].astype(F32), axis=1)
    return c if floor is None else jnp.maximum(c, floor)


def _one_pass_lse(x, c):
    """float32 log-sum-exp per row in one pass over x (any float dtype), given c <= the
    row max.

    lse = c + log(sum exp(x - c)) for any shift c; the max is only the usual choice
    because it can never overflow. With c <= max the max's own term is >= 1, so the
    sum cannot underflow, and if the sum is finite no term overflowed: the result is
    the log-sum-exp to rounding. A row whose max exceeds c by more than ~88 (or that
    holds nan, +inf, or only -inf, or whose seed is -inf) gives inf or nan; then the
    whole batch takes the exact two-pass path instead (a `lax.cond`: the common case
    pays one pass, the rare one three).
    """
    # x stays in its dtype up to here (converting inside each pass fuses; a converted
    # copy handed to the cond would be a (rows, n) float32 temporary)
    d = jnp.sum(jnp.exp(x.astype(F32) - c[:, None]), axis=1)
    fits = jnp.all(jnp.isfinite(d))
    return lax.cond(fits, lambda x: c + jnp.log(d), _two_pass_lse, x)


def _scaled_exp(x, shift):
    """float32 exp(x - shift) / (its row sums), and the row sums (rows, 1).

    The quotient is a multiply by one reciprocal per row; XLA writes the exponentials
    into the output buffer and scales them there, so no (rows, n) temporary exists.
    """
    e = jnp.exp(x.astype(F32) - shift)
    d = jnp.sum(e, axis=1, keepdims=True)
    return e * (1.0 / d), d


def _softmax_max_shift(x):
    # no safe_shift here: a `where` on the max would split the max -> exp YNNPACK fusion
    # into two sweeps over x, and a row of -inf gives nan either way (as jax.nn.softmax)
    return _scaled_exp(x, jnp.max(x.astype(F32), axis=1, keepdims=True))[0]


def _softmax_seed_shift(x):
    """softmax shifted by the seed: x is swept once for the exponentials instead of twice.

    As in `_one_pass_lse`, finite row sums mean no term overflowed and the quotient is
    the softmax; otherwise the max-shifted softmax replaces it. That fallback is a
    while loop that runs zero or one times, not a `lax.cond`: XLA updates a loop's
    carry in place but copies a conditional's (rows, n) operand.
    """
    y, d = _scaled_exp(x, _seed(x)[:, None])
    overflowed = ~jnp.all(jnp.isfinite(d))
    redo = lambda state: (_softmax_max_shift(x), False)  # noqa: E731
    return lax.while_loop(lambda state: state[1], redo, (y, overflowed))[0]


def softmax(x):
    # long rows: the max sweep reads x from L3 a second time, and skipping it pays for
    # the overflow check; short rows are re-read from L1/L2 and the check would cost more
    if x.shape[1] >= SEED_SOFTMAX_MIN_COLUMNS:
        return _softmax_seed_shift(x).astype(x.dtype)
    return _softmax_max_shift(x).astype(x.dtype)


def log_softmax(x):
    return (x.astype(F32) - logsumexp(x)[:, None]).astype(x.dtype)


def logsumexp(x):
    return _one_pass_lse(x, _seed(x))


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


def _label_logits(x, labels):
    """x[i, labels[i]], nan where a label is outside [0, n) (as take_along_axis's fill).

    A gather from the flattened array with clipped, hence in-bounds, indices: on CPU
    a few times cheaper than take_along_axis's general gather (which wraps negative
    indices and checks bounds per element). Flat indices are int32: huge arrays take
    the general gather.
    """
    rows, n = x.shape
    if x.size >= 2**31:
        return jnp.take_along_axis(x, labels[:, None], axis=1)[:, 0]
    flat = jnp.arange(rows, dtype=jnp.int32) * n + jnp.clip(labels, 0, n - 1)
    picked = x.reshape(-1).at[flat].get(mode="promise_in_bounds")
    return jnp.where((labels >= 0) & (labels < n), picked, jnp.nan)


def cross_entropy_stats(x, labels):
    """Per row: float32 log-sum-exp, the label's logit and the sum of logits."""
    target = _label_logits(x, labels).astype(F32)
    # the label's logit is a free seed (a trained model's is usually near the max)
    return _one_pass_lse(x, _seed(x, target)), target, jnp.sum(x.astype(F32), axis=1)


def cross_entropy_bwd(x, lse, labels, scale, smoothing):
    n_classes = x.shape[1]
    p = jnp.exp(x.astype(F32) - lse[:, None])
    onehot = jnp.arange(n_classes)[None, :] == labels[:, None]
    target = (1.0 - smoothing) * onehot + smoothing / n_classes
    return (scale[:, None] * (p - target)).astype(x.dtype)
