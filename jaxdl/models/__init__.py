"""`jaxdl.models`: reference models, each registered by name (see `_registry.py`)."""

from jaxdl.models._digits import cnn, mlp  # importing registers them
from jaxdl.models._gnmt import gnmt
from jaxdl.models._gpt import gpt
from jaxdl.models._imagenet import alexnet, googlenet, overfeat, vgg11, vgg16, vgg19
from jaxdl.models._mobilenet import mobilenet_v2
from jaxdl.models._ncf import ncf
from jaxdl.models._registry import (
    ModelEntry,
    get_model,
    list_models,
    model_entry,
    models_for,
    register_model,
)
from jaxdl.models._resnet import resnet18, resnet50

__all__ = ["ModelEntry", "alexnet", "cnn", "get_model", "gnmt", "googlenet", "gpt", "list_models", "mlp",
           "mobilenet_v2", "model_entry", "models_for", "ncf", "overfeat", "register_model", "resnet18",
           "resnet50", "vgg11", "vgg16", "vgg19"]
