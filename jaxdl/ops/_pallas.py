"""The softmax family as Pallas kernels on 2-d (rows, n) arrays: one `RowSpec` per pass.

Forward and backward passes share `_pallas_core`'s three launch shapes. Statistics
are float32; outputs are cast to the caller's dtype. `blocks=None` picks the GPU
heuristic; tests pass small blocks to exercise multi-tile and split rows cheaply.
"""

import functools

import jax.numpy as jnp
from jax import lax

from jaxdl.ops import _online
from jaxdl.ops._pallas_core import (
    BIG_INDEX,
    RowSpec,
    choose_blocks,
    run_emit,
    run_reduce_then_emit,
    run_stats,
)

NEG_INF = float("-inf")
F32 = jnp.float32


def _rowsum(v):
    return jnp.sum(v, axis=1, keepdims=True)


def _md_init(br):
    return jnp.full((br, 1), NEG_INF, F32), jnp.zeros((br, 1), F32)


def _md_update(m, d, x):
    """Fold a tile into the online normalizer (masked entries read as -inf)."""
    m_new = jnp.maximum(m, jnp.max(x, axis=1, keepdims=True))
    shift = _online.safe_shift(m_new)
    return m_new, d * jnp.exp(m - shift) + _rowsum(jnp.exp(x - shift))


def _pick(row_values, slot, j):
    """The entry at column j of each row of a small (br, K) float array, as (br, 1)."""
    return jnp.max(jnp.where(slot == j, row_values, NEG_INF), axis=1, keepdims=True)


def _pick_min(row_values, slot, j):
    return jnp.min(jnp.where(slot == j, row_values, BIG_INDEX), axis=1, keepdims=True)


# ---- forward: softmax / log_softmax / logsumexp ---------------------------------------------


def _normalizer_update(carry, tiles, cols, valid, scalars):
    return _md_update(*carry, tiles[0])


_NORMALIZER = dict(fills=(NEG_INF,), widths=(1, 1), dtypes=(F32, F32), init=_md_init,
                   update=_normalizer_update)

SOFTMAX = RowSpec(
    "softmax", emit=lambda x, cols, valid, s, c: (jnp.exp(x[0] - c[0]) / c[1],), **_NORMALIZER
)
LOG_SOFTMAX = RowSpec(
    "log_softmax", emit=lambda x, cols, valid, s, c: (x[0] - c[0] - jnp.log(c[1]),),
    **_NORMALIZER
)
NORMALIZER = RowSpec("logsumexp", **_NORMALIZER)


def _merge_md(stats):
    m, d = _online.merge_md(stats[0][..., 0], stats[1][..., 0], axis=1)
    return m[:, None], d[:, None]


def _blocks(x, blocks, max_cols=8192):
    return blocks or choose_blocks(*x.shape, max_cols=max_cols)


def softmax(x, *, blocks=None, interpret=False):
    (y,) = run_reduce_then_emit(SOFTMAX, _merge_md, (x,), (x.dtype,), _blocks(x, blocks),
                                interpret)
    return y


def log_softmax(x, *, blocks=None, interpret=False):
    (y,) = run_reduce_then_emit(LOG_SOFTMAX, _merge_md, (x,), (x.dtype,), _blocks(x, blocks),
                                interpret)
    return y


def logsumexp(x, *, blocks=None, interpret=False):
    """float32 (rows,) log-sum-exp."""
    m, d = _merge_md(run_stats(NORMALIZER, (x,), (), _blocks(x, blocks), interpret))
    return _online.lse(m[:, 0], d[:, 0])


# ---- backward: softmax / log_softmax / logsumexp --------------------------------------------


def _sum_update(term):
    return lambda carry, t, cols, valid, s: (carry[0] + _rowsum(term(t)),)


_SUM = dict(fills=(0.0, 0.0), widths=(1,), dtypes=(F32,),
            init=lambda br: (jnp.zeros((br, 1), F32),))

