"""The vDNN paper's networks (jaxdl.models) against their PyTorch twins and torchvision's figures."""

import jax.numpy as jnp
import pytest
import torch
from torch_twin import check_twin, rand

import jaxdl as dl
from jaxdl import models

# Parameter counts torchvision publishes for its models (docs' "num_params"); OverFeat "fast"
# has 145.9M (Sermanet et al. 2014 report ~145M).
TORCHVISION_PARAMS = {
    "alexnet": 61_100_840,
    "vgg11": 132_863_336,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "googlenet": 6_624_904,
}


# (model, builder kwargs, input size, batch): small widths and resolutions that still reach the
# head; GoogLeNet's last blocks are 1x1, so its train-mode BatchNorm needs a few samples.
SMALL = [
    ("alexnet", dict(width=0.25), 64, 2),
    ("overfeat", dict(width=0.125), 79, 2),
    ("vgg11", dict(width=0.125), 32, 2),
    pytest.param("googlenet", dict(width=0.25, aux_logits=True, dropout_aux=0.0), 32, 4,
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_parameter_counts_match_torchvision(name):
    model = dl.memory.abstract_model(models.get_model, name)
    count = sum(int(p.size) for _, p in model.named_parameters())
    assert count == TORCHVISION_PARAMS[name]


def test_googlenet_aux_and_overfeat_sizes():
    aux = dl.memory.abstract_model(models.googlenet, aux_logits=True)
    assert sum(int(p.size) for _, p in aux.named_parameters()) == 13_004_888  # torchvision
    overfeat = dl.memory.abstract_model(models.overfeat)
    assert 145e6 < sum(int(p.size) for _, p in overfeat.named_parameters()) < 147e6


@pytest.mark.parametrize("name", ["alexnet", "vgg16", "googlenet"])
def test_state_dict_names_are_torchvisions(name):
    keys = list(dl.memory.abstract_model(models.get_model, name).state_dict())
    expected = {
        "alexnet": ["features.0.weight", "features.3.weight", "features.10.bias",
                    "classifier.1.weight", "classifier.4.weight", "classifier.6.bias"],
        "vgg16": ["features.0.weight", "features.28.bias", "classifier.0.weight",
                  "classifier.3.weight", "classifier.6.bias"],
        "googlenet": ["conv1.conv.weight", "conv1.bn.running_var", "conv3.bn.num_batches_tracked",
                      "inception3a.branch1.conv.weight", "inception3a.branch2.1.conv.weight",
                      "inception4e.branch4.1.bn.bias", "inception5b.branch3.1.conv.weight",
                      "fc.weight", "fc.bias"],
    }[name]
    assert set(expected) <= set(keys), sorted(set(expected) - set(keys))


@pytest.mark.parametrize("name,kwargs,size,batch", SMALL)
def test_small_models_match_torch_twins(name, kwargs, size, batch, rng):
    """Train mode (batch statistics, running-statistic updates; GoogLeNet's aux heads too).

    Against torch in float64: GoogLeNet's BatchNorms over four 1x1 maps put torch's own float32
    output about 5e-5 from float64, so float32 against float32 compared rounding at 1e-4."""
    kwargs = dict(kwargs, num_classes=7, dropout=0.0)
    torch.manual_seed(0)
    twin = models.model_entry(name).torch_twin(**kwargs)
    # Weights come from the twin (check_twin loads them): skip the slow eager initialisation.
    model = dl.memory.abstract_model(models.get_model, name, **kwargs)
    assert list(model.state_dict()) == list(twin.state_dict())
    out = check_twin(twin, model, [rand(rng, batch, 3, size, size)], modes=("train",), jit=True,
                     fwd_tol=1e-4, grad_tol=1e-3, float64_drift=3.0)
    assert len(out) == (3 if kwargs.get("aux_logits") else 1)


def test_bad_input_names_the_layer():
    model = dl.memory.abstract_model(models.alexnet, width=0.125, num_classes=3)  # fails before any weight
    with pytest.raises(ValueError, match=r"features\.0 \(Conv2d\).*size 3 on axis 1"):
        model(jnp.ones((1, 4, 64, 64)))
