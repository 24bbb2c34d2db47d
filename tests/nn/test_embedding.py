"""Embedding, EmbeddingBag and one_hot against PyTorch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from functional_oracle import check_functional
from torch_twin import check_twin, pair, rand

import jaxdl.nn.functional as F
from jaxdl import nn


@pytest.mark.parametrize("opts", [{}, {"padding_idx": 2}, {"padding_idx": -1}])
def test_embedding_matches_torch(opts, rng):
    t, j = pair("Embedding", 7, 4, **opts)
    idx = rng.integers(0, 7, (3, 5))
    idx[0, :3] = [2, 6, 2]
    check_twin(t, j, [idx], modes=("train",))
    if opts:
        assert not np.asarray(nn.Embedding(7, 4, **opts).weight)[opts["padding_idx"]].any()


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_torch(mode, rng):
    t, j = pair("EmbeddingBag", 9, 3, mode=mode)
    flat = rng.integers(0, 9, (10,))
    offsets = np.array([0, 3, 3, 7])  # an empty bag in the middle
    check_twin(t, j, [flat, offsets], modes=("train",))
    check_twin(t, j, [rng.integers(0, 9, (2, 4))], modes=("train",))
    t, j = pair("EmbeddingBag", 9, 3, mode=mode, padding_idx=0, include_last_offset=True)
    flat[1] = 0
    check_twin(t, j, [flat, np.array([0, 2, 5, 10])], modes=("train",))


@pytest.mark.parametrize("opts", [{"max_norm": 1.5}, {"max_norm": 0.5, "norm_type": 1.0},
                                  {"scale_grad_by_freq": True, "padding_idx": 1},
                                  {"sparse": True}])
def test_embedding_options_match_torch(opts, rng):
    """max_norm: the looked-up rows renormalised, the gradient as torch's (taken after its
    in-place renormalisation); scale_grad_by_freq; sparse gives torch's gradient, dense."""
    weight, idx = rand(rng, 7, 4) * 2, rng.integers(0, 7, (3, 5))
    idx[0, :3] = [2, 6, 2]
    dense = {k: v for k, v in opts.items() if k != "sparse"}  # torch's sparse gradient, densely
    check_functional(lambda w, i: F.embedding(i, w, **opts),
                     lambda w, i: torch.nn.functional.embedding(i, w, **dense), [weight], [idx])


@pytest.mark.parametrize("opts", [{"max_norm": 1.0, "mode": "mean"}, {"max_norm": 2.0, "mode": "sum"}])
def test_embedding_bag_options_match_torch(opts, rng):
    check_functional(lambda w, i, o: F.embedding_bag(i, w, o, **opts),
                     lambda w, i, o: torch.nn.functional.embedding_bag(i, w, o, **opts),
                     [rand(rng, 9, 3) * 2], [rng.integers(0, 9, (10,)), np.array([0, 3, 3, 7])])


def test_embedding_modules_scale_grad_by_freq_match_torch(rng):
    idx = rng.integers(0, 5, (4, 3))
    check_twin(*pair("Embedding", 5, 3, scale_grad_by_freq=True), [idx], modes=("train",))
    assert nn.Embedding(5, 3, sparse=True).sparse  # accepted; its gradient is dense
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq"):
        nn.EmbeddingBag(5, 2, scale_grad_by_freq=True)
    with pytest.raises(NotImplementedError, match="renormalises the stored weight"):
        nn.EmbeddingBag(5, 2, max_norm=1.0)


def test_embedding_bag_per_sample_weights(rng):
    t, j = pair("EmbeddingBag", 6, 3, mode="sum")
    check_twin(t, j, [rng.integers(0, 6, (7,)), np.array([0, 4]), rand(rng, 7)],
               modes=("train",))


def test_one_hot_and_errors(rng):
    idx = rng.integers(0, 5, (3, 4))
    expected = torch.nn.functional.one_hot(torch.tensor(idx), 6)
    np.testing.assert_array_equal(F.one_hot(idx, 6), expected.numpy())
    np.testing.assert_array_equal(F.one_hot(idx), torch.nn.functional.one_hot(
        torch.tensor(idx)).numpy())
    model = nn.Sequential(nn.Embedding(5, 2))
    with pytest.raises(nn.ShapeError, match=r"0 \(Embedding\).*integer"):
        model(rand(rng, 3))
    with pytest.raises(NotImplementedError, match="max_norm"):
        nn.Embedding(5, 2, max_norm=1.0)
    with pytest.raises(ValueError, match="num_classes=-1 .* pass num_classes"):
        jax.jit(F.one_hot)(jnp.asarray(idx))
    with pytest.raises(ValueError, match=r"class values must be in \[0, num_classes=3\)"):
        F.one_hot(idx, 3)
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(rand(rng, 1, 1, 4, 4), size=2, mode="bilinear", antialias=True)
    with pytest.raises(nn.ShapeError, match=r"Bilinear.*size 3 on axis 1"):
        nn.Bilinear(3, 4, 2)(rand(rng, 2, 4), rand(rng, 2, 4))
    with pytest.raises(nn.ShapeError, match="axis 1 of size"):
        nn.Unflatten(1, (2, 2))(rand(rng, 2, 5))
