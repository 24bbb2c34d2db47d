"""Flash attention in XLA (the CPU path): loops over (query block, key block) tiles.

Arrays arrive normalised by `_attention`: q (B, Hk, G, L, E) with G query heads per
key/value head, k (B, Hk, S, E), v (B, Hk, S, Ev), bias None or float32
(Bm, Hkm, Gm, Lm, Sm) with each axis 1 or full. Key/value heads go through in small
chunks (`lax.map`), and within a chunk only one (c, 1, G, bq, bk) score tile exists at a
time, small enough to stay in cache. The forward folds key tiles into the online
normalizer (m, l) and an output accumulator; the backward recomputes each tile's
probabilities from q, k and the saved per-row log-sum-exp (FlashAttention-2's backward:
key blocks outside, query blocks inside, dq accumulated in a float32 buffer). Causal
tiles wholly above the diagonal are skipped (the loops' trip counts depend on the block
index).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxdl._counter_random import keep_mask, stream_seed
from jaxdl._dtypes import accumulation_dtype
from jaxdl.ops import _online

# (BLOCK, BLOCK) tiles: measured faster than 64, 256, mixed shapes and row blocks against
# all their keys, on CPU, in chunks of two heads
BLOCK = 128
# Query heads per chunk (one `lax.map` step): at (4, 8, 1024, 64) causal, chunks of two
# heads ran 1.4x faster than all 32 heads in each tile (2026-12-01, one core); the
# chunk's (2, 128, 128) float32 scores and their exp stay in the core's L2 cache (2 MiB)
HEADS_PER_CHUNK = 2


@dataclasses.dataclass(frozen=True)
class Config:
    """Static settings of one attention call (hashable: part of the jit cache key)."""

    causal: bool
    scale: float
    dropout_p: float


# ---- tiles ------------------------------------------------------------------------------------


def blocks_for(n_q, n_k):
    return min(BLOCK, n_q), min(BLOCK, n_k)


def _cdiv(a, b):
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class _Tiling:
    n_q: int
    n_k: int
    bq: int
    bk: int

    @property
    def q_blocks(self):
        return _cdiv(self.n_q, self.bq)

    @property
    def k_blocks(self):
        return _cdiv(self.n_k, self.bk)

    def key_ranges(self, i, causal):
        """Key blocks of query block i: [0, a) need no mask, [a, b) do (the causal
        diagonal, the ragged last block); blocks from b on are skipped."""
        whole = self.n_k // self.bk  # blocks without padded keys
        if not causal:
            return whole, self.k_blocks
        seen = jnp.minimum(self.k_blocks, _cdiv((i + 1) * self.bq, self.bk))
        below = jnp.minimum(whole, (i * self.bq + 1) // self.bk)  # every row sees every key
        return below, seen

    def query_ranges(self, j, causal):
        """Query blocks that see key block j: [a, b) need a mask, [b, end) do not."""
        if not causal:
            return 0, jnp.where((j + 1) * self.bk > self.n_k, self.q_blocks, 0)
        first = (j * self.bk) // self.bq
        unmasked = jnp.where((j + 1) * self.bk > self.n_k, self.q_blocks,
                             jnp.minimum(self.q_blocks, _cdiv((j + 1) * self.bk - 1, self.bq)))
        return first, unmasked


def _to_blocks(x, axis, size, value=0.0):
    """Split `axis` into blocks of `size` (padded with `value`), block index first."""
    n = _cdiv(x.shape[axis], size)
    if x.shape[axis] != n * size:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, n * size - x.shape[axis])
        x = jnp.pad(x, widths, constant_values=value)
    x = x.reshape(*x.shape[:axis], n, size, *x.shape[axis + 1:])
    return jnp.moveaxis(x, axis, 0)


def _from_blocks(x, axis, n):
    """Inverse of `_to_blocks` (block index first -> `axis`), cut to length n."""
    x = jnp.moveaxis(x, 0, axis)
    x = x.reshape(*x.shape[:axis], -1, *x.shape[axis + 2:])
    return lax.slice_in_dim(x, 0, n, axis=axis)


def _bias_tile(bias, row0, n_rows, col0, n_cols):
    """The (.., n_rows, n_cols) slice of a bias whose L and S axes may be broadcast
    (length 1)."""
    if bias is None:
        return None
    if bias.shape[-2] > 1:
        bias = lax.dynamic_slice_in_dim(bias, row0, n_rows, 3)
    if bias.shape[-1] > 1:
        bias = lax.dynamic_slice_in_dim(bias, col0, n_cols, 4)
    return bias


# G query heads share a key/value head: fold them into the rows of 4-d matrix products
# (a 5-d product made XLA copy each score tile into another layout)


def _rows_times(x, y):
    """x (B, Hk, G, n, c) @ y (B, Hk, c, d) -> (B, Hk, G, n, d), float32."""
    b, h, g, n, c = x.shape
    out = jnp.einsum("bhqc,bhcd->bhqd", x.reshape(b, h, g * n, c), y,
                     preferred_element_type=accumulation_dtype(x.dtype))
    return out.reshape(b, h, g, n, -1)


def _rows_times_t(x, y):
    """x (B, Hk, G, n, c) @ y (B, Hk, d, c)^T -> (B, Hk, G, n, d), float32."""
    b, h, g, n, c = x.shape
    out = jnp.einsum("bhqc,bhdc->bhqd", x.reshape(b, h, g * n, c), y,
                     preferred_element_type=accumulation_dtype(x.dtype))
    return out.reshape(b, h, g, n, -1)


def _columns(blocks):
    """Row blocks (n, B, Hk, G, rows, c) -> (n, B, Hk, c, G*rows): each block transposed once,
    outside the loops, for `_columns_times`."""
    n, b, h, g, rows, c = blocks.shape
    return jnp.moveaxis(blocks, -1, 3).reshape(n, b, h, c, g * rows)


def _columns_times(x_t, y):
    """x_t (B, Hk, c, G*n) @ y (B, Hk, G, n, d) -> (B, Hk, c, d), float32: the transposed-left
    product x^T y summed over G, with x stored transposed (by `_columns`). XLA's CPU backend
    hands a product whose left operand contracts its major axis to a slower kernel (Eigen
    instead of YNNPACK)."""
    b, h, g, n, d = y.shape
    return jnp.einsum("bhcq,bhqd->bhcd", x_t, y.reshape(b, h, g * n, d),
                      preferred_element_type=accumulation_dtype(y.dtype))


def _scores(qi, kj, bias, row0, col0, n_k, cfg, heads, masked=True):
    """Scaled scores of the tile at (row0, col0), float32, -inf where masked (keys from n_k
    on, and above the diagonal when causal); plus the dropout mask."""
    n_rows, n_cols = qi.shape[-2], kj.shape[-2]
    s = _rows_times_t(qi, kj) * cfg.scale
    if bias is not None:
        s = s + _bias_tile(bias, row0, n_rows, col0, n_cols)
    rows = row0 + lax.broadcasted_iota(jnp.int32, (n_rows, 1), 0)
    cols = col0 + lax.broadcasted_iota(jnp.int32, (1, n_cols), 1)
    if masked:
        valid = cols < n_k
        if cfg.causal:
            valid = valid & (cols <= rows)
        s = jnp.where(valid, s, -jnp.inf)
    keep = None
    if cfg.dropout_p > 0.0:
        keep = keep_mask(heads[..., None, None], rows, cols, cfg.dropout_p)
    return s, keep


def _head_seeds(seeds, shape):
    b, hk, g = shape[:3]
    heads = lax.broadcasted_iota(jnp.int32, (b, hk, g), 0) * (hk * g) + lax.broadcasted_iota(
        jnp.int32, (b, hk, g), 1) * g + lax.broadcasted_iota(jnp.int32, (b, hk, g), 2)
    return stream_seed(seeds, heads)


def _prepare(q, k, v, bias, bq, bk):
    """Block-major copies (block index first: each tile a contiguous slice)."""
    t = _Tiling(q.shape[3], k.shape[2], bq, bk)
    if bias is not None:
        lp, sp = t.q_blocks * bq, t.k_blocks * bk
        if bias.shape[-2] > 1 and lp > t.n_q:
            bias = jnp.pad(bias, [(0, 0)] * 3 + [(0, lp - t.n_q), (0, 0)])
        if bias.shape[-1] > 1 and sp > t.n_k:
            bias = jnp.pad(bias, [(0, 0)] * 4 + [(0, sp - t.n_k)])
    return t, _to_blocks(q, 3, bq), _to_blocks(k, 2, bk), _to_blocks(v, 2, bk), bias


# ---- head chunks ------------------------------------------------------------------------------


def _chunk_size(n_heads, group):
    """Key/value heads per chunk: the largest divisor of n_heads that keeps at most
    HEADS_PER_CHUNK query heads in a chunk (at least one key/value head)."""
    target = max(1, HEADS_PER_CHUNK // group)
    return max(d for d in range(1, min(target, n_heads) + 1) if n_heads % d == 0)


def _over_head_chunks(fn, arrays, bias, heads):
    """fn(*arrays, bias, heads) one chunk of key/value heads at a time (`lax.map`).

    `arrays` have leading axes (B, Hk); a chunk of c heads is passed as (c, 1, ...), so
    fn sees c batches of one key/value head. The bias is split with them where it has
    per-batch or per-head values and passed whole (it broadcasts) where it has neither;
    `heads` (B, Hk, G) holds each query head's dropout seed. Outputs have leading
    axes (B, Hk) again."""
    b, hk = arrays[0].shape[:2]
    c = _chunk_size(b * hk, arrays[0].shape[2])
    n = b * hk // c
    if n == 1:
        return fn(*arrays, bias, heads)

    # the loop sees each chunk flat, and the per-chunk shapes are restored inside it: with
    # size-1 axes (a chunk's head axis, G = 1) in the loop's arrays, XLA's layout assignment
    # turned their reshapes into copies of q, k, v and dO
    def split(x):
        return x.reshape(n, c, -1)

    def unsplit(x, like):
        return None if x is None else x.reshape(c, 1, *like.shape[2:])

    split_bias = bias is not None and bias.shape[0] * bias.shape[1] > 1
    if split_bias:
        bias = jnp.broadcast_to(bias, (b, hk, *bias.shape[2:]))
    xs = ([split(x) for x in arrays], split(bias) if split_bias else None,
          None if heads is None else split(heads))
    trailing = []  # each output's axes after (c, 1), seen when lax.map traces `chunk`

    def chunk(x):
        chunk_arrays, chunk_bias, chunk_heads = x
        out = fn(*map(unsplit, chunk_arrays, arrays),
                 unsplit(chunk_bias, bias) if split_bias else bias, unsplit(chunk_heads, heads))
        trailing[:] = [y.shape[2:] for y in out]
        return tuple(y.reshape(c, -1) for y in out)

    flat = lax.map(chunk, xs)
    return tuple(y.reshape(b, hk, *shape) for y, shape in zip(flat, trailing))


# ---- forward ----------------------------------------------------------------------------------


def _initial(lead, bq, ev, dtype):
    """The online normalizer (m, l) and output accumulator before any key."""
    return (jnp.full((*lead, bq, 1), -jnp.inf, dtype), jnp.zeros((*lead, bq, 1), dtype),
            jnp.zeros((*lead, bq, ev), dtype))


def _fold(carry, s, keep, vj):
    """Fold one block of scores (and its values) into (m, l, acc)."""
    m, l, acc = carry
    m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
    shift = _online.safe_shift(m_new)
    p = jnp.exp(s - shift)
    correction = jnp.exp(m - shift)
    l = l * correction + jnp.sum(p, axis=-1, keepdims=True)
    if keep is not None:
        p = jnp.where(keep, p, 0.0)
    return m_new, l, acc * correction + _rows_times(p.astype(vj.dtype), vj)


def _finish(carry, cfg, dtype):
    """(output, log-sum-exp) of a query block; a query that saw no key gets 0 and +inf."""
    m, l, acc = carry
    dead = l == 0.0
    inv = jnp.where(dead, 0.0, 1.0 / jnp.where(dead, 1.0, l)) / (1.0 - cfg.dropout_p)
    return (acc * inv).astype(dtype), jnp.where(dead, jnp.inf, m + jnp.log(l))[..., 0]


def _forward_tiles(q, k, v, bias, heads, cfg, bq, bk):
    dtype, acc_dtype = q.dtype, accumulation_dtype(q.dtype)
    t, q, k, v, bias = _prepare(q, k, v, bias, bq, bk)
    lead, ev = q.shape[1:4], v.shape[-1]

    def query_block(i, qi):
        def key_block(masked, j, carry):
            s, keep = _scores(qi, k[j], bias, i * bq, j * bk, t.n_k, cfg, heads, masked)
            return _fold(carry, s, keep, v[j])

        carry = _initial(lead, bq, ev, acc_dtype)
        unmasked, seen = t.key_ranges(i, cfg.causal)
        carry = lax.fori_loop(0, unmasked, functools.partial(key_block, False), carry)
        carry = lax.fori_loop(unmasked, seen, functools.partial(key_block, True), carry)
        return i + 1, _finish(carry, cfg, dtype)

    _, (o, lse) = lax.scan(query_block, 0, q)
    return _from_blocks(o, 3, t.n_q), _from_blocks(lse, 3, t.n_q)


def forward(q, k, v, bias, seeds, cfg, blocks=None):
    """Output (B, Hk, G, L, Ev) in q's dtype and the float32 log-sum-exp (B, Hk, G, L);
    a query that sees no key gets output 0 and log-sum-exp +inf (zero probabilities in
    the backward)."""
    bq, bk = blocks or blocks_for(q.shape[3], k.shape[2])
    heads = _head_seeds(seeds, q.shape[:3]) if cfg.dropout_p > 0.0 else None
    fn = functools.partial(_forward_tiles, cfg=cfg, bq=bq, bk=bk)
    return _over_head_chunks(fn, (q, k, v), bias, heads)


# ---- backward ---------------------------------------------------------------------------------


def _tile_grads(qi, q_ti, doi, do_ti, lse_i, delta_i, kj, vj, bias, row0, col0, n_k, cfg,
                heads, masked):
    """One tile's contributions to dq (rows), dk^T and dv^T (columns)."""
    s, keep = _scores(qi, kj, bias, row0, col0, n_k, cfg, heads, masked)
    p = jnp.exp(s - lse_i[..., None])
    dp = _rows_times_t(doi, vj)
    p_used = p
    if keep is not None:
        rescale = 1.0 / (1.0 - cfg.dropout_p)
        p_used = jnp.where(keep, p * rescale, 0.0)
        dp = jnp.where(keep, dp * rescale, 0.0)
    dv_t = _columns_times(do_ti, p_used.astype(doi.dtype))
    ds = (p * (dp - delta_i[..., None]) * cfg.scale).astype(qi.dtype)
    return _rows_times(ds, kj), _columns_times(q_ti, ds), dv_t


