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

import jax.numpy as jnp
from jax import lax

from jaxdl.ops import _online

F32 = jnp.float32
SINGLE_TILE = 512 * 512  # problems with at most this many scores per head take one tile
BLOCK = 256  # otherwise: (BLOCK, BLOCK) tiles


@dataclasses.dataclass(frozen=True)
class Config:
    """Static settings of one attention call (hashable: part of the jit cache key)."""

    causal: bool
    scale: float
    dropout_p: float


# ---- dropout: counter-based, so the backward regenerates the forward's mask ------------------


def _fmix32(x):
    """MurmurHash3's 32-bit finaliser: a bijection on uint32 that mixes every bit."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def head_seed(seeds, head):
    """One uint32 per query head (flat index b * H + h) from the two seeds of the key."""
    return _fmix32(seeds[0] + head.astype(jnp.uint32) * jnp.uint32(0x9E3779B9)) ^ seeds[1]


def keep_mask(hseed, rows, cols, p):
    """Which (row, col) weights dropout keeps: P(keep) = 1 - p, a pure function of the
    indices, so forward and backward (and the XLA and Pallas paths) draw the same mask.
    `hseed` broadcasts against rows (per-row part mixed once) and cols."""
    row_part = _fmix32(hseed ^ (rows.astype(jnp.uint32) * jnp.uint32(0x27D4EB2F)))
    bits = _fmix32(row_part + cols.astype(jnp.uint32))
    return bits >= jnp.uint32(min(int(round(p * 2.0**32)), 2**32 - 1))


# ---- tiles ------------------------------------------------------------------------------------


def blocks_for(n_q, n_k):
    if n_q * n_k <= SINGLE_TILE:
        return n_q, n_k
    return min(BLOCK, n_q), min(BLOCK, n_k)


def _pad(x, axis, size, value=0.0):
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


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

    def key_blocks_seen(self, i, causal):
        """Key blocks query block i needs: all, or (causal, top-left) up to its last row."""
        if not causal:
            return self.k_blocks
        return jnp.minimum(self.k_blocks, _cdiv((i + 1) * self.bq, self.bk))

    def first_query_block(self, j, causal):
        """The first query block that sees key block j."""
        return (j * self.bk) // self.bq if causal else 0


def _rows(x, i, size, axis):
    return lax.dynamic_slice_in_dim(x, i * size, size, axis)


def _bias_tile(bias, t, i, j):
    """The (.., bq, bk) slice of a bias whose L and S axes may be broadcast (length 1)."""
    if bias is None:
        return None
    if bias.shape[-2] > 1:
        bias = _rows(bias, i, t.bq, -2)
    if bias.shape[-1] > 1:
        bias = _rows(bias, j, t.bk, -1)
    return bias


def _scores(qi, kj, bias_tile, i, j, t, cfg, heads):
    """Scaled scores of one tile, float32, -inf where masked; plus the dropout mask."""
    s = jnp.einsum("bhgqe,bhke->bhgqk", qi, kj, preferred_element_type=F32) * cfg.scale
    if bias_tile is not None:
        s = s + bias_tile
    rows = i * t.bq + lax.broadcasted_iota(jnp.int32, (t.bq, 1), 0)
    cols = j * t.bk + lax.broadcasted_iota(jnp.int32, (1, t.bk), 1)
    valid = cols < t.n_k
    if cfg.causal:
        valid = valid & (cols <= rows)
    if t.n_k % t.bk or cfg.causal:
        s = jnp.where(valid, s, -jnp.inf)
    keep = None
    if cfg.dropout_p > 0.0:
        keep = keep_mask(heads[..., None, None], rows, cols, cfg.dropout_p)
    return s, keep


def _head_seeds(seeds, shape):
    b, hk, g = shape[:3]
    heads = lax.broadcasted_iota(jnp.int32, (b, hk, g), 0) * (hk * g) + lax.broadcasted_iota(
        jnp.int32, (b, hk, g), 1) * g + lax.broadcasted_iota(jnp.int32, (b, hk, g), 2)
    return head_seed(seeds, heads)


def _prepare(q, k, v, bias, bq, bk):
    t = _Tiling(q.shape[3], k.shape[2], bq, bk)
    lp, sp = t.q_blocks * bq, t.k_blocks * bk
    q, k, v = _pad(q, 3, lp), _pad(k, 2, sp), _pad(v, 2, sp)
    if bias is not None:
        bias = bias if bias.shape[-2] == 1 else _pad(bias, 3, lp)
        bias = bias if bias.shape[-1] == 1 else _pad(bias, 4, sp)
    return t, q, k, v, bias


# ---- forward ----------------------------------------------------------------------------------


def forward(q, k, v, bias, seeds, cfg, blocks=None):
    """Output (B, Hk, G, L, Ev) in q's dtype and the float32 log-sum-exp (B, Hk, G, L);
    a query that sees no key gets output 0 and log-sum-exp +inf (zero probabilities in
    the backward)."""
    bq, bk = blocks or blocks_for(q.shape[3], k.shape[2])
    t, q, k, v, bias = _prepare(q, k, v, bias, bq, bk)
    lead = q.shape[:3]
    ev = v.shape[-1]
    heads = _head_seeds(seeds, lead) if cfg.dropout_p > 0.0 else None

    def query_block(i, out):
        o_buf, lse_buf = out
        qi = _rows(q, i, bq, 3)

        def key_block(j, carry):
            m, l, acc = carry
            s, keep = _scores(qi, _rows(k, j, bk, 2), _bias_tile(bias, t, i, j), i, j, t, cfg,
                              heads)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
            shift = _online.safe_shift(m_new)
            p = jnp.exp(s - shift)
            correction = jnp.exp(m - shift)
            l = l * correction + jnp.sum(p, axis=-1, keepdims=True)
            if keep is not None:
                p = jnp.where(keep, p, 0.0)
            pv = jnp.einsum("bhgqk,bhke->bhgqe", p.astype(v.dtype), _rows(v, j, bk, 2),
                            preferred_element_type=F32)
            return m_new, l, acc * correction + pv

        init = (jnp.full((*lead, bq, 1), -jnp.inf, F32), jnp.zeros((*lead, bq, 1), F32),
                jnp.zeros((*lead, bq, ev), F32))
        m, l, acc = lax.fori_loop(0, t.key_blocks_seen(i, cfg.causal), key_block, init)
        dead = l == 0.0
        inv = jnp.where(dead, 0.0, 1.0 / jnp.where(dead, 1.0, l))
        if cfg.dropout_p > 0.0:
            inv = inv / (1.0 - cfg.dropout_p)
        lse = jnp.where(dead, jnp.inf, m + jnp.log(l))[..., 0]
        o_buf = lax.dynamic_update_slice_in_dim(o_buf, (acc * inv).astype(o_buf.dtype), i * bq, 3)
        return o_buf, lax.dynamic_update_slice_in_dim(lse_buf, lse, i * bq, 3)

    out = (jnp.zeros((*lead, q.shape[3], ev), q.dtype), jnp.zeros((*lead, q.shape[3]), F32))
    o, lse = lax.fori_loop(0, t.q_blocks, query_block, out)
    return o[..., :t.n_q, :], lse[..., :t.n_q]


# ---- backward ---------------------------------------------------------------------------------


def backward(q, k, v, bias, seeds, o, lse, do, cfg, blocks=None):
    """Gradients (dq, dk, dv) in the inputs' dtypes, from the output and log-sum-exp."""
    bq, bk = blocks or blocks_for(q.shape[3], k.shape[2])
    n_q = q.shape[3]
    delta = jnp.sum(do.astype(F32) * o.astype(F32), axis=-1)  # rowsum(dO * O) = rowsum(P * dP)
    t, q, k, v, bias = _prepare(q, k, v, bias, bq, bk)
    lp = q.shape[3]
    # padded rows get log-sum-exp +inf: probability 0, no overflow into dk and dv
    do, lse, delta = _pad(do, 3, lp), _pad(lse, 3, lp, jnp.inf), _pad(delta, 3, lp)
    lead = q.shape[:3]
    heads = _head_seeds(seeds, lead) if cfg.dropout_p > 0.0 else None
    rescale = 1.0 / (1.0 - cfg.dropout_p)

    def key_block(j, out):
        dq_buf, dk_buf, dv_buf = out
        kj, vj = _rows(k, j, bk, 2), _rows(v, j, bk, 2)

        def query_block(i, carry):
            dq_buf, dk, dv = carry
            qi, doi = _rows(q, i, bq, 3), _rows(do, i, bq, 3)
            s, keep = _scores(qi, kj, _bias_tile(bias, t, i, j), i, j, t, cfg, heads)
            p = jnp.exp(s - _rows(lse, i, bq, 3)[..., None])
            dp = jnp.einsum("bhgqe,bhke->bhgqk", doi, vj, preferred_element_type=F32)
            p_used = p
            if keep is not None:
                p_used = jnp.where(keep, p * rescale, 0.0)
                dp = jnp.where(keep, dp * rescale, 0.0)
            dv = dv + jnp.einsum("bhgqk,bhgqe->bhke", p_used.astype(do.dtype), doi,
                                 preferred_element_type=F32)
            ds = (p * (dp - _rows(delta, i, bq, 3)[..., None]) * cfg.scale).astype(q.dtype)
            dk = dk + jnp.einsum("bhgqk,bhgqe->bhke", ds, qi, preferred_element_type=F32)
            dqi = _rows(dq_buf, i, bq, 3) + jnp.einsum("bhgqk,bhke->bhgqe", ds, kj,
                                                        preferred_element_type=F32)
            return lax.dynamic_update_slice_in_dim(dq_buf, dqi, i * bq, 3), dk, dv

        zeros_k = jnp.zeros((*lead[:2], bk, k.shape[-1]), F32)
        zeros_v = jnp.zeros((*lead[:2], bk, v.shape[-1]), F32)
        dq_buf, dk, dv = lax.fori_loop(t.first_query_block(j, cfg.causal), t.q_blocks,
                                       query_block, (dq_buf, zeros_k, zeros_v))
        dk_buf = lax.dynamic_update_slice_in_dim(dk_buf, dk.astype(k.dtype), j * bk, 2)
        return dq_buf, dk_buf, lax.dynamic_update_slice_in_dim(dv_buf, dv.astype(v.dtype),
                                                               j * bk, 2)

    out = (jnp.zeros(q.shape, F32), jnp.zeros(k.shape, k.dtype), jnp.zeros(v.shape, v.dtype))
    dq, dk, dv = lax.fori_loop(0, t.k_blocks, key_block, out)
    return dq[..., :n_q, :].astype(q.dtype), dk[:, :, :t.n_k], dv[:, :, :t.n_k]


def dense(q, k, v, bias, seeds, cfg):
    """The same attention with the whole (L, S) score matrix, differentiable by jax.vjp:
    the backward of a differentiated additive mask."""
    t = _Tiling(q.shape[3], k.shape[2], q.shape[3], k.shape[2])
    heads = _head_seeds(seeds, q.shape[:3]) if cfg.dropout_p > 0.0 else None
    s, keep = _scores(q, k, bias, 0, 0, t, cfg, heads)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - _online.safe_shift(m))
    l = jnp.sum(p, axis=-1, keepdims=True)
    p = p / jnp.where(l == 0.0, 1.0, l)
    if keep is not None:
        p = jnp.where(keep, p / (1.0 - cfg.dropout_p), 0.0)
    return jnp.einsum("bhgqk,bhke->bhgqe", p.astype(v.dtype), v,
                      preferred_element_type=F32).astype(q.dtype)
