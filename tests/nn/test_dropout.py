"""Dropout family: channel dropouts' structure, alpha dropout's statistics, PyTorch's constants and
gradients (JAX's and torch's random streams differ, so no value-by-value comparison)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_twin import rand

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn


def test_dropout2d_zeroes_whole_channels():
    layer = nn.Dropout2d(0.5, key=jax.random.key(0))
    out = np.asarray(layer(np.ones((4, 8, 3, 3), np.float32)))
    per_channel = out.reshape(32, 9)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(1) == per_channel.max(1)).all()  # a channel is all kept or all dropped
    assert 0 < (per_channel[:, 0] == 0).sum() < 32
    layer.eval()
    assert (np.asarray(layer(np.ones((2, 3, 4, 4), np.float32))) == 1).all()


def test_channel_dropouts_zero_whole_channels():
    x = jnp.ones((4, 8, 16))
    out = np.asarray(F.dropout1d(x, 0.5, key=jax.random.key(0)))
    per_channel = out.reshape(4, 8, 16)
    assert all(len(set(row.tolist())) == 1 for row in per_channel.reshape(32, 16))
    assert set(np.unique(out)) <= {0.0, 2.0}
    out3 = np.asarray(F.dropout3d(jnp.ones((2, 6, 3, 3, 3)), 0.5, key=jax.random.key(1)))
    assert all(len(set(c.ravel().tolist())) == 1 for c in out3.reshape(12, -1))


def _affine_and_dropped(x, out):
    """(a, b, dropped value, dropped fraction) of out = a x + b (kept) for inputs x > 0, where
    the dropped value (below every kept one) is the minimum."""
    dropped = np.isclose(out, out.min())
    a, b = np.polyfit(x[~dropped], out[~dropped], 1)
    return np.array([a, b, out.min()]), dropped.mean()


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_alpha_dropout_statistics_and_torch_constants(p):
    x = jax.random.normal(jax.random.key(0), (400, 500))
    out = np.asarray(F.alpha_dropout(x, p, training=True, key=jax.random.key(1)))
    assert abs(out.mean()) < 0.01 and abs(out.std() - 1) < 0.01  # SELU's fixed point kept
    # same affine map and dropped value as torch (their masks differ: other random streams)
    positive = np.random.default_rng(0).uniform(0.5, 2.0, (200, 100)).astype(np.float32)
    ours, ours_frac = _affine_and_dropped(
        positive, np.asarray(F.alpha_dropout(positive, p, True, key=jax.random.key(2))))
    theirs, theirs_frac = _affine_and_dropped(
        positive, TF.alpha_dropout(torch.tensor(positive), p, training=True).numpy())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert abs(ours_frac - p) < 0.015 and abs(theirs_frac - p) < 0.015


def test_feature_alpha_dropout_drops_whole_channels():
    x = jnp.ones((64, 32, 3, 3))
    out = np.asarray(F.feature_alpha_dropout(x, 0.5, training=True, key=jax.random.key(2)))
    per_channel = out.reshape(64 * 32, 9)
    assert (per_channel == per_channel[:, :1]).all()
    assert abs(np.isclose(per_channel[:, 0], per_channel[:, 0].min()).mean() - 0.5) < 0.03


def test_alpha_dropout_modules_eval_identity_train_keys_and_gradients():
    x = rand(np.random.default_rng(0), 2, 3, 4, 4)
    for cls in (nn.AlphaDropout, nn.FeatureAlphaDropout):
        m = cls(0.3, key=jax.random.key(0))
        m.eval()
        assert np.array_equal(np.asarray(m(x)), x)
        m.train()

        @dl.jit
        def step(m, x):
            return dl.value_and_grad(lambda m, x: jnp.sum(m(x)), argnums=(0, 1))(m, x)

        (a, (_, ga)), (b, _) = step(m, x), step(m, x)
        assert a != b  # two compiled steps, two masks
        kept = np.asarray(ga) > 0  # gradient: a where kept, 0 where dropped
        assert 0 < kept.mean() < 1
        assert len(np.unique(np.round(np.asarray(ga), 6))) == 2
    assert F.alpha_dropout(jnp.asarray(x), 0.5) is not None  # training=False by default: identity
    np.testing.assert_array_equal(np.asarray(F.alpha_dropout(jnp.asarray(x), 0.5)), x)
    with pytest.raises(ValueError, match="needs key"):
        jax.jit(lambda x: F.alpha_dropout(x, 0.5, training=True))(x)
    with pytest.raises(nn.ShapeError, match=r"FeatureAlphaDropout\): expected input of rank"):
        nn.FeatureAlphaDropout()(np.zeros(3, np.float32))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_mask_is_bernoulli_without_structure(p):
    """The counter-based mask: P(keep) = 1 - p, kept entries scaled by 1 / (1 - p), and no
    correlation between neighbours along either axis or between masks of two keys."""
    x = jnp.ones((2048, 512))
    out = np.asarray(F.dropout(x, p, key=jax.random.key(3)))
    keep = out != 0
    n, q = keep.size, 1.0 - p
    assert abs(keep.mean() - q) < 5 * np.sqrt(q * p / n)
    np.testing.assert_allclose(out[keep], 1.0 / q, rtol=1e-6)
    bound = 5 / np.sqrt(n)
    for a, b in ((keep[:, 1:], keep[:, :-1]), (keep[1:], keep[:-1]),
                 (keep, np.asarray(F.dropout(x, p, key=jax.random.key(4))) != 0)):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < bound
    # rows are not repeats of one another (a hash of the row index, not a shared stream)
    assert len({row.tobytes() for row in np.packbits(keep, axis=1)}) == keep.shape[0]


def test_dropout_mask_depends_only_on_key_eager_and_compiled():
    x = jnp.asarray(rand(np.random.default_rng(0), 4, 3, 5, 6))
    key = jax.random.key(7)
    eager = F.dropout(x, 0.3, key=key)
    compiled = jax.jit(lambda x, k: F.dropout(x, 0.3, key=k))(x, key)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(compiled))
    assert not np.array_equal(np.asarray(eager), np.asarray(F.dropout(x, 0.3, key=jax.random.key(8))))
    assert F.dropout(jnp.ones(()), 0.5, key=key).shape == ()
