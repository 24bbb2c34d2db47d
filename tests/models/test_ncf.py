"""NCF against its PyTorch twin."""

import pytest
from torch_twin import check_twin, count_parameters, registry_twin_pair

import jaxdl as dl
from jaxdl import models

pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.mark.parametrize("dropout,mode", [(0.0, "train"), (0.5, "eval")])
def test_ncf_matches_torch_twin(dropout, mode, rng):
    """One logit per (user, item) pair; gradients reach both towers' embeddings and layers."""
    twin, model = registry_twin_pair("ncf", num_users=30, num_items=40, mf_dim=4, mlp_layers=(16, 8, 4),
                             dropout=dropout)
    users, items = rng.integers(0, 30, 12), rng.integers(0, 40, 12)
    out = check_twin(twin, model, [users, items], modes=(mode,), jit=True)
    assert out[0].shape == (12,)


def test_ncf_default_size_is_the_papers_movielens_setting():
    users, items, mf, mlp = 6040, 3706, 8, (64, 32, 16, 8)
    expected = ((users + items) * (mf + mlp[0] // 2) + sum(a * b + b for a, b in zip(mlp, mlp[1:]))
                + mf + mlp[-1] + 1)
    assert expected == 392_601
    twin = models.model_entry("ncf").torch_twin()
    assert count_parameters(dl.memory.abstract_model(models.ncf)) == count_parameters(twin) == expected
