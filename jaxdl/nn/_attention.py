"""Attention: `F.scaled_dot_product_attention`, `F.multi_head_attention_forward` and
MultiheadAttention with PyTorch's packed in_proj weights, masks and initialisation."""

import jax.numpy as jnp

from jaxdl import amp, ops
from jaxdl._convert import as_dtype
from jaxdl._module import Module, Parameter, ShapeError
from jaxdl._random import KeyStream
from jaxdl.nn import init
from jaxdl.nn._activation import softmax
from jaxdl.nn._dropout import dropout
from jaxdl.nn._keys import fresh_key as _fresh_key
from jaxdl.nn._linear import Linear, linear


def _additive_mask(mask, dtype, masked_value):
    """A float mask to add to attention scores: bool entries equal to `masked_value` -> -inf."""
    if mask is None:
        return None
    mask = jnp.asarray(mask)
    if mask.dtype == jnp.bool_:
        return jnp.where(mask == masked_value, -jnp.inf, 0.0).astype(dtype)
    if not jnp.issubdtype(mask.dtype, jnp.floating):
        raise TypeError(f"attention masks must be bool or floating, got dtype {mask.dtype}")
    return mask.astype(dtype)


def _attend(query, key, value, bias, dropout_p, dropout_key, scale):
    """softmax(q k^T * scale + bias) v with the weights written out: (output, weights).

    MultiheadAttention's explicit path (need_weights=True); as in PyTorch, a query whose
    every key is masked gets NaN.
    """
    query, key, value = amp.lower(query, key, value)  # autocast: matmuls low, softmax float32
    scores = jnp.matmul(query * scale, jnp.swapaxes(key, -1, -2))
    if bias is not None:
        scores = scores + bias
    weights = softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True, key=_fresh_key(dropout_key, query, "dropout"))
    return jnp.matmul(weights.astype(value.dtype), value), weights


def _flash(query, key, value, mask, dropout_p, dropout_key, scale, is_causal=False,
           enable_gqa=False):
    """`ops.attention` (flash attention: the L x S weights are never written) under
    autocast; a query whose every key is masked gets zeros, as PyTorch's fused path."""
    query, key, value = amp.lower(query, key, value)
    dropout_key = _fresh_key(dropout_key, query, "dropout") if dropout_p > 0.0 else None
    return ops.attention(query, key, value, mask=mask, is_causal=is_causal, scale=scale,
                         dropout_p=dropout_p, key=dropout_key, enable_gqa=enable_gqa)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False,
                                 *, dropout_key=None):
    """softmax(Q K^T / sqrt(E) + mask) V, as `torch.nn.functional.scaled_dot_product_attention`.

    Arguments:
        query: (..., L, E); key: (..., S, E); value: (..., S, Ev).
        attn_mask: bool (True = may attend) or float (added to the scores), broadcastable
            to (..., L, S).
        dropout_p: dropout on the attention weights (always applied when > 0, as in PyTorch:
            pass 0.0 in evaluation).
        is_causal: mask out keys after each query (top-left aligned); excludes attn_mask.
        scale: score scale, default 1 / sqrt(E).
        enable_gqa: allow fewer key/value heads (axis -3) than query heads.
        dropout_key: the jax key for dropout (PyTorch's `key` argument name is the key tensor);
            defaults to the global stream outside a trace.

    Returns:
        (..., L, Ev). A query whose every key is masked gets zeros, as in PyTorch.
    """
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ValueError("scaled_dot_product_attention: query, key and value need at least 2 "
                         f"dimensions, got shapes {query.shape}, {key.shape}, {value.shape}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError("scaled_dot_product_attention: expected query (..., L, E), key "
                         f"(..., S, E), value (..., S, Ev), got {query.shape}, {key.shape}, "
                         f"{value.shape}")
    grouped = enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]
    if grouped and query.shape[-3] % key.shape[-3]:
        raise ValueError(f"enable_gqa: {query.shape[-3]} query heads are not a multiple "
                         f"of {key.shape[-3]} key/value heads")
    if not grouped and key.shape[:-2] != query.shape[:-2]:  # leading axes broadcast, as torch
        lead = jnp.broadcast_shapes(query.shape[:-2], key.shape[:-2])
        query = jnp.broadcast_to(query, lead + query.shape[-2:])
        key, value = (jnp.broadcast_to(x, lead + x.shape[-2:]) for x in (key, value))
    target_len, source_len = query.shape[-2], key.shape[-2]
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or "
                         "is_causal=True, not both")
    if attn_mask is not None:
        attn_mask = jnp.asarray(attn_mask)
        if attn_mask.dtype != jnp.bool_ and not jnp.issubdtype(attn_mask.dtype, jnp.floating):
            raise TypeError(f"attention masks must be bool or floating, got dtype "
                            f"{attn_mask.dtype}")
        try:
            jnp.broadcast_shapes(attn_mask.shape, query.shape[:-2] + (target_len, source_len))
        except ValueError:
            raise ValueError(f"scaled_dot_product_attention: attn_mask of shape "
                             f"{attn_mask.shape} does not broadcast to the scores' shape "
                             f"{query.shape[:-2] + (target_len, source_len)}") from None
    return _flash(query, key, value, attn_mask, dropout_p, dropout_key, scale, is_causal,
                  grouped)


