"""Pooling layers against PyTorch: ceil_mode, padding, dilation, count_include_pad, adaptive."""

import numpy as np
import pytest
from torch_twin import check_twin, pair, rand

from jaxdl import nn


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