def _backward_tiles(q, k, v, o, lse, do, bias, heads, cfg, bq, bk):
    dtypes, acc_dtype = (q.dtype, k.dtype, v.dtype), accumulation_dtype(q.dtype)
    delta = jnp.sum(do.astype(acc_dtype) * o.astype(acc_dtype), axis=-1)  # rowsum(P * dP)
    t, q, k, v, bias = _prepare(q, k, v, bias, bq, bk)
    # padded rows get log-sum-exp +inf: probability 0, no overflow into dk and dv
    do, lse, delta = _to_blocks(do, 3, bq), _to_blocks(lse, 3, bq, jnp.inf), _to_blocks(
        delta, 3, bq)
    # per query block; q and dO also transposed: dk^T and dv^T accumulate as q^T ds, dO^T p
    rows = (q, _columns(q), do, _columns(do), lse, delta)

    def key_block(carry, kv):
        j, dq = carry
        kj, vj = kv

        def query_block(masked, i, carry):
            dq, dk_t, dv_t = carry
            dqi, dki, dvi = _tile_grads(*(x[i] for x in rows), kj, vj, bias, i * bq, j * bk,
                                        t.n_k, cfg, heads, masked)
            return dq.at[i].set(dq[i] + dqi), dk_t + dki, dv_t + dvi

        carry = (dq, jnp.zeros(jnp.swapaxes(kj, -1, -2).shape, acc_dtype),
                 jnp.zeros(jnp.swapaxes(vj, -1, -2).shape, acc_dtype))
        first, unmasked = t.query_ranges(j, cfg.causal)
        carry = lax.fori_loop(first, unmasked, functools.partial(query_block, True), carry)
        dq, dk_t, dv_t = lax.fori_loop(unmasked, t.q_blocks,
                                       functools.partial(query_block, False), carry)
        return (j + 1, dq), (jnp.swapaxes(dk_t, -1, -2).astype(dtypes[1]),
                             jnp.swapaxes(dv_t, -1, -2).astype(dtypes[2]))

    (_, dq), (dk, dv) = lax.scan(key_block, (0, jnp.zeros(rows[0].shape, acc_dtype)), (k, v))
    return (_from_blocks(dq, 3, t.n_q).astype(dtypes[0]), _from_blocks(dk, 2, t.n_k),
            _from_blocks(dv, 2, t.n_k))


