"""`ops.attention`: argument checks, layout, masks, GQA, dropout seeds and the custom VJP.

The public layout (..., H, L, E) becomes q (B, Hk, G, L, E), k (B, Hk, S, E),
v (B, Hk, S, Ev) with G = H // Hk query heads per key/value head (grouped-query
attention without repeating k and v), and a mask becomes a float32 bias
(Bm, Hkm, Gm, Lm, Sm) whose axes are 1 where the mask broadcasts. The custom VJP keeps
only q, k, v, the output and a float32 log-sum-exp per query row; the backward
recomputes the probabilities tile by tile on the same backend.
"""

import functools
import math

import jax
import jax.numpy as jnp

from jaxdl._dtypes import accumulation_dtype
from jaxdl.ops import _attention_pallas, _attention_xla
from jaxdl.ops._dispatch import resolve


def _module(backend, size):
    # Triton computes element offsets in int32: arrays of 2^31 elements or more take XLA
    return _attention_xla if backend.name == "xla" or size >= 2**31 else _attention_pallas


def _forward(backend, cfg, q, k, v, bias, seeds):
    mod = _module(backend, max(q.size, k.size, v.size))
    if mod is _attention_xla:
        return mod.forward(q, k, v, bias, seeds, cfg, backend.blocks)
    return mod.forward(q, k, v, bias, seeds, cfg, backend.blocks, backend.interpret)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _flash(backend, cfg, q, k, v, bias, seeds):
    return _forward(backend, cfg, q, k, v, bias, seeds)[0]


def _flash_fwd(backend, cfg, q, k, v, bias, seeds):
    # symbolic zeros tell whether the bias (an additive mask) needs a gradient
    bias_grad = bias is not None and bias.perturbed
    q, k, v, bias, seeds = (a if a is None else a.value for a in (q, k, v, bias, seeds))
    o, lse = _forward(backend, cfg, q, k, v, bias, seeds)
    return o, (q, k, v, bias, seeds, o, lse, jnp.zeros(()) if bias_grad else None)


def _flash_bwd(backend, cfg, res, do):
    q, k, v, bias, seeds, o, lse, bias_grad = res
    if isinstance(do, jax.custom_derivatives.SymbolicZero):
        do = jnp.zeros(do.shape, do.dtype)
    if bias_grad is not None:
        # a differentiated additive mask needs the whole (L, S) gradient: the dense path
        _, vjp = jax.vjp(lambda q, k, v, b: _attention_xla.dense(q, k, v, b, seeds, cfg),
                         q, k, v, bias)
        return (*vjp(do), None)
    mod = _module(backend, max(q.size, k.size, v.size))
    if mod is _attention_xla:
        grads = mod.backward(q, k, v, bias, seeds, o, lse, do, cfg, backend.blocks)
    else:
        grads = mod.backward(q, k, v, bias, seeds, o, lse, do, cfg, backend.blocks,
                             backend.interpret)
    return (*grads, None, None)


_flash.defvjp(_flash_fwd, _flash_bwd, symbolic_zeros=True)


# Up to this many scores per head, XLA on CPU runs the whole score matrix differentiated
# by JAX faster than the tiled custom VJP (2026-11-30, one core, forward+backward against
# torch SDPA: 0.97x against 0.74x at (16, 4, 128, 32), 0.80x against 0.67x at
# (4, 8, 256, 64)); the probabilities it keeps for the backward are at most 256 KiB a head.
# Larger problems take 128 x 128 tiles (at (4, 8, 512, 64) causal: 0.78x, one tile 0.34x).
DENSE_SCORES = 256 * 256


@functools.partial(jax.jit, static_argnums=(5, 6, 7))
def _attention(q, k, v, bias, seeds, cfg, backend, out_shape):
    if backend.name == "xla" and backend.blocks is None and (
            q.shape[3] * k.shape[2] <= DENSE_SCORES):
        return _attention_xla.dense(q, k, v, bias, seeds, cfg).reshape(out_shape)
    return _flash(backend, cfg, q, k, v, bias, seeds).reshape(out_shape)


# ---- argument checks and layout -------------------------------------------------------------


