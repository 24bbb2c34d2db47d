"""jaxdl: the PyTorch experience as a thin imperative facade over pure JAX."""

from jaxdl import data, nn, ops, optim
from jaxdl._module import no_grad
from jaxdl._random import manual_seed
from jaxdl._transforms import checkpoint, grad, jit, value_and_grad, vmap

__all__ = [
    "checkpoint",
    "data",
    "grad",
    "jit",
    "manual_seed",
    "nn",
    "no_grad",
    "ops",
    "optim",
    "value_and_grad",
    "vmap",
]
__version__ = "0.1.0"