def backward(q, k, v, bias, seeds, o, lse, do, cfg, blocks=None):
    """Gradients (dq, dk, dv) in the inputs' dtypes, from the output and log-sum-exp."""
    bq, bk = blocks or blocks_for(q.shape[3], k.shape[2])
    heads = _head_seeds(seeds, q.shape[:3]) if cfg.dropout_p > 0.0 else None
    fn = functools.partial(_backward_tiles, cfg=cfg, bq=bq, bk=bk)
    return _over_head_chunks(fn, (q, k, v, o, lse, do), bias, heads)


def _dense_probabilities(q, k, bias, seeds, cfg):
    """The softmax p of the whole score matrix (B*Hk, G*L, S), in the accumulation dtype,
    p after dropout, and the rows that see no key (B*Hk, G*L, 1)."""
    b, hk, g, n_q, _ = q.shape
    n_k = k.shape[2]
    s = _score_product(q, k, cfg.scale)
    if bias is not None:
        s = s + _bias_rows(bias, q.shape, n_k)
    rows = lax.broadcasted_iota(jnp.int32, (g, n_q, 1), 1).reshape(g * n_q, 1)
    cols = lax.broadcasted_iota(jnp.int32, (1, n_k), 1)
    if cfg.causal:
        s = jnp.where(cols <= rows, s, -jnp.inf)
    # a query that sees no key: softmax of zeros (no NaN in the backward), output 0
    dead = jnp.max(s, axis=-1, keepdims=True) == -jnp.inf
    p = jax.nn.softmax(jnp.where(dead, 0.0, s), axis=-1)
    kept = p
    if cfg.dropout_p > 0.0:
        heads = _head_seeds(seeds, q.shape[:3])  # (B, Hk, G): one seed per query head
        seed_rows = jnp.repeat(heads, n_q, axis=2).reshape(b * hk, g * n_q, 1)
        kept = jnp.where(keep_mask(seed_rows, rows, cols, cfg.dropout_p),
                         p / (1.0 - cfg.dropout_p), 0.0)
    return p, kept, dead


