"""PyTorch's deprecated `size_average` / `reduce` loss arguments: torch's meaning and deprecation
warning in every loss function and every nn.*Loss module that takes them (nn/_reduction.py)."""

import inspect
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import assert_close

import jaxdl.nn.functional as F
from jaxdl import nn


def _inputs(name, rng):
    """Arguments for the loss function `name` (numpy), valid for torch and jaxdl alike."""
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    sign = np.where(rng.random((4,)) < 0.5, -1.0, 1.0).astype(np.float32)
    labels = rng.integers(0, 5, (4,))
    probs = rng.random((4, 5)).astype(np.float32)
    log_probs = np.log(probs / probs.sum(1, keepdims=True))
    table = {
        "mse_loss": (x, y), "l1_loss": (x, y), "smooth_l1_loss": (x, y),
        "soft_margin_loss": (x, np.sign(y)),
        "binary_cross_entropy": (1 / (1 + np.exp(-x)), probs),
        "binary_cross_entropy_with_logits": (x, probs),
        "kl_div": (log_probs, probs / probs.sum(1, keepdims=True)),
        "poisson_nll_loss": (x, np.abs(y)),
        "multilabel_soft_margin_loss": (x, (probs > 0.5).astype(np.float32)),
        "cross_entropy": (x, labels), "nll_loss": (log_probs, labels),
        "margin_ranking_loss": (x[:, 0], y[:, 0], sign),
        "hinge_embedding_loss": (x, np.sign(y)),
        "cosine_embedding_loss": (x, y, sign),
        "triplet_margin_loss": (x, y, probs),
        "multi_margin_loss": (x, labels),
        "multilabel_margin_loss": (x, np.array([[1, 3, -1, 0, 0], [0, -1, 2, 2, 2],
                                                [4, 3, 2, 1, 0], [-1, 0, 0, 0, 0]])),
    }
    return table[name]


def _torch_value(x):
    return torch.from_numpy(np.asarray(x)).long() if np.asarray(x).dtype.kind == "i" \
        else torch.from_numpy(np.asarray(x))


LEGACY = [(None, False), (False, None), (True, False), (False, False), (False, True), (True, None),
          (None, True)]
LOSSES = [name for name in dir(torch.nn.functional) if name.endswith("_loss") or name in (
    "cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")]
LEGACY_LOSSES = sorted(name for name in LOSSES
                       if "size_average" in inspect.signature(getattr(torch.nn.functional, name)).parameters)


def test_every_torch_loss_with_the_legacy_arguments_is_covered():
    assert len(LEGACY_LOSSES) == 17
    for name in LEGACY_LOSSES:
        assert "size_average" in inspect.signature(getattr(F, name)).parameters, name


def _expected(size_average, reduce):
    """torch's own mapping, which prints its warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    return reduction, str(caught[0].message)


@pytest.mark.parametrize("name", LEGACY_LOSSES)
def test_loss_functions_map_size_average_and_reduce_as_torch(name, rng):
    args = _inputs(name, rng)
    for size_average, reduce in LEGACY:
        legacy = {"size_average": size_average, "reduce": reduce}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(torch.nn.functional, name)(*map(_torch_value, args), **legacy)
        reduction, message = _expected(size_average, reduce)
        with pytest.warns(UserWarning, match=message.replace("(", r"\(").replace(")", r"\)")):
            got = getattr(F, name)(*map(jnp.asarray, args), **legacy)
        assert_close(got, want, f"{name} {legacy} ({reduction})", tol=1e-5)
        same = getattr(F, name)(*map(jnp.asarray, args), reduction=reduction)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(same))


# nn.*Loss classes of jaxdl whose torch twin takes the legacy arguments, with their function
MODULES = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss",
           "SoftMarginLoss": "soft_margin_loss", "BCELoss": "binary_cross_entropy",
           "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div",
           "PoissonNLLLoss": "poisson_nll_loss",
           "MultiLabelSoftMarginLoss": "multilabel_soft_margin_loss",
           "CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss",
           "MarginRankingLoss": "margin_ranking_loss", "HingeEmbeddingLoss": "hinge_embedding_loss",
           "CosineEmbeddingLoss": "cosine_embedding_loss",
           "TripletMarginLoss": "triplet_margin_loss", "MultiMarginLoss": "multi_margin_loss",
           "MultiLabelMarginLoss": "multilabel_margin_loss"}
PRESENT = sorted(name for name in MODULES if hasattr(nn, name))


def test_every_module_with_the_legacy_arguments_is_covered():
    for name in dir(nn):
        cls = getattr(nn, name)
        if isinstance(cls, type) and name.endswith("Loss") and hasattr(torch.nn, name) and \
                "size_average" in inspect.signature(getattr(torch.nn, name)).parameters:
            assert name in MODULES, name


@pytest.mark.parametrize("name", PRESENT)
def test_loss_modules_accept_size_average_and_reduce_as_torch(name, rng):
    args = _inputs(MODULES[name], rng)
    for size_average, reduce in LEGACY:
        legacy = {"size_average": size_average, "reduce": reduce}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_loss = getattr(torch.nn, name)(**legacy)
        reduction, message = _expected(size_average, reduce)
        assert t_loss.reduction == reduction
        with pytest.warns(UserWarning, match=message.replace("(", r"\(").replace(")", r"\)")):
            loss = getattr(nn, name)(**legacy)
        assert loss.reduction == reduction
        assert_close(loss(*map(jnp.asarray, args)), t_loss(*map(_torch_value, args)),
                     f"{name} {legacy}", tol=1e-5)
