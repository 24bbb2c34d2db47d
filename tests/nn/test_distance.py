"""Distances and the margin/embedding losses of nn/_distance.py against PyTorch."""

import numpy as np
import pytest
import torch.nn.functional as TF
from functional_oracle import check_by_name, check_functional, positive, signs
from torch_twin import rand

import jaxdl.nn.functional as F


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


# F.<name>(*float inputs, *constant inputs, **kwargs): values and input gradients against torch
FUNCTIONAL_CASES = {
    "cosine_similarity": lambda rng: ([rand(rng, 4, 5), rand(rng, 4, 5)], [], dict(dim=1)),
    "pairwise_distance": lambda rng: ([rand(rng, 4, 5), rand(rng, 4, 5)], [], dict(p=3.0)),
    "pdist": lambda rng: ([rand(rng, 5, 4)], [], dict(p=2.0)),
    "cosine_embedding_loss": lambda rng: ([rand(rng, 6, 5), rand(rng, 6, 5)], [signs(rng, 6)],
                                          dict(margin=0.2)),
    "hinge_embedding_loss": lambda rng: ([rand(rng, 6, 5)], [signs(rng, 6, 5)], dict(margin=0.5)),
    # entries at the margin: torch's clamp_min passes the whole gradient there
    "hinge_embedding_loss-at-margin": lambda rng: ([np.array([0.5, 0.5, -1.0, 2.0], np.float32)],
                                                    [np.array([-1.0, 1.0, -1.0, -1.0], np.float32)],
                                                    dict(margin=0.5)),
    "margin_ranking_loss": lambda rng: ([rand(rng, 7), rand(rng, 7)], [signs(rng, 7)], dict(margin=0.1)),
    "soft_margin_loss": lambda rng: ([rand(rng, 4, 5)], [signs(rng, 4, 5)], {}),
    "multilabel_soft_margin_loss": lambda rng: ([rand(rng, 4, 5)],
                                                [(rng.random((4, 5)) < 0.5).astype(np.float32)], {}),
    "poisson_nll_loss": lambda rng: ([rand(rng, 4, 5)], [positive(rng, 4, 5) * 3], dict(full=True)),
    "gaussian_nll_loss": lambda rng: ([rand(rng, 4, 5), rand(rng, 4, 5), positive(rng, 4, 5)], [],
                                      dict(full=True)),
    "triplet_margin_loss": lambda rng: ([rand(rng, 4, 5), rand(rng, 4, 5), rand(rng, 4, 5)], [],
                                        dict(margin=0.5, swap=True)),
    "multi_margin_loss": lambda rng: ([rand(rng, 4, 6)], [rng.integers(0, 6, 4)],
                                      dict(p=2, margin=0.7,
                                           weight=np.linspace(0.5, 1.5, 6).astype(np.float32))),
    "multilabel_margin_loss": lambda rng: (
        [rand(rng, 3, 5)], [np.array([[3, 0, -1, 1, 4], [1, 2, 3, 4, 0], [-1, 2, 2, 1, 0]])], {}),
    "multilabel_margin_loss-1d-none": lambda rng: ([rand(rng, 4)], [np.array([2, 2, -1, 0])],
                                                   dict(reduction="none")),
    "triplet_margin_with_distance_loss": lambda rng: ([rand(rng, 4, 5), rand(rng, 4, 5), rand(rng, 4, 5)], [],
                                                      dict(margin=0.7, swap=True, reduction="sum")),
}


@pytest.mark.parametrize("case", FUNCTIONAL_CASES)
def test_functional_matches_torch(case, rng):
    floats, constants, kwargs = FUNCTIONAL_CASES[case](rng)
    check_by_name(case, floats, constants, kwargs)


def _f32(*values):
    return np.asarray(values, np.float32)


# inputs that put each loss exactly on its kink, where autodiff of abs, max or min differs
# from torch: l1's derivative at 0 is sign(0) = 0, clamp_min(z, 0)'s passes at z = 0, the
# margin kernels' `if (z > 0)` does not; gaussian_nll clamps var without stopping its gradient
KINK_CASES = {
    "l1_loss": ([_f32(0, 1, 2, 3), _f32(0, 1, 0, 5)], [], dict(reduction="sum")),
    "smooth_l1_loss": ([_f32(0, 1, 2, 3), _f32(0, 1, 0, 5)], [], dict(beta=0.0)),
    "margin_ranking_loss": ([_f32(1, 2, 0), _f32(0, 2, 1)], [_f32(-1, 1, -1)],
                            dict(margin=1.0, reduction="sum")),
    "multi_margin_loss": ([np.asarray([[1, 0, 2], [0, 0, 0]], np.float32)],
                          [np.asarray([0, 1])], dict(reduction="sum")),
    "multilabel_margin_loss": ([np.asarray([[1, 0, 2]], np.float32)],
                               [np.asarray([[0, -1, -1]])], {}),
    "gaussian_nll_loss": ([_f32(0.5, 1.0), _f32(0.0, 0.0), _f32(1e-8, 0.5)], [], {}),
}


@pytest.mark.parametrize("name", KINK_CASES)
def test_loss_gradient_at_its_kink_matches_torch(name):
    floats, constants, kwargs = KINK_CASES[name]
    check_functional(getattr(F, name), getattr(TF, name), floats, constants, kwargs)
