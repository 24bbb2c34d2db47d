"""GPT against its PyTorch twin."""

import jax.numpy as jnp
import numpy as np
import pytest
from torch_twin import check_forward, check_twin, count_parameters, registry_twin_pair

import jaxdl as dl
from jaxdl import models

pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.mark.parametrize("tie_weights", [True, False])
def test_gpt_matches_torch_twin(tie_weights, rng):
    """Forward logits and gradients of every parameter (dropout 0: train equals eval)."""
    config = dict(vocab_size=50, context=16, d_model=32, num_layers=2, num_heads=4, dropout=0.0,
                  tie_weights=tie_weights)
    twin, model = registry_twin_pair("gpt", **config)
    tokens = rng.integers(0, 50, (2, 12))
    out = check_twin(twin, model, [tokens], modes=("train",), jit=True, fwd_tol=1e-5, grad_tol=1e-4)
    assert out[0].shape == (2, 12, 50)


def test_gpt_is_causal_and_bounded_by_its_context():
    model = models.gpt(vocab_size=20, context=8, d_model=16, num_layers=1, num_heads=2).eval()
    tokens = jnp.arange(8)[None] % 20
    changed = tokens.at[0, 5].set(7)
    run = dl.jit(lambda m, t: m(t))  # one compile for both calls (eager runs op by op)
    a, b = run(model, tokens), run(model, changed)
    np.testing.assert_array_equal(np.asarray(a[0, :5]), np.asarray(b[0, :5]))  # the past ignores t=5
    assert not np.allclose(np.asarray(a[0, 5:]), np.asarray(b[0, 5:]))
    with pytest.raises(ValueError, match="exceeds the context 8"):
        model(jnp.zeros((1, 9), jnp.int32))


def test_gpt_default_config_size_and_full_context(rng):
    """The documented size; eval mode over the whole context (torch under no_grad: its
    inference path for TransformerEncoderLayer)."""
    assert count_parameters(dl.memory.abstract_model(models.gpt, tie_weights=False)) == 842_496 + 256 * 128
    twin, model = registry_twin_pair("gpt")
    assert count_parameters(model) == count_parameters(twin) == 842_496  # documented in _gpt.py
    check_forward(twin, model, [rng.integers(0, 256, (2, 128))], tol=1e-4)