SOFTMAX_BWD = RowSpec(  # dx = y * (g - sum(g * y))
    "softmax_bwd", update=_sum_update(lambda t: t[0] * t[1]),
    emit=lambda t, cols, valid, s, c: (t[0] * (t[1] - c[0]),), **_SUM,
)
LOG_SOFTMAX_BWD = RowSpec(  # dx = g - exp(y) * sum(g)
    "log_softmax_bwd", update=_sum_update(lambda t: t[1]),
    emit=lambda t, cols, valid, s, c: (t[1] - jnp.exp(t[0]) * c[0],), **_SUM,
)
LOGSUMEXP_BWD = RowSpec(  # dx = g * exp(x - lse); scalars: lse, g
    "logsumexp_bwd", fills=(NEG_INF,),
    emit=lambda t, cols, valid, s, c: (s[1] * jnp.exp(t[0] - s[0]),),
)


def _sum_splits(stats):
    return (jnp.sum(stats[0], axis=1),)


def softmax_bwd(y, g, *, blocks=None, interpret=False):
    (dx,) = run_reduce_then_emit(SOFTMAX_BWD, _sum_splits, (y, g), (g.dtype,),
                                 _blocks(y, blocks), interpret)
    return dx


def log_softmax_bwd(y, g, *, blocks=None, interpret=False):
    (dx,) = run_reduce_then_emit(LOG_SOFTMAX_BWD, _sum_splits, (y, g), (g.dtype,),
                                 _blocks(y, blocks), interpret)
    return dx


def logsumexp_bwd(x, lse, g, *, blocks=None, interpret=False):
    scalars = (lse[:, None].astype(F32), g[:, None].astype(F32))
    (dx,) = run_emit(LOGSUMEXP_BWD, (x,), scalars, (x.dtype,), _blocks(x, blocks), interpret)
    return dx


# ---- softmax + top-k ------------------------------------------------------------------------


def _topk_update(k, carry, tiles, cols, valid, scalars):
    """Fold a tile into (m, d) and into the running top-k (sorted by value, then index).

    Each of the k steps takes the better of the tile's best remaining element and the
    running list's next entry; ties go to the lower index, as lax.top_k orders them.
    """
    m, d, top_v, top_i = carry
    x = tiles[0]
    m, d = _md_update(m, d, x)
    slot = lax.broadcasted_iota(jnp.int32, top_v.shape, 1)

    def step(j, state):
        new_v, new_i, ptr, free_cols = state
        available = free_cols < BIG_INDEX
        tile_v = jnp.max(jnp.where(available, x, NEG_INF), axis=1, keepdims=True)
        tile_i = jnp.min(jnp.where(available & (x == tile_v), free_cols, BIG_INDEX), axis=1,
                         keepdims=True)
        run_v = _pick(top_v, slot, ptr)
        run_i = _pick_min(top_i, slot, ptr)
        from_tile = (tile_v > run_v) | ((tile_v == run_v) & (tile_i < run_i))
        new_v = jnp.where(slot == j, jnp.where(from_tile, tile_v, run_v), new_v)
        new_i = jnp.where(slot == j, jnp.where(from_tile, tile_i, run_i), new_i)
        free_cols = jnp.where(from_tile & (free_cols == tile_i), BIG_INDEX, free_cols)
        return new_v, new_i, ptr + jnp.where(from_tile, 0, 1), free_cols

    free_cols = jnp.where(valid, cols, BIG_INDEX)
    empty = _topk_empty(top_v.shape)
    ptr = jnp.zeros(m.shape, jnp.int32)
    new_v, new_i, _, _ = lax.fori_loop(0, k, step, (*empty, ptr, free_cols))
    return m, d, new_v, new_i


def _topk_empty(shape):
    return jnp.full(shape, NEG_INF, F32), jnp.full(shape, BIG_INDEX, jnp.int32)


@functools.cache
def _topk_spec(k):
    width = 1 << (k - 1).bit_length()
    return RowSpec(
        f"softmax_top{k}", fills=(NEG_INF,), widths=(1, 1, width, width),
        dtypes=(F32, F32, F32, jnp.int32),
        init=lambda br: (*_md_init(br), *_topk_empty((br, width))),
        update=functools.partial(_topk_update, k),
    )


