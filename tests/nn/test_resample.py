"""F.interpolate and the upsample functions against PyTorch."""

import jax
import pytest
import torch
from functional_oracle import check_by_name
from torch_twin import assert_close, rand

import jaxdl.nn.functional as F


@pytest.mark.parametrize("mode,align,shape,kw", [
    ("nearest", None, (2, 3, 5, 7), {"size": (8, 4)}),
    ("nearest", None, (2, 3, 5, 7), {"scale_factor": 2}),
    ("nearest-exact", None, (1, 2, 5), {"size": 9}),
    ("bilinear", False, (2, 3, 5, 7), {"size": (8, 4)}),
    ("bilinear", True, (2, 3, 5, 7), {"size": (9, 3)}),
    ("bilinear", False, (1, 1, 4, 4), {"scale_factor": 1.5}),
    ("linear", True, (2, 2, 6), {"size": 1}),
    ("bicubic", False, (2, 3, 5, 7), {"size": (9, 4)}),
    ("bicubic", True, (1, 2, 4, 6), {"size": (7, 3)}),
    ("bicubic", False, (1, 1, 4, 5), {"scale_factor": 1.7}),
    ("area", None, (2, 3, 7, 5), {"size": (3, 4)}),
    ("area", None, (1, 2, 9), {"size": 4}),
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


# F.<name>(*float inputs, *constant inputs, **kwargs): values and input gradients against torch
FUNCTIONAL_CASES = {
    "upsample_bilinear": lambda rng: ([rand(rng, 1, 2, 3, 4)], [], dict(scale_factor=2)),
}


@pytest.mark.parametrize("case", FUNCTIONAL_CASES)
def test_functional_matches_torch(case, rng):
    floats, constants, kwargs = FUNCTIONAL_CASES[case](rng)
    check_by_name(case, floats, constants, kwargs)
