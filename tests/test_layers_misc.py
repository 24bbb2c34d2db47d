"""Linear/Bilinear, Flatten/Unflatten, Embedding(Bag), activations, Dropout2d, F.interpolate."""

import math

import jax
import numpy as np
import pytest
import torch
from torch_twin import assert_close, check_twin, pair, rand

import jaxdl.nn.functional as F
from jaxdl import nn


def test_linear_bilinear_shape_layers(rng):
    check_twin(*pair("Linear", 5, 3), [rand(rng, 1, 5)])
    check_twin(*pair("Bilinear", 4, 3, 2), [rand(rng, 5, 4), rand(rng, 5, 3)])
    check_twin(*pair("Bilinear", 4, 3, 2, bias=False), [rand(rng, 4), rand(rng, 3)])
    check_twin(*pair("Flatten"), [rand(rng, 2, 3, 4)], modes=("train",))
    check_twin(*pair("Flatten", 0, 1), [rand(rng, 2, 3, 4)], modes=("train",))
    check_twin(*pair("Unflatten", 1, (2, -1)), [rand(rng, 3, 6, 2)], modes=("train",))
    bound = 1 / math.sqrt(4)
    w = np.asarray(nn.Bilinear(4, 3, 7).weight)
    assert w.shape == (7, 4, 3) and np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound


@pytest.mark.parametrize("name,args", [
    ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("ELU", (0.7,)), ("GELU", ()),
    ("GELU", ("tanh",)), ("SiLU", ()), ("Mish", ()), ("Tanh", ()), ("Sigmoid", ()),
    ("Hardswish", ()), ("Softplus", ()), ("Softplus", (2.0, 3.0)), ("Softmax", (1,)),
    ("LogSoftmax", (-1,)),
])
def test_activation_matches_torch(name, args, rng):
    check_twin(*pair(name, *args), [rand(rng, 3, 4, 5, scale=4.0)], modes=("train",))


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


def test_embedding_bag_per_sample_weights(rng):
    t, j = pair("EmbeddingBag", 6, 3, mode="sum")
    check_twin(t, j, [rng.integers(0, 6, (7,)), np.array([0, 4]), rand(rng, 7)],
               modes=("train",))


def test_dropout2d_zeroes_whole_channels():
    layer = nn.Dropout2d(0.5, key=jax.random.key(0))
    out = np.asarray(layer(np.ones((4, 8, 3, 3), np.float32)))
    per_channel = out.reshape(32, 9)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(1) == per_channel.max(1)).all()  # a channel is all kept or all dropped
    assert 0 < (per_channel[:, 0] == 0).sum() < 32
    layer.eval()
    assert (np.asarray(layer(np.ones((2, 3, 4, 4), np.float32))) == 1).all()


@pytest.mark.parametrize("mode,align,shape,kw", [
    ("nearest", None, (2, 3, 5, 7), {"size": (8, 4)}),
    ("nearest", None, (2, 3, 5, 7), {"scale_factor": 2}),
    ("nearest-exact", None, (1, 2, 5), {"size": 9}),
    ("bilinear", False, (2, 3, 5, 7), {"size": (8, 4)}),
    ("bilinear", True, (2, 3, 5, 7), {"size": (9, 3)}),
    ("bilinear", False, (1, 1, 4, 4), {"scale_factor": 1.5}),
    ("linear", True, (2, 2, 6), {"size": 1}),
])
def test_interpolate_matches_torch(mode, align, shape, kw, rng):
    x = rand(rng, *shape)
    tx = torch.tensor(x, requires_grad=True)
    expected = torch.nn.functional.interpolate(tx, mode=mode, align_corners=align, **kw)
    assert_close(F.interpolate(x, mode=mode, align_corners=align, **kw), expected, mode)
    cot = rand(rng, *expected.shape)
    (expected * torch.tensor(cot)).sum().backward()
    grad = jax.grad(lambda v: (F.interpolate(v, mode=mode, align_corners=align, **kw)
                               * cot).sum())(x)
    assert_close(grad, tx.grad, f"{mode} grad", 1e-4)


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
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(rand(rng, 1, 1, 4, 4), size=2, mode="bilinear", antialias=True)
    with pytest.raises(nn.ShapeError, match=r"Bilinear.*size 3 on axis 1"):
        nn.Bilinear(3, 4, 2)(rand(rng, 2, 4), rand(rng, 2, 4))
    with pytest.raises(nn.ShapeError, match="axis 1 of size"):
        nn.Unflatten(1, (2, 2))(rand(rng, 2, 5))