# The dense path works on 3-d arrays, (B*Hk, G*L, ...): the G query heads of a key/value
# head folded into the rows (5-d products with their reshapes ran 1.5x slower on CPU), and
# no axis of extent 1 (nn.MultiheadAttention passes (B*H, L, E), so B is 1). A YNNPACK
# reduction over arrays with a leading axis of extent 1 ran 7x slower than over the same
# data without it (2026-12-01, (1, 32, 64, 32): 0.26 ms against 0.035 ms).

def _heads_in(x):
    return x.reshape(x.shape[0] * x.shape[1], -1, x.shape[-1])


def _score_product(q, k, scale):
    """q k^T scale, (B*Hk, G*L, S) in the accumulation dtype."""
    return jnp.einsum("nqc,nkc->nqk", _heads_in(q), _heads_in(k),
                      preferred_element_type=accumulation_dtype(q.dtype)) * scale


def _bias_rows(bias, q_shape, n_k):
    b, hk, g, n_q, _ = q_shape
    return jnp.broadcast_to(bias, (b, hk, g, n_q, n_k)).reshape(b * hk, g * n_q, n_k)


def _times_values(weights, v):
    return jnp.einsum("nqk,nkd->nqd", weights.astype(v.dtype), _heads_in(v),
                      preferred_element_type=accumulation_dtype(v.dtype))