def _check(q, k, v, enable_gqa):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"ops.attention: {name} must be a floating array, got dtype "
                             f"{x.dtype}")
        if x.ndim < 2:
            raise ValueError(f"ops.attention: {name} must be (..., L, E), got shape {x.shape}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"ops.attention: q, k and v must share a dtype, got {q.dtype}, "
                         f"{k.dtype}, {v.dtype}")
    if q.ndim != k.ndim or k.ndim != v.ndim:
        raise ValueError(f"ops.attention: q, k and v must have the same rank, got shapes "
                         f"{q.shape}, {k.shape}, {v.shape}")
    if q.shape[-1] != k.shape[-1] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"ops.attention: expected q (..., L, E), k (..., S, E), v (..., S, Ev), "
                         f"got {q.shape}, {k.shape}, {v.shape}")
    if k.shape[-2] == 0:
        raise ValueError(f"ops.attention: no keys (S = 0) in k of shape {k.shape}")
    if q.ndim == 2 or q.shape[:-2] == k.shape[:-2]:
        return
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if q.shape[:-3] != k.shape[:-3] or not enable_gqa or heads % kv_heads:
        raise ValueError(
            f"ops.attention: q {q.shape} and k {k.shape} must share their leading (..., heads) "
            f"axes; with enable_gqa=True the query heads ({heads}) may be a multiple of the "
            f"key/value heads ({kv_heads})")


def _bias(mask, score_shape, kv_heads, dtype):
    """The mask as a bias of rank 5 (Bm, Hkm, Gm, Lm, Sm), axes 1 or full, in the
    accumulation dtype (float32; float64 for float64 inputs)."""
    if mask is None:
        return None
    mask = jnp.asarray(mask)
    if mask.dtype == jnp.bool_:
        mask = jnp.where(mask, 0.0, -jnp.inf).astype(accumulation_dtype(dtype))
    elif jnp.issubdtype(mask.dtype, jnp.floating):
        mask = mask.astype(accumulation_dtype(dtype))
    else:
        raise ValueError(f"ops.attention: mask must be bool (True = attend) or floating "
                         f"(added to the scores), got dtype {mask.dtype}")
    try:
        jnp.broadcast_shapes(mask.shape, score_shape)
        if mask.ndim > len(score_shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"ops.attention: mask of shape {mask.shape} does not broadcast to the "
                         f"scores' shape {score_shape}") from None
    mask = mask.reshape((1,) * (len(score_shape) - mask.ndim) + mask.shape)
    batch, (heads, lm, sm) = score_shape[:-3], mask.shape[-3:]
    if math.prod(mask.shape[:-3]) > 1:
        mask = jnp.broadcast_to(mask, (*batch, heads, lm, sm))
    mask = mask.reshape(-1, heads, lm, sm)
    if heads == 1:
        return mask[:, :, None]
    return mask.reshape(mask.shape[0], kv_heads, heads // kv_heads, lm, sm)


def attention(q, k, v, mask=None, is_causal=False, scale=None, dropout_p=0.0, key=None,
              enable_gqa=False, impl="auto"):
    """softmax(q k^T * scale + mask) v without writing the L x S scores (flash attention).

    Same semantics as `torch.nn.functional.scaled_dot_product_attention`: key tiles fold
    into the online normalizer, so memory is O(L + S) per head, forward and backward.

    Arguments:
      q: (..., H, L, E); k: (..., Hk, S, E); v: (..., Hk, S, Ev); one floating dtype.
      mask: bool (True = may attend) or float (added to the scores), broadcastable to
        (..., H, L, S). A float mask that is differentiated takes a dense backward.
      is_causal: query i sees keys j <= i (top-left aligned when L != S, as PyTorch);
        excludes `mask`.
      scale: score scale, default 1 / sqrt(E).
      dropout_p: dropout on the attention weights, drawn from `key` (required when > 0).
      enable_gqa: allow H to be a multiple of Hk (grouped-query attention).
      impl: "auto" (Pallas on GPU, XLA elsewhere), "pallas" or "xla".
    Returns:
      (..., H, L, Ev) in q's dtype. A query that sees no key gets zeros (and zero
      gradients), as in PyTorch.
    """
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    _check(q, k, v, enable_gqa)
    if is_causal and mask is not None:
        raise ValueError("ops.attention: pass either mask or is_causal=True, not both")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"ops.attention: dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > 0.0 and key is None:
        raise ValueError("ops.attention: dropout_p > 0 needs a jax random `key`")
    seeds = (jax.random.bits(key, (2,), jnp.uint32) if dropout_p > 0.0
             else jnp.zeros((2,), jnp.uint32))
    n_q, e = q.shape[-2:]
    n_k, ev = v.shape[-2:]
    heads = q.shape[-3] if q.ndim > 2 else 1
    kv_heads = k.shape[-3] if k.ndim > 2 else 1
    batch = q.shape[:-3]
    score_shape = (*batch, heads, n_q, n_k)
    bias = _bias(mask, score_shape, kv_heads, q.dtype)
    q5 = q.reshape(-1, kv_heads, heads // kv_heads, n_q, e)
    k4, v4 = k.reshape(-1, kv_heads, n_k, e), v.reshape(-1, kv_heads, n_k, ev)
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    cfg = _attention_xla.Config(bool(is_causal), scale, float(dropout_p))
    return _attention(q5, k4, v4, bias, seeds, cfg, resolve(impl), (*q.shape[:-1], ev))