def softmax_topk(x, k, *, blocks=None, interpret=False):
    """Top-k logits of each row, their indices and the row's float32 log-sum-exp."""
    stats = run_stats(_topk_spec(k), (x,), (), _blocks(x, blocks, 1024), interpret)
    m, d = _merge_md(stats[:2])
    n_rows = x.shape[0]
    values, order = lax.top_k(stats[2].reshape(n_rows, -1), k)  # split order = index order
    indices = jnp.take_along_axis(stats[3].reshape(n_rows, -1), order, axis=1)
    return values, indices, _online.lse(m[:, 0], d[:, 0])


def _topk_bwd_emit(k_width, t, cols, valid, s, c):
    lse, total, indices, weights = s
    dx = -jnp.exp(t[0] - lse) * total
    slot = lax.broadcasted_iota(jnp.int32, indices.shape, 1)
    for j in range(k_width):
        dx = dx + jnp.where(cols == _pick_min(indices, slot, j),
                            _pick(weights, slot, j), 0.0)
    return (dx,)


def softmax_topk_bwd(x, lse, values, indices, g, *, blocks=None, interpret=False):
    """dx = p (g_v v scattered at the indices, minus sum(g_v v)); values are probabilities."""
    weights = (g * values).astype(F32)
    k = values.shape[1]
    spec = RowSpec("softmax_topk_bwd", fills=(NEG_INF,),
                   emit=functools.partial(_topk_bwd_emit, 1 << (k - 1).bit_length()))
    scalars = (lse[:, None], jnp.sum(weights, axis=1, keepdims=True), indices.astype(jnp.int32),
               weights)
    (dx,) = run_emit(spec, (x,), scalars, (x.dtype,), _blocks(x, blocks), interpret)
    return dx


# ---- cross-entropy --------------------------------------------------------------------------


def _ce_update(carry, tiles, cols, valid, scalars):
    m, d, target, total = carry
    x = tiles[0]
    m, d = _md_update(m, d, x)
    target = target + _rowsum(jnp.where(cols == scalars[0], x, 0.0))
    return m, d, target, total + _rowsum(jnp.where(valid, x, 0.0))


CE_STATS = RowSpec(
    "cross_entropy", fills=(NEG_INF,), widths=(1, 1, 1, 1), dtypes=(F32,) * 4,
    init=lambda br: (*_md_init(br), jnp.zeros((br, 1), F32), jnp.zeros((br, 1), F32)),
    update=_ce_update,
)


def cross_entropy_stats(x, labels, *, blocks=None, interpret=False):
    """Per row: float32 log-sum-exp, the label's logit and the sum of logits (one pass)."""
    stats = run_stats(CE_STATS, (x,), (labels[:, None].astype(jnp.int32),), _blocks(x, blocks),
                      interpret)
    m, d = _merge_md(stats[:2])
    return (_online.lse(m[:, 0], d[:, 0]), jnp.sum(stats[2], axis=(1, 2)),
            jnp.sum(stats[3], axis=(1, 2)))


def _ce_bwd_emit(smoothing, n_classes, t, cols, valid, s, c):
    lse, label, scale = s
    target = (1.0 - smoothing) * (cols == label) + smoothing / n_classes
    return (scale * (jnp.exp(t[0] - lse) - target),)


def cross_entropy_bwd(x, lse, labels, scale, smoothing, *, blocks=None, interpret=False):
    """dx = scale_row * (softmax(x) - smoothed one-hot(label))."""
    spec = RowSpec("cross_entropy_bwd", fills=(NEG_INF,),
                   emit=functools.partial(_ce_bwd_emit, smoothing, x.shape[1]))
    scalars = (lse[:, None], labels[:, None].astype(jnp.int32), scale[:, None].astype(F32))
    (dx,) = run_emit(spec, (x,), scalars, (x.dtype,), _blocks(x, blocks), interpret)
    return dx
