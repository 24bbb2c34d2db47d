"""Alpha dropout and gumbel_softmax (random: statistics, structure and gradients, since JAX's and
torch's random streams differ), and the new margin-loss modules against PyTorch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import check_twin, rand

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn


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


@pytest.mark.parametrize("dim", [-1, 1])
def test_gumbel_softmax_hard_one_hot_and_straight_through_gradient(dim):
    logits = jnp.asarray(rand(np.random.default_rng(1), 3, 5, 4))
    key = jax.random.key(3)
    soft = F.gumbel_softmax(logits, tau=0.7, dim=dim, key=key)
    hard = F.gumbel_softmax(logits, tau=0.7, hard=True, dim=dim, key=key)
    np.testing.assert_allclose(np.asarray(soft.sum(dim)), 1, rtol=1e-5)
    assert set(np.unique(np.asarray(hard))) == {0.0, 1.0}
    np.testing.assert_array_equal(np.asarray(hard.sum(dim)), 1)
    np.testing.assert_array_equal(np.argmax(np.asarray(hard), dim), np.argmax(np.asarray(soft), dim))
    w = jnp.asarray(rand(np.random.default_rng(2), 3, 5, 4))
    g_hard = jax.grad(lambda z: jnp.sum(w * F.gumbel_softmax(z, 0.7, True, dim=dim, key=key)))(logits)
    g_soft = jax.grad(lambda z: jnp.sum(w * F.gumbel_softmax(z, 0.7, dim=dim, key=key)))(logits)
    np.testing.assert_allclose(np.asarray(g_hard), np.asarray(g_soft), rtol=1e-5, atol=1e-6)


def test_gumbel_softmax_samples_the_softmax_distribution():
    logits = jnp.asarray([0.5, -1.0, 2.0, 0.0])
    samples = F.gumbel_softmax(jnp.broadcast_to(logits, (40000, 4)), hard=True, key=jax.random.key(4))
    freq = np.asarray(samples.mean(0))
    np.testing.assert_allclose(freq, np.asarray(jax.nn.softmax(logits)), atol=0.01)
    # and torch's samples have the same distribution
    t = TF.gumbel_softmax(torch.tensor(np.asarray(logits)).expand(40000, 4), hard=True).mean(0)
    np.testing.assert_allclose(freq, t.numpy(), atol=0.015)


def test_triplet_with_custom_distance_matches_torch():
    rng = np.random.default_rng(5)
    a, p, n = rand(rng, 1, 6), rand(rng, 1, 6), rand(rng, 1, 6)

    def cosine(x, y):
        return 1 - F.cosine_similarity(x, y, dim=-1)

    def t_cosine(x, y):
        return 1 - TF.cosine_similarity(x, y, dim=-1)

    check_functional(F.triplet_margin_with_distance_loss, TF.triplet_margin_with_distance_loss,
                     [a, p, n], kwargs=dict(distance_function=cosine, margin=1.5, swap=True),
                     torch_kwargs=dict(distance_function=t_cosine, margin=1.5, swap=True))


def test_loss_modules_match_torch():
    rng = np.random.default_rng(6)
    x, target = rand(rng, 2, 7), np.array([[6, 0, 3, -1, 1, 1, 1], [2, -1, 0, 0, 0, 0, 0]])
    check_twin(torch.nn.MultiLabelMarginLoss(reduction="sum"), nn.MultiLabelMarginLoss(reduction="sum"),
               [x, target], modes=("train",))
    check_twin(torch.nn.TripletMarginWithDistanceLoss(margin=0.5),
               nn.TripletMarginWithDistanceLoss(margin=0.5), [rand(rng, 3, 4) for _ in range(3)],
               modes=("train",))
    with pytest.raises(nn.ShapeError, match=r"MultiLabelMarginLoss\): expected target of shape"):
        nn.MultiLabelMarginLoss()(x, target[0])
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        nn.TripletMarginWithDistanceLoss(margin=0.0)
    with pytest.raises(nn.ShapeError, match=r"expected negative of the anchor's rank 2"):
        nn.TripletMarginWithDistanceLoss()(x, x, x[0])
