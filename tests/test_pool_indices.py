"""Max pooling with return_indices and max_unpool against PyTorch (values, indices, gradients)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import check_twin, pair, rand

import jaxdl.nn.functional as F
from jaxdl import nn

# (input shape, kernel_size, stride, padding, dilation, ceil_mode)
POOLS = [
    ((2, 3, 7, 10), 2, None, 0, 1, False),
    ((1, 2, 7, 5), (3, 2), (2, 1), (1, 1), 1, True),
    ((2, 1, 9, 8), 3, 2, 1, 2, False),
    ((3, 5, 5), 3, 2, 1, 1, True),  # unbatched
    ((1, 1, 1, 1), 1, 1, 0, 1, False),
]
POOLS1D = [((2, 3, 11), 3, 2, 1, 1, True), ((1, 2, 9), 2, None, 0, 3, False), ((3, 1), 1, 1, 0, 1, False)]


def _pool_args(shape, k, s, p, d, ceil):
    return dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil, return_indices=True)


@pytest.mark.parametrize("n, case", [(2, c) for c in POOLS] + [(1, c) for c in POOLS1D])
def test_max_pool_indices_match_torch(n, case):
    x = rand(np.random.default_rng(0), *case[0])
    kwargs = _pool_args(*case)
    name = f"max_pool{n}d"
    values, indices = check_functional(getattr(F, name), getattr(TF, name), [x], kwargs=kwargs)
    _, t_indices = getattr(TF, name)(torch.tensor(x), **kwargs)
    np.testing.assert_array_equal(np.asarray(indices), t_indices.numpy())
    assert indices.dtype == np.int32


def test_with_indices_aliases():
    x = rand(np.random.default_rng(5), 1, 2, 5, 5)
    for n, arg in ((1, x[0]), (2, x)):
        ours = getattr(F, f"max_pool{n}d_with_indices")(arg, 2)
        theirs = getattr(TF, f"max_pool{n}d_with_indices")(torch.tensor(arg), 2)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(np.asarray(a), b.numpy())


def test_3d_indices_and_unpool_match_torch():
    x = rand(np.random.default_rng(6), 1, 2, 5, 4, 6)
    kwargs = dict(kernel_size=(2, 3, 2), stride=(2, 1, 2), padding=(1, 1, 0), ceil_mode=True,
                  return_indices=True)
    _, indices = check_functional(F.max_pool3d, TF.max_pool3d, [x], kwargs=kwargs)
    np.testing.assert_array_equal(np.asarray(indices),
                                  TF.max_pool3d(torch.tensor(x), **kwargs)[1].numpy())
    _, t_idx = TF.max_pool3d(torch.tensor(x), 2, return_indices=True)
    check_functional(F.max_unpool3d, TF.max_unpool3d, [rand(np.random.default_rng(7), *t_idx.shape)],
                     [t_idx.numpy()], dict(kernel_size=2, output_size=(5, 4, 6)))


def test_ties_pick_the_first_maximum_as_torch():
    x = np.zeros((1, 1, 4, 5), np.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = 3.0
    kwargs = dict(kernel_size=2, stride=1, return_indices=True)
    _, ours = F.max_pool2d(x, **kwargs)
    _, theirs = TF.max_pool2d(torch.tensor(x), **kwargs)
    np.testing.assert_array_equal(np.asarray(ours), theirs.numpy())


@pytest.mark.parametrize("n, case, output_size", [
    (2, POOLS[0], None), (2, POOLS[1], None), (2, POOLS[2], (1, 1, 9, 8)), (2, POOLS[3], None),
    (1, POOLS1D[0], (11,)), (1, POOLS1D[1], None)])
def test_max_unpool_matches_torch(n, case, output_size):
    shape, k, s, p, d, ceil = case
    if d != 1:  # unpooling inverts undilated windows; take torch's indices from such a pool
        d = 1
    x = rand(np.random.default_rng(1), *shape)
    pooled, t_idx = getattr(TF, f"max_pool{n}d")(torch.tensor(x), k, s, p, d, ceil, True)
    y = rand(np.random.default_rng(2), *pooled.shape)
    name = f"max_unpool{n}d"
    check_functional(getattr(F, name), getattr(TF, name), [y], [t_idx.numpy()],
                     kwargs=dict(kernel_size=k, stride=s, padding=p, output_size=output_size))


def test_modules_match_torch():
    rng = np.random.default_rng(3)
    check_twin(*pair("MaxPool2d", 3, 2, 1, return_indices=True, ceil_mode=True),
               [rand(rng, 2, 3, 7, 6)], modes=("train",))
    check_twin(*pair("MaxPool1d", 2, return_indices=True), [rand(rng, 1, 2, 7)], modes=("train",),
               jit=True)
    x = rand(rng, 2, 3, 6, 7)
    _, idx = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
    check_twin(*pair("MaxUnpool2d", 2), [rand(rng, 2, 3, 3, 3), idx.numpy()],
               kwargs=dict(output_size=(6, 7)), modes=("train",))
    _, idx = TF.max_pool1d(torch.tensor(x[0]), 3, 2, return_indices=True)
    check_twin(*pair("MaxUnpool1d", 3, 2), [rand(rng, *idx.shape), idx.numpy()], modes=("train",))


def test_pool_then_unpool_round_trip_in_jaxdl():
    x = rand(np.random.default_rng(4), 2, 2, 6, 6)
    pool, unpool = nn.MaxPool2d(2, return_indices=True), nn.MaxUnpool2d(2)
    out = np.asarray(unpool(*pool(x)))
    expected = TF.max_unpool2d(*TF.max_pool2d(torch.tensor(x), 2, return_indices=True), 2)
    np.testing.assert_array_equal(out, expected.numpy())


def test_unpool_bad_input():
    x, idx = np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 2, 2), np.int32)
    with pytest.raises(ValueError, match=r"invalid output_size \(7, 7\)"):
        F.max_unpool2d(x, idx, 2, output_size=(7, 7))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 16\)"):
        F.max_unpool2d(x, idx + 16, 2)
    with pytest.raises(ValueError, match=r"integer indices of the input's shape \(1, 1, 2, 2\)"):
        F.max_unpool2d(x, idx[0], 2)
    with pytest.raises(nn.ShapeError, match=r"MaxUnpool2d\): expected indices of the input's shape"):
        nn.MaxUnpool2d(2)(x, idx[..., :1])
