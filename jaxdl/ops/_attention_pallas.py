"""Flash attention as Pallas (Triton) kernels: one forward, two backward kernels.

Arrays arrive in `_attention`'s layout (q (B, Hk, G, L, E), k and v (B, Hk, S, E)) and
are flattened to rows: q (B*Hk*G*L, E), k (B*Hk*S, E). As in `_pallas_core`, every ref
is a whole array indexed with `pl.ds` and masked loads, so tiles past L, S or E read
fills (interpret mode would read NaN) and all tile shapes are powers of two (E is
padded to one, >= 16 for Triton's dot).

- forward: grid (query heads, query blocks); each program folds key blocks into the
  online normalizer and writes its output rows and their float32 log-sum-exp.
- backward (FlashAttention-2, no atomics): `dkdv` has grid (key/value heads, key
  blocks) and loops over the G query heads of its group and their query blocks; `dq`
  has the forward's grid and loops over key blocks. Both recompute the probabilities
  from the saved log-sum-exp.
Causal programs skip the key (or query) blocks wholly on the far side of the diagonal.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxdl._counter_random import keep_mask, stream_seed
from jaxdl._jax_compat import pallas as pl
from jaxdl._jax_compat import pallas_triton as plgpu
from jaxdl.ops import _online

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class AttentionBlocks:
    """Tile shape (query rows, key rows) and Triton launch settings."""

    q: int
    k: int
    num_warps: int = 4
    num_stages: int = 2


def _pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def choose_blocks(n_q, n_k, head_dim):
    """GPU heuristic (untuned: no GPU measured yet): FlashAttention-2's usual tiles."""
    bq = min(128 if head_dim <= 64 else 64, max(16, _pow2(n_q)))
    bk = min(64, max(16, _pow2(n_k)))
    return AttentionBlocks(bq, bk, num_warps=4 if head_dim <= 64 else 8)


@dataclasses.dataclass(frozen=True)
class _Dims:
    n_q: int
    n_k: int
    e: int
    ev: int
    kv_heads: int
    groups: int
    bias_shape: tuple | None  # (Bm, Hkm, Gm, Lm, Sm)

    @property
    def ep(self):
        return max(16, _pow2(self.e))

    @property
    def evp(self):
        return max(16, _pow2(self.ev))


def _cdiv(a, b):
    return lax.div(a + b - 1, b)


def _iota(shape, axis):
    return lax.broadcasted_iota(jnp.int32, shape, axis)


def _load(ref, r0, n_rows, rows_valid, width, n_cols):
    """A (n_rows, width) tile at row r0; rows_valid (n_rows, 1), columns past n_cols read 0."""
    mask = rows_valid & (_iota((1, width), 1) < n_cols)
    return plgpu.load(ref.at[pl.ds(r0, n_rows), pl.ds(0, width)], mask=mask, other=0.0)


def _store(ref, r0, value, rows_valid, n_cols):
    mask = rows_valid & (_iota((1, value.shape[1]), 1) < n_cols)
    plgpu.store(ref.at[pl.ds(r0, value.shape[0]), pl.ds(0, value.shape[1])],
                value.astype(ref.dtype), mask=mask)


def _load_vec(ref, r0, n, valid, fill):
    return plgpu.load(ref.at[pl.ds(r0, n)], mask=valid, other=fill)


def _head_seed(seed_ref, bh):
    """The head's dropout seed as a (1, 1) uint32 (head seeds are computed in XLA)."""
    return plgpu.load(seed_ref.at[pl.ds(bh, 1)]).reshape(1, 1)


