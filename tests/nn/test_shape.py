"""Shape layers and shuffles against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_by_name
from torch_twin import rand

import jaxdl.nn.functional as F


def test_native_channel_shuffle(rng):
    x = rand(rng, 2, 6, 3, 2)
    np.testing.assert_array_equal(np.asarray(F.native_channel_shuffle(x, 3)),
                                  TF.native_channel_shuffle(torch.tensor(x), 3).numpy())


# F.<name>(*float inputs, *constant inputs, **kwargs): values and input gradients against torch
FUNCTIONAL_CASES = {
    "pixel_shuffle": lambda rng: ([rand(rng, 2, 8, 3, 5)], [], dict(upscale_factor=2)),
    "pixel_unshuffle": lambda rng: ([rand(rng, 2, 2, 6, 4)], [], dict(downscale_factor=2)),
    "channel_shuffle": lambda rng: ([rand(rng, 2, 6, 3, 3)], [], dict(groups=3)),
}


@pytest.mark.parametrize("case", FUNCTIONAL_CASES)
def test_functional_matches_torch(case, rng):
    floats, constants, kwargs = FUNCTIONAL_CASES[case](rng)
    check_by_name(case, floats, constants, kwargs)
