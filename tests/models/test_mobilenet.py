"""MobileNetV2 against its PyTorch twin."""

import pytest
from torch_twin import check_forward, check_twin, rand, registry_twin_pair

import jaxdl as dl
from jaxdl import models

pytestmark = pytest.mark.usefixtures("fast_compiles")


def test_mobilenet_v2_state_dict_names_are_torchvisions():
    sd = dl.memory.abstract_model(models.mobilenet_v2).state_dict()
    assert {"features.0.0.weight", "features.0.1.running_mean", "features.1.conv.0.0.weight",
            "features.1.conv.1.weight", "features.1.conv.2.bias", "features.2.conv.0.0.weight",
            "features.2.conv.1.0.weight", "features.2.conv.2.weight", "features.17.conv.3.bias",
            "features.18.0.weight", "features.18.1.num_batches_tracked", "classifier.1.weight"} <= set(sd)
    assert sd["features.2.conv.1.0.weight"].shape == (96, 1, 3, 3)  # depthwise over 16 * 6 channels
    assert sd["features.18.0.weight"].shape == (1280, 320, 1, 1)


def test_mobilenet_v2_matches_torch_twin(rng):
    """Train-mode forward (batch statistics, running updates), eval mode with gradients: depthwise
    convs, ReLU6, inverted residuals with and without the skip. (In train mode the projection
    BatchNorms' bias gradients are zero up to rounding: the next block's BatchNorm removes them.)"""
    twin, model = registry_twin_pair("mobilenet_v2", num_classes=5, width_mult=0.25, dropout=0.0)
    x = rand(rng, 2, 3, 64, 64)
    check_forward(twin, model, [x], mode="train", tol=1e-4)
    out = check_twin(twin, model, [x], modes=("eval",), jit=True, fwd_tol=1e-4, grad_tol=1e-3)
    assert out[0].shape == (2, 5)
