"""GNMT against its PyTorch twin."""

import jax.numpy as jnp
import numpy as np
import pytest
from torch_twin import check_twin, count_parameters, rand, registry_twin_pair

import jaxdl as dl
from jaxdl import models
from jaxdl.models import _gnmt

pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.mark.parametrize("dropout,mode", [(0.0, "train"), (0.3, "eval")])
def test_gnmt_matches_torch_twin(dropout, mode, rng):
    """3 layers a side: the bidirectional layer, the merging layer and one residual layer in the
    encoder, the attention LSTM and two decoder layers (the second residual); padded sources."""
    twin, model = registry_twin_pair("gnmt", src_vocab=30, tgt_vocab=25, hidden=16, num_layers=3,
                             dropout=dropout)
    src, tgt = rng.integers(1, 30, (2, 7)), rng.integers(0, 25, (2, 5))
    padding = np.zeros((2, 7), bool)
    padding[1, 5:] = True
    src[padding] = 0
    out = check_twin(twin, model, [src, tgt, padding], modes=(mode,), jit=True)
    assert out[0].shape == (2, 5, 25)


def test_gnmt_attention_ignores_padded_keys(rng):
    attention = _gnmt.JAXDL.AdditiveAttention(8)
    query, keys = jnp.asarray(rand(rng, 2, 3, 8)), jnp.asarray(rand(rng, 2, 6, 8))
    padding = jnp.zeros((2, 6), bool).at[:, 4:].set(True)
    out = attention(query, keys, padding)
    np.testing.assert_allclose(out, attention(query, keys.at[:, 4:].set(9.0), padding), atol=1e-6)
    assert not np.allclose(out, attention(query, keys.at[:, 4:].set(9.0)))


def test_gnmt_default_size_and_layercount_parameters():
    # encoder: embedding, bidirectional LSTM, LSTM(2H, H), 2 x LSTM(H, H); decoder: embedding,
    # attention LSTM, attention (W_q with bias, W_k, v), 3 x LSTM(2H, H), classifier.
    h, v = 128, 256

    def lstm(i):
        return 4 * h * (i + h) + 8 * h

    encoder = v * h + 2 * lstm(h) + lstm(2 * h) + 2 * lstm(h)
    decoder = v * h + lstm(h) + (h * h + h + h * h + h) + 3 * lstm(2 * h) + h * v + v
    assert encoder + decoder == 1_582_592  # documented in _gnmt.py
    twin = models.model_entry("gnmt").torch_twin()
    assert count_parameters(dl.memory.abstract_model(models.gnmt)) == count_parameters(twin) == 1_582_592
    with pytest.raises(ValueError, match="num_layers >= 2"):
        models.gnmt(num_layers=1)
