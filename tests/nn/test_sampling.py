"""F.affine_grid and F.grid_sample against PyTorch: values, input and grid/theta gradients."""

import itertools

import numpy as np
import pytest
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import rand

import jaxdl.nn.functional as F

OPTIONS = list(itertools.product(["bilinear", "nearest"], ["zeros", "border", "reflection"],
                                 [False, True]))


@pytest.mark.filterwarnings("ignore:Since version 1.3.0")
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 1, 1, 3), (1, 2, 5, 1)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch(size, align_corners):
    theta = rand(np.random.default_rng(0), size[0], 2, 3)
    check_functional(F.affine_grid, TF.affine_grid, [theta],
                     kwargs=dict(size=size, align_corners=align_corners))


@pytest.mark.parametrize("mode, padding_mode, align_corners", OPTIONS)
def test_grid_sample_matches_torch(mode, padding_mode, align_corners):
    rng = np.random.default_rng(1)
    # coordinates reach past [-1, 1] (and past a reflection's first fold) to exercise padding
    for shape, grid_hw in (((2, 3, 5, 4), (3, 6)), ((1, 1, 1, 3), (2, 2)), ((1, 2, 3, 1), (4, 1))):
        x = rand(rng, *shape)
        grid = rng.uniform(-2.6, 2.6, (shape[0], *grid_hw, 2)).astype(np.float32)
        check_functional(F.grid_sample, TF.grid_sample, [x, grid],
                         kwargs=dict(mode=mode, padding_mode=padding_mode,
                                     align_corners=align_corners))


@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
def test_grid_sample_at_the_border_has_torch_gradient(padding_mode):
    """Coordinates exactly at the ends (frequent in bfloat16): torch's clamp gives them no
    gradient."""
    x = rand(np.random.default_rng(3), 1, 2, 4, 5)
    grid = np.array([[[[-1.0, 1.0], [1.0, -1.0], [0.3, 1.0]]]], np.float32)
    check_functional(F.grid_sample, TF.grid_sample, [x, grid],
                     kwargs=dict(padding_mode=padding_mode, align_corners=True))


def test_affine_grid_then_grid_sample_end_to_end():
    rng = np.random.default_rng(2)
    x, theta = rand(rng, 2, 3, 6, 7), rand(rng, 2, 2, 3, scale=0.5)

    def pipeline(lib, x, theta):
        grid = lib.affine_grid(theta, (2, 3, 5, 4), align_corners=False)
        return lib.grid_sample(x, grid, padding_mode="border", align_corners=False)

    check_functional(lambda *a: pipeline(F, *a), lambda *a: pipeline(TF, *a), [x, theta])


def test_unsupported_options_and_bad_shapes():
    x, grid = np.zeros((1, 1, 3, 3), np.float32), np.zeros((1, 2, 2, 2), np.float32)
    with pytest.raises(NotImplementedError, match="mode='bicubic'"):
        F.grid_sample(x, grid, mode="bicubic")
    with pytest.raises(NotImplementedError, match="padding_mode='circular'"):
        F.grid_sample(x, grid, padding_mode="circular")
    with pytest.raises(NotImplementedError, match="5-d input"):
        F.grid_sample(np.zeros((1, 1, 2, 2, 2), np.float32), np.zeros((1, 1, 1, 1, 3), np.float32))
    with pytest.raises(NotImplementedError, match="5-d size"):
        F.affine_grid(np.zeros((1, 3, 4), np.float32), (1, 1, 2, 2, 2))
    with pytest.raises(ValueError, match=r"expected theta of shape \(2, 2, 3\) .* got \(1, 2, 3\)"):
        F.affine_grid(np.zeros((1, 2, 3), np.float32), (2, 1, 4, 4))
    with pytest.raises(ValueError, match=r"got input \(1, 1, 3, 3\) and grid \(2, 2, 2, 2\)"):
        F.grid_sample(x, np.zeros((2, 2, 2, 2), np.float32))