class _Head:
    """Indices of one query head (flat index bh over (B, Hk, G)) and its tiles."""

    def __init__(self, bh, d: _Dims):
        self.bh, self.d = bh, d
        self.b = lax.div(bh, d.kv_heads * d.groups)
        self.hk = lax.rem(lax.div(bh, d.groups), d.kv_heads)
        self.g = lax.rem(bh, d.groups)
        self.kv_row0 = (self.b * d.kv_heads + self.hk) * d.n_k

    def bias_tile(self, bias_ref, rows, cols, q0, k0, bq, bk):
        d = self.d
        bm, hkm, gm, lm, sm = d.bias_shape
        head = ((self.b if bm > 1 else 0) * hkm + (self.hk if hkm > 1 else 0)) * gm + (
            self.g if gm > 1 else 0)
        n_r, n_c = (bq if lm > 1 else 1), (bk if sm > 1 else 1)
        r0 = head * lm + (q0 if lm > 1 else 0)
        mask = ((rows < d.n_q) if lm > 1 else True) & ((cols < d.n_k) if sm > 1 else True)
        mask = jnp.broadcast_to(mask, (n_r, n_c))
        return plgpu.load(bias_ref.at[pl.ds(r0, n_r), pl.ds(k0 if sm > 1 else 0, n_c)],
                          mask=mask, other=0.0)


def _scores(q, k, head, bias_ref, hseed, q0, k0, cfg):
    """Masked, scaled float32 scores of one (bq, bk) tile, and the dropout keep mask."""
    bq, bk = q.shape[0], k.shape[0]
    d = head.d
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=F32) * cfg.scale
    rows = q0 + _iota((bq, 1), 0)
    cols = k0 + _iota((1, bk), 1)
    if bias_ref is not None:
        s = s + head.bias_tile(bias_ref, rows, cols, q0, k0, bq, bk)
    valid = cols < d.n_k
    if cfg.causal:
        valid = valid & (cols <= rows)
    s = jnp.where(valid, s, -jnp.inf)
    keep = keep_mask(hseed, rows, cols, cfg.dropout_p) if cfg.dropout_p > 0.0 else None
    return s, keep


def _key_blocks_seen(q0, bq, bk, d, cfg):
    n = pl.cdiv(d.n_k, bk)
    return jnp.minimum(n, _cdiv(q0 + bq, bk)) if cfg.causal else n


def _unpack(refs, has_bias):
    return (refs[0], refs[1]) if has_bias else (None, refs[0])


# ---- forward ----------------------------------------------------------------------------------


def _fwd_kernel(q_ref, k_ref, v_ref, *refs, d, cfg, bq, bk):
    bias_ref, seed_ref = _unpack(refs, d.bias_shape is not None)
    o_ref, lse_ref = refs[-2:]
    head = _Head(pl.program_id(0), d)
    q0 = pl.program_id(1) * bq
    q_rows = q0 + _iota((bq, 1), 0) < d.n_q
    q = _load(q_ref, head.bh * d.n_q + q0, bq, q_rows, d.ep, d.e)
    hseed = _head_seed(seed_ref, head.bh)

    def body(j, carry):
        m, l, acc = carry
        k0 = j * bk
        k_rows = k0 + _iota((bk, 1), 0) < d.n_k
        k = _load(k_ref, head.kv_row0 + k0, bk, k_rows, d.ep, d.e)
        v = _load(v_ref, head.kv_row0 + k0, bk, k_rows, d.evp, d.ev)
        s, keep = _scores(q, k, head, bias_ref, hseed, q0, k0, cfg)
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        shift = _online.safe_shift(m_new)
        p = jnp.exp(s - shift)
        correction = jnp.exp(m - shift)
        l = l * correction + jnp.sum(p, axis=1, keepdims=True)
        if keep is not None:
            p = jnp.where(keep, p, 0.0)
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=F32)
        return m_new, l, acc * correction + pv

    init = (jnp.full((bq, 1), -jnp.inf, F32), jnp.zeros((bq, 1), F32),
            jnp.zeros((bq, d.evp), F32))
    m, l, acc = lax.fori_loop(0, _key_blocks_seen(q0, bq, bk, d, cfg), body, init)
    dead = l == 0.0
    inv = jnp.where(dead, 0.0, 1.0 / jnp.where(dead, 1.0, l)) / (1.0 - cfg.dropout_p)
    _store(o_ref, head.bh * d.n_q + q0, acc * inv, q_rows, d.ev)
    lse = jnp.where(dead, jnp.inf, m + jnp.log(l))
    plgpu.store(lse_ref.at[pl.ds(head.bh * d.n_q + q0, bq)], lse[:, 0],
                mask=q_rows[:, 0])


