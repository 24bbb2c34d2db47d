"""`jaxdl.models`: reference models, each registered by name (see `_registry.py`)."""

from jaxdl.models._digits import cnn, mlp  # importing registers them
from jaxdl.models._registry import (
    ModelEntry,
    get_model,
    list_models,
    model_entry,
    register_model,
)

__all__ = ["ModelEntry", "cnn", "get_model", "list_models", "mlp", "model_entry",
           "register_model"]
