"""Flash attention in XLA (the CPU path): loops over (query block, key block) tiles.

Arrays arrive normalised by `_attention`: q (B, Hk, G, L, E) with G query heads per
key/value head, k (B, Hk, S, E), v (B, Hk, S, Ev), bias None or float32
(Bm, Hkm, Gm, Lm, Sm) with each axis 1 or full. Only one (B, Hk, G, bq, bk) score tile
exists at a time: the forward folds key tiles into the online normalizer (m, l) and an
output accumulator; the backward recomputes each tile's probabilities from q, k and the
saved per-row log-sum-exp (FlashAttention-2's backward: key blocks outside, query
blocks inside, dq accumulated in a float32 buffer). Causal tiles wholly above the
diagonal are skipped (the loops' trip counts depend on the block index).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxdl._counter_random import keep_mask, stream_seed
from jaxdl._dtypes import accumulation_dtype
from jaxdl.ops import _online

BLOCK = 128  # (BLOCK, BLOCK) tiles: measured faster than 64, 256 and mixed shapes on CPU


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


def _bias_tile(bias, t, i, j):
    """The (.., bq, bk) slice of a bias whose L and S axes may be broadcast (length 1)."""
    if bias is None:
        return None
    if bias.shape[-2] > 1:
        bias = lax.dynamic_slice_in_dim(bias, i * t.bq, t.bq, 3)
    if bias.shape[-1] > 1:
        bias = lax.dynamic_slice_in_dim(bias, j * t.bk, t.bk, 4)
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


def _scores(qi, kj, bias_tile, i, j, t, cfg, heads, masked=True):
    """Scaled scores of one tile, float32, -inf where masked; plus the dropout mask."""
    s = _rows_times_t(qi, kj) * cfg.scale
    if bias_tile is not None:
        s = s + bias_tile
    rows = i * t.bq + lax.broadcasted_iota(jnp.int32, (t.bq, 1), 0)
    cols = j * t.bk + lax.broadcasted_iota(jnp.int32, (1, t.bk), 1)
    if masked:
        valid = cols < t.n_k
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


# ---- forward ----------------------------------------------------------------------------------


def forward(q, k, v, bias, seeds, cfg, blocks=None):
    """Output (B, Hk, G, L, Ev) in q's dtype and the float32 log-sum-exp (B, Hk, G, L);
    a query that sees no key gets output 0 and log-sum-exp +inf (zero probabilities in
    the backward)."""
    bq, bk = blocks or blocks_for(q.shape[3], k.shape[2])
    dtype = q.dtype
    t, q, k, v, bias = _prepare(q, k, v, bias, bq, bk)
    lead = q.shape[1:4]
    ev = v.shape[-1]
    heads = _head_seeds(seeds, lead) if cfg.dropout_p > 0.0 else None

    def query_block(i, qi):
        def key_block(masked, j, carry):
            m, l, acc = carry
            s, keep = _scores(qi, k[j], _bias_tile(bias, t, i, j), i, j, t, cfg, heads, masked)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
            shift = _online.safe_shift(m_new)
            p = jnp.exp(s - shift)
            correction = jnp.exp(m - shift)
            l = l * correction + jnp.sum(p, axis=-1, keepdims=True)
            if keep is not None:
                p = jnp.where(keep, p, 0.0)
            return m_new, l, acc * correction + _rows_times(p.astype(v.dtype), v[j])

        acc_dtype = accumulation_dtype(dtype)
        carry = (jnp.full((*lead, bq, 1), -jnp.inf, acc_dtype),
                 jnp.zeros((*lead, bq, 1), acc_dtype), jnp.zeros((*lead, bq, ev), acc_dtype))
        unmasked, seen = t.key_ranges(i, cfg.causal)
        carry = lax.fori_loop(0, unmasked, functools.partial(key_block, False), carry)
        m, l, acc = lax.fori_loop(unmasked, seen, functools.partial(key_block, True), carry)
        dead = l == 0.0
        inv = jnp.where(dead, 0.0, 1.0 / jnp.where(dead, 1.0, l)) / (1.0 - cfg.dropout_p)
        lse = jnp.where(dead, jnp.inf, m + jnp.log(l))[..., 0]
        return i + 1, ((acc * inv).astype(dtype), lse)

    _, (o, lse) = lax.scan(query_block, 0, q)
    return _from_blocks(o, 3, t.n_q), _from_blocks(lse, 3, t.n_q)


# ---- backward ---------------------------------------------------------------------------------


def backward(q, k, v, bias, seeds, o, lse, do, cfg, blocks=None):
    """Gradients (dq, dk, dv) in the inputs' dtypes, from the output and log-sum-exp."""
    bq, bk = blocks or blocks_for(q.shape[3], k.shape[2])
    dtypes = (q.dtype, k.dtype, v.dtype)
    acc_dtype = accumulation_dtype(q.dtype)
    delta = jnp.sum(do.astype(acc_dtype) * o.astype(acc_dtype), axis=-1)  # rowsum(dO * O) = rowsum(P * dP)
    t, q, k, v, bias = _prepare(q, k, v, bias, bq, bk)
    # padded rows get log-sum-exp +inf: probability 0, no overflow into dk and dv
    do, lse, delta = _to_blocks(do, 3, bq), _to_blocks(lse, 3, bq, jnp.inf), _to_blocks(
        delta, 3, bq)
    lead = q.shape[1:4]
    heads = _head_seeds(seeds, lead) if cfg.dropout_p > 0.0 else None
    rescale = 1.0 / (1.0 - cfg.dropout_p)
    q_t, do_t = _columns(q), _columns(do)  # dk^T and dv^T accumulate as q^T ds and do^T p

    def key_block(carry, kv):
        j, dq = carry
        kj, vj = kv

        def query_block(masked, i, carry):
            dq, dk_t, dv_t = carry
            qi, doi = q[i], do[i]
            s, keep = _scores(qi, kj, _bias_tile(bias, t, i, j), i, j, t, cfg, heads, masked)
            p = jnp.exp(s - lse[i][..., None])
            dp = _rows_times_t(doi, vj)
            p_used = p
            if keep is not None:
                p_used = jnp.where(keep, p * rescale, 0.0)
                dp = jnp.where(keep, dp * rescale, 0.0)
            dv_t = dv_t + _columns_times(do_t[i], p_used.astype(doi.dtype))
            ds = (p * (dp - delta[i][..., None]) * cfg.scale).astype(qi.dtype)
            dk_t = dk_t + _columns_times(q_t[i], ds)
            dqi = dq[i] + _rows_times(ds, kj)
            return dq.at[i].set(dqi), dk_t, dv_t

        carry = (dq, jnp.zeros(jnp.swapaxes(kj, -1, -2).shape, acc_dtype),
                 jnp.zeros(jnp.swapaxes(vj, -1, -2).shape, acc_dtype))
        first, unmasked = t.query_ranges(j, cfg.causal)
        carry = lax.fori_loop(first, unmasked, functools.partial(query_block, True), carry)
        dq, dk_t, dv_t = lax.fori_loop(unmasked, t.q_blocks,
                                       functools.partial(query_block, False), carry)
        return (j + 1, dq), (jnp.swapaxes(dk_t, -1, -2).astype(dtypes[1]),
                             jnp.swapaxes(dv_t, -1, -2).astype(dtypes[2]))

    (_, dq), (dk, dv) = lax.scan(key_block, (0, jnp.zeros(q.shape, acc_dtype)), (k, v))
    return (_from_blocks(dq, 3, t.n_q).astype(dtypes[0]), _from_blocks(dk, 2, t.n_k),
            _from_blocks(dv, 2, t.n_k))


