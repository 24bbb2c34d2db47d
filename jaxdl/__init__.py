"""jaxdl: the PyTorch experience as a thin imperative facade over pure JAX."""

from jaxdl import _heap  # noqa: F401, I001 - first: it sets malloc up before jax is imported
from jaxdl import accelerator, amp, backends, cuda, data, distributed, interop, memory, nn, ops, optim
from jaxdl._anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from jaxdl._checkpoint import load, save
from jaxdl._module import no_grad
from jaxdl._random import manual_seed
from jaxdl._transforms import checkpoint, grad, jit, value_and_grad, vmap
from jaxdl._xla_options import xla_compiler_options

__all__ = [
    "accelerator",
    "amp",
    "backends",
    "checkpoint",
    "cuda",
    "data",
    "detect_anomaly",
    "distributed",
    "grad",
    "interop",
    "is_anomaly_enabled",
    "jit",
    "load",
    "manual_seed",
    "memory",
    "nn",
    "no_grad",
    "ops",
    "optim",
    "save",
    "set_detect_anomaly",
    "value_and_grad",
    "vmap",
    "xla_compiler_options",
]
__version__ = "0.1.0"
