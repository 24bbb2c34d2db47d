"""Pooling layers and functions against PyTorch: values, gradients (ties as torch), indices,
unpooling, adaptive and fractional max pools."""

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_by_name, check_functional, positive
from torch_twin import check_twin, pair, rand

import jaxdl.nn.functional as F
from jaxdl import interop, nn


@pytest.mark.parametrize("name,args,opts", [
    ("MaxPool2d", (3,), {"stride": 2, "ceil_mode": True}),
    ("MaxPool2d", ((2, 3),), {"stride": (2, 1), "padding": 1, "dilation": (2, 1)}),
    ("MaxPool2d", (2,), {}),
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False,
                         "ceil_mode": True}),
    ("AvgPool2d", ((2, 3),), {"divisor_override": 5}),
    ("AvgPool1d", (4,), {"stride": 3, "padding": 2, "ceil_mode": True}),
    ("AdaptiveAvgPool2d", ((3, 4),), {}),
    ("AdaptiveAvgPool2d", ((None, 1),), {}),
    ("AdaptiveAvgPool1d", (4,), {}),
    ("AdaptiveMaxPool2d", ((3, 2),), {}),
])
def test_pool_matches_torch(name, args, opts, rng):
    t, j = pair(name, *args, **opts)
    n = 1 if name.endswith("1d") else 2
    shape = (2, 3, 11) if n == 1 else (2, 3, 7, 10)
    check_twin(t, j, [rand(rng, *shape)], modes=("train",))


@pytest.mark.parametrize("opts", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
                                  {"kernel_size": 2, "stride": 1, "dilation": 2}])
def test_max_pool_gradient_on_ties_goes_where_torch_puts_it(opts, rng):
    """Rounded inputs make many windows hold their maximum twice: torch sends the gradient
    to the first maximum in window order, and so must we (not split it)."""
    t, j = pair("MaxPool2d", **opts)
    x = np.round(rand(rng, 2, 3, 7, 8)).astype(np.float32)
    check_twin(t, j, [x], modes=("train",))


def test_pool_unbatched_and_length_one(rng):
    t, j = pair("MaxPool1d", 1)
    check_twin(t, j, [rand(rng, 3, 1)], modes=("train",))
    t, j = pair("AdaptiveAvgPool2d", 1)
    check_twin(t, j, [rand(rng, 3, 5, 5)], modes=("train",))


def test_pool_options_and_bad_input(rng):
    values, indices = nn.AdaptiveMaxPool2d(2, return_indices=True)(rand(rng, 1, 2, 5, 5))
    assert values.shape == indices.shape == (1, 2, 2, 2) and indices.dtype == np.int32
    with pytest.raises(nn.ShapeError, match=r"pool \(MaxPool2d\).*3-d or 4-d"):
        model = nn.ModuleDict({"pool": nn.MaxPool2d(2)})
        model["pool"](rand(rng, 4, 4))
    with pytest.raises(ValueError, match="half of effective kernel"):
        nn.MaxPool2d(2, padding=2)(np.zeros((1, 1, 4, 4), np.float32))


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


def _ties(rng, *shape):
    """Rounded normals: many windows hold their maximum twice, so the tie rule matters."""
    return np.round(rand(rng, *shape)).astype(np.float32)


def _same_indices(ours, theirs):
    np.testing.assert_array_equal(np.asarray(ours), theirs.numpy())
    assert ours.dtype == np.int32


FRACTIONAL = [
    (2, (2, 3, 9, 11), dict(kernel_size=2, output_size=(4, 5))),
    (2, (2, 3, 9, 11), dict(kernel_size=(3, 2), output_ratio=(0.5, 0.7))),
    (2, (1, 2, 6, 7), dict(kernel_size=2, output_size=(5, 6))),  # overlapping windows
    (2, (3, 8, 8), dict(kernel_size=3, output_size=1)),  # unbatched, one window
    (3, (2, 2, 7, 6, 9), dict(kernel_size=(2, 3, 2), output_size=(4, 3, 5))),
    (3, (2, 5, 6, 7), dict(kernel_size=2, output_ratio=(0.5, 0.6, 0.7))),  # unbatched
]


@pytest.mark.parametrize("n, shape, size", [
    (1, (2, 3, 11), 4), (1, (3, 7), 7), (2, (2, 3, 7, 10), (3, 4)), (2, (3, 5, 6), (None, 4)),
    (2, (1, 2, 4, 4), 6), (3, (1, 2, 5, 4, 7), (2, 3, 3)),
])
def test_adaptive_max_pool_indices_and_gradient_on_ties(n, shape, size):
    x = _ties(np.random.default_rng(n), *shape)
    kwargs = dict(output_size=size, return_indices=True)
    name = f"adaptive_max_pool{n}d"
    _, indices = check_functional(getattr(F, name), getattr(TF, name), [x], kwargs=kwargs)
    _same_indices(indices, getattr(TF, name)(torch.tensor(x), **kwargs)[1])
    # the always-with-indices names, and the plain form's gradient on ties
    ours = getattr(F, f"{name}_with_indices")(x, size)
    _same_indices(ours[1], getattr(TF, f"{name}_with_indices")(torch.tensor(x), size)[1])
    check_functional(getattr(F, name), getattr(TF, name), [x], kwargs=dict(output_size=size))