def dense(q, k, v, bias, seeds, cfg):
    """The same attention with the whole (L, S) score matrix, differentiated by JAX: the
    CPU path for small problems (`_attention.DENSE_SCORES`) and the backward of a
    differentiated additive mask.

    The G query heads of a key/value head are folded into the rows, so every product
    is a 4-d one (5-d products with their reshapes ran 1.5x slower on CPU)."""
    b, hk, g, n_q, e = q.shape
    n_k = k.shape[2]
    acc = accumulation_dtype(q.dtype)
    s = jnp.einsum("bhqc,bhkc->bhqk", q.reshape(b, hk, g * n_q, e), k,
                   preferred_element_type=acc) * cfg.scale
    if bias is not None:
        s = s + jnp.broadcast_to(bias, (*bias.shape[:2], g, n_q, n_k)).reshape(
            *bias.shape[:2], g * n_q, n_k)
    rows = lax.broadcasted_iota(jnp.int32, (g, n_q, 1), 1).reshape(g * n_q, 1)
    cols = lax.broadcasted_iota(jnp.int32, (1, n_k), 1)
    if cfg.causal:
        s = jnp.where(cols <= rows, s, -jnp.inf)
    # a query that sees no key: softmax of zeros (no NaN in the backward), output 0
    dead = lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)) == -jnp.inf
    p = jax.nn.softmax(jnp.where(dead, 0.0, s), axis=-1)
    if cfg.dropout_p > 0.0:
        heads = _head_seeds(seeds, q.shape[:3])  # (B, Hk, G): one seed per query head
        seed_rows = jnp.repeat(heads, n_q, axis=2)[..., None]
        p = jnp.where(keep_mask(seed_rows, rows, cols, cfg.dropout_p),
                      p / (1.0 - cfg.dropout_p), 0.0)
    out = jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=acc)
    out = jnp.where(dead, 0.0, out)
    return out.reshape(b, hk, g, n_q, -1).astype(q.dtype)
