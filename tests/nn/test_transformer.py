"""Transformer encoder/decoder layers and stacks against PyTorch."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_twin import bool_mask, check_twin, rand

import jaxdl.nn.functional as F
from jaxdl import nn

# Without dropout, train and eval compute the same thing: one mode, compiled (faster than eager).
twin = functools.partial(check_twin, modes=("train",), jit=True)


def _layer_pair(kind, *args, **kwargs):
    torch.manual_seed(0)
    t = getattr(torch.nn, kind)(*args, **kwargs)
    j = getattr(nn, kind)(*args, **kwargs)
    assert list(j.state_dict()) == list(t.state_dict())
    return t, j


@pytest.mark.parametrize("options", [
    {},
    {"norm_first": True, "activation": "gelu", "batch_first": True},
    {"bias": False, "layer_norm_eps": 1e-3},
])
def test_encoder_layer_matches_torch(options, rng):
    t, j = _layer_pair("TransformerEncoderLayer", 8, 2, dim_feedforward=16, dropout=0.0,
                       **options)
    shape = (2, 5, 8) if options.get("batch_first") else (5, 2, 8)
    twin(t, j, [rand(rng, *shape)])


def test_encoder_layer_eval_with_masks_and_callable_activation(rng):
    t, j = _layer_pair("TransformerEncoderLayer", 8, 2, dim_feedforward=16, dropout=0.1,
                       batch_first=True)
    j.activation = F.silu  # a callable activation, set on both sides
    t.activation = TF.silu
    causal = np.triu(np.ones((5, 5), bool), 1)
    padding = bool_mask(rng, 3, 5)

    class Masked(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, src_mask=torch.tensor(causal), is_causal=True,
                              src_key_padding_mask=torch.tensor(padding))

    class JMasked(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, src_mask=causal, is_causal=True, src_key_padding_mask=padding)

    check_twin(Masked(t), JMasked(j), [rand(rng, 3, 5, 8)], modes=("eval",), jit=True)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first, rng):
    t, j = _layer_pair("TransformerDecoderLayer", 8, 2, dim_feedforward=12, dropout=0.0,
                       norm_first=norm_first)
    tgt_mask = rand(rng, 4, 4)  # float masks are differentiable inputs
    twin(t, j, [rand(rng, 4, 2, 8), rand(rng, 6, 2, 8), tgt_mask])


def test_encoder_stack_clones_weights_and_matches_torch(rng):
    torch.manual_seed(0)
    t_layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                               batch_first=True)
    t = torch.nn.TransformerEncoder(t_layer, 2, norm=torch.nn.LayerNorm(8),
                                    enable_nested_tensor=False)
    j_layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                         batch_first=True)
    j = nn.TransformerEncoder(j_layer, 2, norm=nn.LayerNorm(8))
    assert list(j.state_dict()) == list(t.state_dict())
    # like torch's deepcopy: every copy starts from the prototype's weights, independently
    np.testing.assert_array_equal(j.layers[0].linear1.weight, j_layer.linear1.weight)
    np.testing.assert_array_equal(j.layers[1].linear1.weight, j_layer.linear1.weight)
    assert (j.layers[0].linear1._store is j.layers[1].linear1._store
            and j.layers[0].linear1._slots["weight"] != j.layers[1].linear1._slots["weight"])
    twin(t, j, [rand(rng, 2, 5, 8)])


def test_decoder_stack_matches_torch(rng):
    torch.manual_seed(0)
    t = torch.nn.TransformerDecoder(
        torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0), 2)
    j = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0), 2)
    twin(t, j, [rand(rng, 3, 2, 8), rand(rng, 4, 2, 8)])


def test_transformer_dropout_streams_differ_per_layer(rng):
    j = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16), 2)
    keys = [np.asarray(jax.random.key_data(layer._store.values[layer.dropout._slots["_rng"]]))
            for layer in j.layers]
    assert not np.array_equal(*keys)


def test_transformer_bad_inputs():
    layer = nn.Sequential(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16))
    with pytest.raises(ValueError, match=r"0 \(TransformerEncoderLayer\).*size 8.*argument src"):
        layer(jnp.zeros((5, 2, 6)))
    with pytest.raises(ValueError, match="activation should be relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
    with pytest.raises(TypeError, match="jaxdl Transformer layer"):
        nn.TransformerEncoder(nn.Linear(8, 8), 2)
