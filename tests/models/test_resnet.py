"""ResNet-18/50 against their PyTorch twins; parameter counts of the torchvision models (ResNet,
MobileNetV2)."""

import pytest
import torch
from torch_twin import check_forward, check_twin, count_parameters, rand, registry_twin_pair

import jaxdl as dl
from jaxdl import models
from jaxdl.models import _resnet

# torchvision's published parameter counts (1000 classes).
TORCHVISION_PARAMS = {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenet_v2": 3_504_872}

pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_parameter_counts_match_torchvision(name):
    model = dl.memory.abstract_model(models.get_model, name)
    twin = models.model_entry(name).torch_twin()
    assert count_parameters(model) == count_parameters(twin) == TORCHVISION_PARAMS[name]
    assert list(model.state_dict()) == list(twin.state_dict())


def test_resnet_state_dict_names_are_torchvisions():
    r18 = dl.memory.abstract_model(models.resnet18).state_dict()
    r50 = dl.memory.abstract_model(models.resnet50).state_dict()
    assert {"conv1.weight", "bn1.running_var", "layer1.1.conv2.weight", "layer2.0.downsample.0.weight",
            "layer4.1.bn2.num_batches_tracked", "fc.weight", "fc.bias"} <= set(r18)
    assert "layer1.0.downsample.0.weight" not in r18  # 64 -> 64 channels at stride 1: no shortcut conv
    assert {"layer1.0.downsample.1.running_mean", "layer3.5.conv3.weight",
            "layer4.2.bn3.bias"} <= set(r50)
    assert r50["layer4.0.conv2.weight"].shape == (512, 512, 3, 3)
    assert r50["fc.weight"].shape == (1000, 2048)


def test_resnet18_matches_torch_twin(rng):
    """Train mode (batch statistics, running updates, gradients of every parameter), then eval.

    64x64 keeps 2x2 maps in layer4: at 1x1 with batch 2, train-mode BatchNorm amplifies float32
    rounding past 1e-4 (torch in float32 itself is that far from float64 there)."""
    twin, model = registry_twin_pair("resnet18", num_classes=5, width=0.25)
    x = rand(rng, 2, 3, 64, 64)
    check_twin(twin, model, [x], modes=("train",), jit=True, fwd_tol=1e-4, grad_tol=1e-3)
    assert check_forward(twin, model, [x], tol=1e-4)[0].shape == (2, 5)


def test_resnet50_matches_torch_twin(rng):
    """The full-depth network forward in eval mode; gradients through every Bottleneck variant
    (channel-changing shortcut at stride 1 and 2, identity shortcut) on a 1-2-1-1 block stack."""
    twin, model = registry_twin_pair("resnet50", num_classes=5, width=0.125)
    assert check_forward(twin, model, [rand(rng, 2, 3, 64, 64)], tol=1e-4)[0].shape == (2, 5)
    torch.manual_seed(0)
    twin = _resnet.TORCH().ResNet("bottleneck", (1, 2, 1, 1), num_classes=5, width=0.125)
    model = dl.memory.abstract_model(_resnet.JAXDL.ResNet, "bottleneck", (1, 2, 1, 1), num_classes=5,
                                     width=0.125)
    check_twin(twin, model, [rand(rng, 2, 3, 64, 64)], modes=("train",), jit=True, fwd_tol=1e-4,
               grad_tol=1e-3)