def _flatten(q, k, v, bias, seeds):
    b, hk, g, n_q, e = q.shape
    d = _Dims(n_q, k.shape[2], e, v.shape[-1], hk, g, None if bias is None else bias.shape)
    heads = b * hk * g
    flat = [q.reshape(-1, e), k.reshape(-1, e), v.reshape(-1, d.ev)]
    if bias is not None:
        flat.append(bias.reshape(-1, bias.shape[-1]))
    flat.append(stream_seed(seeds, jnp.arange(heads, dtype=jnp.int32)))
    return d, heads, flat


def _params(blocks):
    return plgpu.CompilerParams(num_warps=blocks.num_warps, num_stages=blocks.num_stages)


def forward(q, k, v, bias, seeds, cfg, blocks=None, interpret=False):
    """Output (B, Hk, G, L, Ev) and float32 log-sum-exp (B, Hk, G, L), as `_attention_xla`."""
    blocks = blocks or choose_blocks(q.shape[3], k.shape[2], q.shape[4])
    d, heads, flat = _flatten(q, k, v, bias, seeds)
    kernel = functools.partial(_fwd_kernel, d=d, cfg=cfg, bq=blocks.q, bk=blocks.k)
    o, lse = pl.pallas_call(
        kernel,
        grid=(heads, pl.cdiv(d.n_q, blocks.q)),
        out_shape=(jax.ShapeDtypeStruct((heads * d.n_q, d.ev), q.dtype),
                   jax.ShapeDtypeStruct((heads * d.n_q,), F32)),
        compiler_params=_params(blocks),
        interpret=interpret,
        name="flash_attention_fwd",
    )(*flat)
    return o.reshape(*q.shape[:4], d.ev), lse.reshape(q.shape[:4])


# ---- backward ---------------------------------------------------------------------------------


def _probabilities(q, k, head, bias_ref, hseed, lse, q0, k0, cfg):
    s, keep = _scores(q, k, head, bias_ref, hseed, q0, k0, cfg)
    return jnp.exp(s - lse), keep


def _dropped(p, dp, keep, cfg):
    """Apply dropout's mask and rescaling to the probabilities used and to dP."""
    if keep is None:
        return p, dp
    rescale = 1.0 / (1.0 - cfg.dropout_p)
    return jnp.where(keep, p * rescale, 0.0), jnp.where(keep, dp * rescale, 0.0)


def _dkdv_kernel(q_ref, k_ref, v_ref, *refs, d, cfg, bq, bk):
    bias_ref, seed_ref = _unpack(refs, d.bias_shape is not None)
    do_ref, lse_ref, delta_ref, dk_ref, dv_ref = refs[-5:]
    kv_head = pl.program_id(0)
    k0 = pl.program_id(1) * bk
    k_rows = k0 + _iota((bk, 1), 0) < d.n_k
    kv_row0 = kv_head * d.n_k
    k = _load(k_ref, kv_row0 + k0, bk, k_rows, d.ep, d.e)
    v = _load(v_ref, kv_row0 + k0, bk, k_rows, d.evp, d.ev)
    first = lax.div(k0, bq) if cfg.causal else 0
    n_q_blocks = pl.cdiv(d.n_q, bq)

    def group_member(g, carry):
        head = _Head(kv_head * d.groups + g, d)
        hseed = _head_seed(seed_ref, head.bh)
        row0 = head.bh * d.n_q

        def body(i, carry):
            dk, dv = carry
            q0 = i * bq
            q_valid = q0 + _iota((bq,), 0) < d.n_q
            q_rows = q_valid[:, None]
            q = _load(q_ref, row0 + q0, bq, q_rows, d.ep, d.e)
            do = _load(do_ref, row0 + q0, bq, q_rows, d.evp, d.ev)
            lse = _load_vec(lse_ref, row0 + q0, bq, q_valid, jnp.inf)[:, None]
            delta = _load_vec(delta_ref, row0 + q0, bq, q_valid, 0.0)[:, None]
            p, keep = _probabilities(q, k, head, bias_ref, hseed, lse, q0, k0, cfg)
            dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=F32)
            p_used, dp = _dropped(p, dp, keep, cfg)
            dv = dv + jnp.dot(p_used.astype(do.dtype).T, do, preferred_element_type=F32)
            ds = (p * (dp - delta) * cfg.scale).astype(q.dtype)
            return dk + jnp.dot(ds.T, q, preferred_element_type=F32), dv

        return lax.fori_loop(first, n_q_blocks, body, carry)

    init = (jnp.zeros((bk, d.ep), F32), jnp.zeros((bk, d.evp), F32))
    dk, dv = lax.fori_loop(0, d.groups, group_member, init)
    _store(dk_ref, kv_row0 + k0, dk, k_rows, d.e)
    _store(dv_ref, kv_row0 + k0, dv, k_rows, d.ev)