def test_adaptive_max_pool_nan_and_inf_as_torch():
    x = _ties(np.random.default_rng(3), 2, 2, 6, 7)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = np.nan  # torch keeps the last NaN of a window
    x[1, 1, :3] = -np.inf
    values, indices = F.adaptive_max_pool2d(x, (2, 3), return_indices=True)
    t_values, t_indices = TF.adaptive_max_pool2d(torch.tensor(x), (2, 3), return_indices=True)
    np.testing.assert_array_equal(np.asarray(values), t_values.numpy())
    _same_indices(indices, t_indices)


def test_adaptive_max_pool_module_return_indices(rng):
    x = rand(rng, 2, 3, 7, 9)
    values, indices = nn.AdaptiveMaxPool2d((3, 4), return_indices=True)(x)
    t_values, t_indices = torch.nn.AdaptiveMaxPool2d((3, 4), return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(np.asarray(values), t_values.numpy())
    _same_indices(indices, t_indices)


@pytest.mark.parametrize("n, shape, kwargs", FRACTIONAL)
def test_fractional_max_pool_matches_torch_given_its_samples(n, shape, kwargs):
    rng = np.random.default_rng(len(shape) + n)
    x = _ties(rng, *shape)
    batch = shape[0] if len(shape) == n + 2 else 1
    samples = rng.random((batch, shape[-n - 1], n)).astype(np.float32)
    name = f"fractional_max_pool{n}d"
    kwargs = dict(kwargs, return_indices=True)
    ours, theirs = getattr(F, name), getattr(TF, name)
    _, indices = check_functional(lambda v, s, **kw: ours(v, _random_samples=s, **kw),
                                  lambda v, s, **kw: theirs(v, _random_samples=s, **kw),
                                  [x], [samples], kwargs=kwargs)
    t_indices = getattr(TF, name)(torch.tensor(x), **kwargs, _random_samples=torch.tensor(samples))[1]
    _same_indices(indices, t_indices)
    ours = getattr(F, f"{name}_with_indices")(x, _random_samples=samples, **kwargs)
    _same_indices(ours[1], t_indices)


def test_fractional_max_pool_keys_and_module():
    x = rand(np.random.default_rng(0), 2, 3, 13, 11)
    key = jax.random.key(1)
    a = F.fractional_max_pool2d(x, 2, output_size=5, key=key)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(F.fractional_max_pool2d(x, 2, (5, 5), key=key)))
    with pytest.raises(ValueError, match="needs key="):
        jax.jit(lambda v: F.fractional_max_pool2d(v, 2, output_size=5))(x)
    # the module draws new windows from its key stream on each call
    pool = nn.FractionalMaxPool2d(2, output_size=5, return_indices=True, key=key)
    draws = {np.asarray(pool(x)[1]).tobytes() for _ in range(4)}
    assert len(draws) > 1
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.FractionalMaxPool3d(2, output_ratio=1.5)
    with pytest.raises(ValueError, match="either an output"):
        nn.FractionalMaxPool2d(2)
    with pytest.raises(ValueError, match="_random_samples must have shape"):
        F.fractional_max_pool2d(x, 2, output_size=5, _random_samples=np.zeros((2, 3, 3), np.float32))
    with pytest.raises(ValueError, match="at least output \\+ kernel - 1"):
        F.fractional_max_pool2d(x, 3, output_size=12, key=key)


def test_fractional_module_with_samples_converts_from_torch():
    x = rand(np.random.default_rng(2), 2, 3, 7, 6, 8)
    samples = torch.rand(2, 3, 3)
    t_pool = torch.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True,
                                          _random_samples=samples)
    pool = interop.from_torch(t_pool)
    t_values, t_indices = t_pool(torch.tensor(x))
    values, indices = pool(x)
    np.testing.assert_array_equal(np.asarray(values), t_values.numpy())
    _same_indices(indices, t_indices)


# F.<name>(*float inputs, *constant inputs, **kwargs): values and input gradients against torch
FUNCTIONAL_CASES = {
    "max_pool3d": lambda rng: ([rand(rng, 2, 3, 5, 6, 7)], [], dict(kernel_size=2, stride=2, ceil_mode=True)),
    "avg_pool3d": lambda rng: ([rand(rng, 2, 3, 5, 6, 7)], [], dict(kernel_size=3, stride=2, padding=1)),
    "adaptive_avg_pool3d": lambda rng: ([rand(rng, 2, 3, 5, 6, 7)], [], dict(output_size=(2, 3, 4))),
    "adaptive_max_pool3d": lambda rng: ([rand(rng, 2, 3, 5, 6, 7)], [], dict(output_size=(2, 3, 4))),
    "lp_pool1d": lambda rng: ([positive(rng, 2, 3, 9)], [], dict(norm_type=2, kernel_size=3)),
    "lp_pool2d": lambda rng: ([positive(rng, 2, 3, 6, 7)], [], dict(norm_type=3, kernel_size=2, stride=2)),
    "lp_pool3d": lambda rng: ([positive(rng, 2, 2, 5, 4, 7)], [],
                              dict(norm_type=2, kernel_size=(2, 3, 2), stride=(2, 1, 3), ceil_mode=True)),
}


@pytest.mark.parametrize("case", FUNCTIONAL_CASES)
def test_functional_matches_torch(case, rng):
    floats, constants, kwargs = FUNCTIONAL_CASES[case](rng)
    check_by_name(case, floats, constants, kwargs)