def _split_heads(x, num_heads):
    """(N, S, E) -> (N * heads, S, head_dim), PyTorch's batch-major, then head, order."""
    batch, length, embed_dim = x.shape
    x = jnp.swapaxes(x.reshape(batch, length, num_heads, embed_dim // num_heads), 1, 2)
    return x.reshape(batch * num_heads, length, embed_dim // num_heads)


def multi_head_attention_forward(
        query, key, value, embed_dim_to_check: int, num_heads: int, in_proj_weight,
        in_proj_bias, bias_k, bias_v, add_zero_attn: bool, dropout_p: float, out_proj_weight,
        out_proj_bias, training: bool = True, key_padding_mask=None, need_weights: bool = True,
        attn_mask=None, use_separate_proj_weight: bool = False, q_proj_weight=None,
        k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
        average_attn_weights: bool = True, is_causal: bool = False, *, dropout_key=None,
        batch_first: bool = False):
    """PyTorch's `F.multi_head_attention_forward` on (L, N, E) inputs (or unbatched (L, E)).

    Masks follow `nn.MultiheadAttention`: bool True means "may NOT attend"; float masks
    are added. attn_mask is (L, S) or (N * num_heads, L, S); key_padding_mask is (N, S).
    `is_causal` is only a hint in PyTorch: attn_mask must hold the causal mask.

    `batch_first=True` (jaxdl's addition, what MultiheadAttention(batch_first=True) calls)
    takes and returns (N, L, E): the work is batch-major inside either way, so batch-first
    inputs are never transposed to PyTorch's (L, N, E) and back.

    Returns:
        (output (L, N, E), weights (N, L, S) averaged over heads, (N, heads, L, S)
        otherwise, or None when need_weights=False); unbatched inputs drop N.
    """
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k/static_v are not "
                                  "supported")
    if is_causal and attn_mask is None:
        raise ValueError("multi_head_attention_forward: is_causal=True is only a hint, "
                         "attn_mask must hold the causal mask")
    # PyTorch's fused path: causal attention without a mask (flash attention skips the
    # key tiles above the diagonal); an appended key (bias_k, add_zero_attn) is seen by all
    flash_causal = (is_causal and key_padding_mask is None and not need_weights
                    and bias_k is None and not add_zero_attn)
    if flash_causal:
        attn_mask = None
    self_attention = query is key and key is value
    batched = query.ndim == 3
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        layout = "(N, L, E)" if batch_first else "(L, N, E)"
        raise ValueError(f"expected query, key and value all 3-d {layout} or all 2-d (L, E), "
                         f"got shapes {query.shape}, {key.shape}, {value.shape}")
    if not batched:
        query, key, value = query[None], key[None], value[None]
        if key_padding_mask is not None:
            key_padding_mask = jnp.asarray(key_padding_mask)[None]
    elif not batch_first:
        query, key, value = (jnp.swapaxes(x, 0, 1) for x in (query, key, value))
    batch, target_len, embed_dim = query.shape
    source_len = key.shape[1]
    if embed_dim != embed_dim_to_check:
        raise ValueError(f"expected query embedding size {embed_dim_to_check}, got shape "
                         f"{query.shape}")
    if key.shape[:2] != value.shape[:2] or key.shape[0] != batch:
        raise ValueError(f"expected key and value of matching (S, N) with N={batch}, got shapes "
                         f"{key.shape} and {value.shape}")
    if is_causal and not flash_causal and key_padding_mask is None and not need_weights:
        # PyTorch then trusts the hint and uses its own causal mask instead of attn_mask
        attn_mask = ~jnp.tril(jnp.ones((target_len, source_len), jnp.bool_))
    head_dim = embed_dim // num_heads
    if use_separate_proj_weight:
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        weights = jnp.split(in_proj_weight, 3)
    biases = (None,) * 3 if in_proj_bias is None else jnp.split(in_proj_bias, 3)
    for name, x, w in (("key", key, weights[1]), ("value", value, weights[2])):
        if x.shape[-1] != w.shape[1]:
            raise ValueError(f"expected {name} embedding size {w.shape[1]}, got shape {x.shape}")
    if self_attention and not use_separate_proj_weight:
        # one (E, 3E) product, as torch's packed in-projection: the backward's input and
        # weight gradients are then one product each instead of three
        q, k, v = jnp.split(linear(query, in_proj_weight, in_proj_bias), 3, axis=-1)
    else:
        q, k, v = (linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    dtype = q.dtype
    attn_mask = _additive_mask(attn_mask, dtype, masked_value=True)
    if attn_mask is not None:
        want = {2: (target_len, source_len), 3: (batch * num_heads, target_len, source_len)}
        if want.get(attn_mask.ndim) != attn_mask.shape:
            raise ValueError(f"expected attn_mask of shape {want[2]} or {want[3]}, got "
                             f"{attn_mask.shape}")
        attn_mask = attn_mask.reshape((-1, target_len, source_len))
    key_padding_mask = _additive_mask(key_padding_mask, dtype, masked_value=True)
    if key_padding_mask is not None and key_padding_mask.shape != (batch, source_len):
        want = (batch, source_len) if batched else (source_len,)
        got = key_padding_mask.shape if batched else key_padding_mask.shape[1:]
        raise ValueError(f"expected key_padding_mask of shape {want}, got {got}")

    def pad_masks():  # one more key position, visible to every query
        nonlocal attn_mask, key_padding_mask
        if attn_mask is not None:
            attn_mask = jnp.pad(attn_mask, ((0, 0), (0, 0), (0, 1)))
        if key_padding_mask is not None:
            key_padding_mask = jnp.pad(key_padding_mask, ((0, 0), (0, 1)))

    if bias_k is not None:
        k = jnp.concatenate([k, jnp.broadcast_to(bias_k, (batch, 1, embed_dim))], axis=1)
        v = jnp.concatenate([v, jnp.broadcast_to(bias_v, (batch, 1, embed_dim))], axis=1)
        pad_masks()
    batch_heads = batch * num_heads
    q, k, v = (_split_heads(x, num_heads) for x in (q, k, v))
    if add_zero_attn:
        zeros = jnp.zeros((batch_heads, 1, head_dim), dtype)
        k, v = jnp.concatenate([k, zeros], axis=1), jnp.concatenate([v, zeros], axis=1)
        pad_masks()
    if key_padding_mask is not None:
        per_head = jnp.repeat(key_padding_mask, num_heads, axis=0)[:, None, :]
        attn_mask = per_head if attn_mask is None else attn_mask + per_head

    dropout_p = dropout_p if training else 0.0
    # PyTorch's explicit path (need_weights) gives NaN for a fully masked query, its fused
    # path (no weights) zeros: reproduce both.
    if need_weights:
        out, attn = _attend(q, k, v, attn_mask, dropout_p, dropout_key, head_dim ** -0.5)
    else:
        out, attn = _flash(q, k, v, attn_mask, dropout_p, dropout_key, head_dim ** -0.5,
                           flash_causal), None
    out = jnp.swapaxes(out.reshape(batch, num_heads, target_len, head_dim), 1, 2)
    out = linear(out.reshape(batch, target_len, embed_dim), out_proj_weight, out_proj_bias)
    if need_weights:
        attn = attn.reshape(batch, num_heads, target_len, attn.shape[-1])
        attn = attn.mean(axis=1) if average_attn_weights else attn
    if not batched:
        out = out[0]
        attn = None if attn is None else attn[0]
    elif not batch_first:
        out = jnp.swapaxes(out, 0, 1)
    return out, attn


def check_argument(module, x, name, ndims, size):
    """`module._check_input` (and a floating dtype) on the argument `name`, which the error
    then names."""
    try:
        module._check_input(x, ndims, -1, size)
        module._check_floating(x)
    except ShapeError as err:
        raise ShapeError(f"{err} (argument {name})") from None


class MultiheadAttention(Module):
    """Multi-head attention, `torch.nn.MultiheadAttention`'s arguments and state_dict keys.

    Query, key and value are projected by one packed `in_proj_weight` (3E, E)
    (or separate `q/k/v_proj_weight` when kdim/vdim differ from embed_dim),
    attended per head, and recombined by `out_proj`. Masks: bool True means
    "may NOT attend" (the opposite of `scaled_dot_product_attention`), float
    masks are added to the scores.

    Returns `(output, weights)`; weights are None with need_weights=False.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None, *, key=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be > 0, got embed_dim={embed_dim} "
                             f"and num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        self.embed_dim = embed_dim
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        dtype = as_dtype(dtype, jnp.float32)
        keys = KeyStream(key)

        def xavier(shape, sampler=init.xavier_uniform_):
            return Parameter(sampler(jnp.zeros(shape, dtype), key=keys()))

        # Registration order (hence state_dict order) is PyTorch's.
        if self._qkv_same_embed_dim:
            self.in_proj_weight = xavier((3 * embed_dim, embed_dim))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = xavier((embed_dim, embed_dim))
            self.k_proj_weight = xavier((embed_dim, self.kdim))
            self.v_proj_weight = xavier((embed_dim, self.vdim))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(jnp.zeros((3 * embed_dim,), dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype, key=keys())
        if bias:
            self.out_proj.bias = jnp.zeros((embed_dim,), dtype)
        if add_bias_kv:
            self.bias_k = xavier((1, 1, embed_dim), init.xavier_normal_)
            self.bias_v = xavier((1, 1, embed_dim), init.xavier_normal_)
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self._register_rng("_rng", keys())

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        check_argument(self, query, "query", (2, 3), self.embed_dim)
        check_argument(self, key, "key", (query.ndim,), self.kdim)
        check_argument(self, value, "value", (query.ndim,), self.vdim)
        dropout_key = self._next_key() if self.training and self.dropout > 0 else None
        try:
            out, weights = multi_head_attention_forward(
                query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
                self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
                self.out_proj.weight, self.out_proj.bias, training=self.training,
                key_padding_mask=key_padding_mask, need_weights=need_weights,
                attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
                q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
                v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
                is_causal=is_causal, dropout_key=dropout_key, batch_first=self.batch_first)
        except ValueError as err:  # the functional's shape checks, made to name this module
            raise ShapeError(f"{self._describe()}: {err}") from None
        except TypeError as err:
            raise TypeError(f"{self._describe()}: {err}") from None
        return out, weights