def _dq_kernel(q_ref, k_ref, v_ref, *refs, d, cfg, bq, bk):
    bias_ref, seed_ref = _unpack(refs, d.bias_shape is not None)
    do_ref, lse_ref, delta_ref, dq_ref = refs[-4:]
    head = _Head(pl.program_id(0), d)
    q0 = pl.program_id(1) * bq
    row0 = head.bh * d.n_q + q0
    q_valid = q0 + _iota((bq,), 0) < d.n_q
    q_rows = q_valid[:, None]
    q = _load(q_ref, row0, bq, q_rows, d.ep, d.e)
    do = _load(do_ref, row0, bq, q_rows, d.evp, d.ev)
    lse = _load_vec(lse_ref, row0, bq, q_valid, jnp.inf)[:, None]
    delta = _load_vec(delta_ref, row0, bq, q_valid, 0.0)[:, None]
    hseed = _head_seed(seed_ref, head.bh)

    def body(j, dq):
        k0 = j * bk
        k_rows = k0 + _iota((bk, 1), 0) < d.n_k
        k = _load(k_ref, head.kv_row0 + k0, bk, k_rows, d.ep, d.e)
        v = _load(v_ref, head.kv_row0 + k0, bk, k_rows, d.evp, d.ev)
        p, keep = _probabilities(q, k, head, bias_ref, hseed, lse, q0, k0, cfg)
        dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=F32)
        _, dp = _dropped(p, dp, keep, cfg)
        ds = (p * (dp - delta) * cfg.scale).astype(k.dtype)
        return dq + jnp.dot(ds, k, preferred_element_type=F32)

    dq = lax.fori_loop(0, _key_blocks_seen(q0, bq, bk, d, cfg), body,
                       jnp.zeros((bq, d.ep), F32))
    _store(dq_ref, row0, dq, q_rows, d.e)


def backward(q, k, v, bias, seeds, o, lse, do, cfg, blocks=None, interpret=False):
    """(dq, dk, dv) in the inputs' dtypes."""
    blocks = blocks or choose_blocks(q.shape[3], k.shape[2], q.shape[4])
    d, heads, flat = _flatten(q, k, v, bias, seeds)
    delta = jnp.sum(do.astype(F32) * o.astype(F32), axis=-1).reshape(-1)
    tail = (do.reshape(-1, d.ev), lse.reshape(-1), delta)
    common = dict(d=d, cfg=cfg, bq=blocks.q, bk=blocks.k)
    kv_heads = heads // d.groups
    dk, dv = pl.pallas_call(
        functools.partial(_dkdv_kernel, **common),
        grid=(kv_heads, pl.cdiv(d.n_k, blocks.k)),
        out_shape=(jax.ShapeDtypeStruct((kv_heads * d.n_k, d.e), k.dtype),
                   jax.ShapeDtypeStruct((kv_heads * d.n_k, d.ev), v.dtype)),
        compiler_params=_params(blocks),
        interpret=interpret,
        name="flash_attention_dkdv",
    )(*flat, *tail)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, **common),
        grid=(heads, pl.cdiv(d.n_q, blocks.q)),
        out_shape=jax.ShapeDtypeStruct((heads * d.n_q, d.e), q.dtype),
        compiler_params=_params(blocks),
        interpret=interpret,
        name="flash_attention_dq",
    )(*flat, *tail)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
