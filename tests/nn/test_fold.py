"""F.unfold / F.fold and nn.Unfold / nn.Fold against PyTorch: values and gradients."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import check_twin, pair, rand

import jaxdl.nn.functional as F
from jaxdl import nn

# (input shape, kernel_size, dilation, padding, stride)
UNFOLD = [
    ((2, 3, 5, 6), 2, 1, 0, 1),
    ((1, 2, 7, 5), (3, 2), (2, 1), (1, 0), (2, 3)),
    ((2, 1, 4, 4), 3, 1, 1, 2),
    ((3, 5, 5), (1, 3), 1, (0, 2), 1),  # unbatched
    ((1, 1, 1, 1), 1, 1, 0, 1),
    ((1, 2, 4, 12), (2, 9), 1, 0, 1),  # a kernel axis over 8: one stack, not nested
]


@pytest.mark.parametrize("shape, k, d, p, s", UNFOLD)
def test_unfold_matches_torch(shape, k, d, p, s):
    x = rand(np.random.default_rng(0), *shape)
    check_functional(F.unfold, TF.unfold, [x], kwargs=dict(kernel_size=k, dilation=d, padding=p,
                                                          stride=s))


@pytest.mark.parametrize("shape, k, d, p, s", UNFOLD)
def test_fold_matches_torch_and_inverts_unfold_layout(shape, k, d, p, s):
    kwargs = dict(kernel_size=k, dilation=d, padding=p, stride=s)
    cols = TF.unfold(torch.zeros(shape), **kwargs)
    x = rand(np.random.default_rng(1), *cols.shape)
    check_functional(F.fold, TF.fold, [x], kwargs=dict(output_size=shape[-2:], **kwargs))


def test_modules_match_torch():
    rng = np.random.default_rng(2)
    check_twin(*pair("Unfold", (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               [rand(rng, 2, 3, 6, 7)], modes=("train",))
    check_twin(*pair("Fold", (5, 4), 2, stride=(1, 2)), [rand(rng, 1, 12, 8)],
               modes=("train",), jit=True)


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match=r"unfold: expected a 3-d .* got shape \(2, 3\)"):
        F.unfold(np.zeros((2, 3), np.float32), 2)
    with pytest.raises(ValueError, match=r"divisible by the product of kernel_size \(2, 2\)"):
        F.fold(np.zeros((1, 6, 4), np.float32), (3, 3), 2)
    with pytest.raises(ValueError, match=r"2 x 2 = 4 blocks, but the input .* has 5"):
        F.fold(np.zeros((1, 8, 5), np.float32), (3, 3), 2)
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        F.unfold(np.zeros((1, 1, 2, 2), np.float32), 3)
    with pytest.raises(nn.ShapeError, match=r"Fold\).*multiple of prod\(kernel_size\) = 4"):
        nn.Fold(3, 2)(np.zeros((1, 6, 4), np.float32))
    with pytest.raises(nn.ShapeError, match=r"Unfold\): expected input of rank 3-d or 4-d"):
        nn.Unfold(2)(np.zeros((1, 1, 1, 4, 4), np.float32))
