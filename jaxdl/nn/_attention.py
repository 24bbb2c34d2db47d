"""MultiheadAttention with PyTorch's packed in_proj weights, masks and initialisation."""

import jax.numpy as jnp

from jaxdl._convert import as_dtype
from jaxdl._module import Module, Parameter, ShapeError
from jaxdl._random import KeyStream
from jaxdl.nn import functional as F
from jaxdl.nn import init
from jaxdl.nn._linear import Linear


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
    "may NOT attend" (the opposite of `F.scaled_dot_product_attention`), float
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
        if self.batch_first and query.ndim == 3:
            query, key, value = (jnp.swapaxes(x, 0, 1) for x in (query, key, value))
        dropout_key = self._next_key() if self.training and self.dropout > 0 else None
        try:
            out, weights = F.multi_head_attention_forward(
                query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
                self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
                self.out_proj.weight, self.out_proj.bias, training=self.training,
                key_padding_mask=key_padding_mask, need_weights=need_weights,
                attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
                q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
                v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
                is_causal=is_causal, dropout_key=dropout_key)
        except ValueError as err:  # the functional's shape checks, made to name this module
            raise ShapeError(f"{self._describe()}: {err}") from None
        except TypeError as err:
            raise TypeError(f"{self._describe()}: {err}") from None
        if self.batch_first and query.ndim == 3:
            out = jnp.swapaxes(out, 0, 1)
        return out, weights
