"""Transformer encoder/decoder layers and stacks, with PyTorch's structure and state_dict keys."""

from jaxdl._module import Module
from jaxdl._random import KeyStream
from jaxdl.nn import functional as F
from jaxdl.nn._attention import MultiheadAttention, check_argument
from jaxdl.nn._container import ModuleList
from jaxdl.nn._dropout import Dropout
from jaxdl.nn._linear import Linear
from jaxdl.nn._norm import LayerNorm

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation):
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation should be relu/gelu, not {activation!r}")
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"activation must be 'relu', 'gelu' or a callable, got {activation!r}")
    return activation


class _TransformerLayer(Module):
    """What encoder and decoder layers share: the feed-forward block and cloning."""

    def _build(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
               batch_first, norm_first, bias, dtype, key, attentions, norms):
        # Keep the arguments so that Transformer{Encoder,Decoder} can clone this layer.
        self._init_args = dict(d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward,
                               dropout=dropout, activation=activation,
                               layer_norm_eps=layer_norm_eps, batch_first=batch_first,
                               norm_first=norm_first, bias=bias, dtype=dtype)
        keys = KeyStream(key)
        self.d_model = d_model
        self.batch_first = batch_first
        for name in attentions:
            setattr(self, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first, dtype=dtype,
                                                   key=keys()))
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype, key=keys())
        self.dropout = Dropout(dropout, key=keys())
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype, key=keys())
        self.norm_first = norm_first
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                dtype=dtype))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout, key=keys()))
        self.activation = _activation(activation)

    def _attention_block(self, attention, x, memory, mask, padding_mask, is_causal, dropout):
        out = attention(x, memory, memory, attn_mask=mask, key_padding_mask=padding_mask,
                        need_weights=False, is_causal=is_causal)[0]
        return dropout(out)

    def _feed_forward_block(self, x, dropout):
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _clone(self):
        """A new layer with this one's arguments, weights and mode (and its own dropout keys)."""
        copy = type(self)(**self._init_args)
        copy.load_state_dict(self.state_dict())
        return copy.train(self.training)


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then feed-forward, each with residual, dropout and LayerNorm.

    norm_first=False (post-norm): x = norm1(x + sa(x)); x = norm2(x + ff(x)).
    norm_first=True (pre-norm): x = x + sa(norm1(x)); x = x + ff(norm2(x)).
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None, *, key=None):
        super().__init__()
        self._build(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, dtype, key, ("self_attn",), 2)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        check_argument(self, src, "src", (2, 3), self.d_model)
        x = src

        def self_attention(x):
            return self._attention_block(self.self_attn, x, x, src_mask, src_key_padding_mask,
                                         is_causal, self.dropout1)

        if self.norm_first:
            x = x + self_attention(self.norm1(x))
            return x + self._feed_forward_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self_attention(x))
        return self.norm2(x + self._feed_forward_block(x, self.dropout2))


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, cross-attention to `memory`, feed-forward; post- or pre-norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None, *, key=None):
        super().__init__()
        self._build(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, dtype, key, ("self_attn", "multihead_attn"), 3)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        check_argument(self, tgt, "tgt", (2, 3), self.d_model)
        check_argument(self, memory, "memory", (2, 3), self.d_model)
        x = tgt

        def self_attention(x):
            return self._attention_block(self.self_attn, x, x, tgt_mask, tgt_key_padding_mask,
                                         tgt_is_causal, self.dropout1)

        def cross_attention(x):
            return self._attention_block(self.multihead_attn, x, memory, memory_mask,
                                         memory_key_padding_mask, memory_is_causal,
                                         self.dropout2)

        if self.norm_first:
            x = x + self_attention(self.norm1(x))
            x = x + cross_attention(self.norm2(x))
            return x + self._feed_forward_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self_attention(x))
        x = self.norm2(x + cross_attention(x))
        return self.norm3(x + self._feed_forward_block(x, self.dropout3))


def _clones(layer, num_layers, owner):
    if not isinstance(layer, _TransformerLayer):
        raise TypeError(f"{owner} expects a jaxdl Transformer layer to clone, got "
                        f"{type(layer).__name__}")
    if num_layers <= 0:
        raise ValueError(f"{owner}: num_layers must be positive, got {num_layers}")
    return ModuleList([layer._clone() for _ in range(num_layers)])


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` (same initial weights, as torch's deepcopy),
    then an optional final `norm`.

    Unlike PyTorch's nested-tensor fast path (eval mode with a padding mask), outputs at
    padded positions are computed, not zeroed; `enable_nested_tensor` is accepted and unused.
    """

    def __init__(self, encoder_layer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer`, then an optional final `norm`."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)