def _heads_out(x, q):
    b, hk, g, n_q, _ = q.shape
    return x.reshape(b, hk, g, n_q, -1).astype(q.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def dense(q, k, v, bias, seeds, cfg):
    """The same attention with the whole (L, S) score matrix: the CPU path for small
    problems (`_attention.DENSE_SCORES`) and the backward of a differentiated additive
    mask. Its tangent is written out (`_dense_jvp`) so that the backward JAX derives
    from it is FlashAttention's."""
    _, kept, dead = _dense_probabilities(q, k, bias, seeds, cfg)
    return _heads_out(jnp.where(dead, 0.0, _times_values(kept, v)), q)


def _is_zero(tangent):
    return tangent is None or isinstance(tangent, jax.custom_derivatives.SymbolicZero)


@functools.partial(dense.defjvp, symbolic_zeros=True)
def _dense_jvp(cfg, primals, tangents):
    """With ds the scores' tangent and r = rowsum(p * ds), the output's tangent is
    (p_kept * ds) v - r * out + p_kept dv. Its transpose then takes the backward's row
    sum as rowsum(dout * out) over the value width, FlashAttention's delta, instead of
    rowsum(p * dp) over the keys that autodiff of the softmax takes: that sum, fused with
    its broadcasts into one YNNPACK reduction, took 6% of a small GPT's training step
    (2026-12-01, one core)."""
    q, k, v, bias, seeds = primals
    dq, dk, dv, dbias, _ = tangents
    p, kept, dead = _dense_probabilities(q, k, bias, seeds, cfg)
    out = jnp.where(dead, 0.0, _times_values(kept, v))
    scores = []  # the scores' tangent, term by term (symbolic zeros left out)
    if not _is_zero(dq):
        scores.append(_score_product(dq, k, cfg.scale))
    if not _is_zero(dk):
        scores.append(_score_product(q, dk, cfg.scale))
    if not _is_zero(dbias):
        scores.append(_bias_rows(dbias, q.shape, k.shape[2]))
    d_out = jnp.zeros_like(out)
    if scores:
        ds = functools.reduce(jnp.add, scores)
        r = jnp.sum(p * ds, axis=-1, keepdims=True)
        d_out = _times_values(kept * ds, v) - r * out
    if not _is_zero(dv):
        d_out = d_out + _times_values(kept, dv)
    return _heads_out(out, q), _heads_out(jnp.where(dead, 0.0, d_out), q)
