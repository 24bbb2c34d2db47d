"""One model description, two frameworks: the jaxdl model and its PyTorch twin.

A model file writes its classes once, in a function `define(nn, F, ops)` over a
layer namespace (`jaxdl.nn` or `torch.nn`), its functional module and the few
tensor operations whose spelling differs between jax.numpy and torch (`ops`).
`two_frameworks(define)` returns the jaxdl classes, built now, and a cached
function that builds the torch classes on first use (torch stays optional).
Both sides then share module names, registration order (state_dict keys) and
the forward computation, so weights copy one to one.
"""

import functools
import types

import jax.numpy as jnp

from jaxdl import nn as jnn
from jaxdl._extras import require

JAX_OPS = types.SimpleNamespace(
    cat=lambda xs, dim: jnp.concatenate(xs, axis=dim),
    # (N, T, ...) -> positions 0..T-1, for position embeddings.
    positions=lambda tokens: jnp.arange(tokens.shape[1]),
    # (T, T) bool, True above the diagonal: "may not attend" (PyTorch's bool-mask convention).
    causal_mask=lambda x: jnp.triu(jnp.ones((x.shape[1], x.shape[1]), bool), 1),
    masked_fill=lambda x, mask, value: jnp.where(mask, value, x),
    tanh=jnp.tanh,
)


def _torch_ops():
    torch = require("torch", "torch", "a model's PyTorch twin")

    def causal_mask(x):
        return torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)

    return types.SimpleNamespace(
        cat=lambda xs, dim: torch.cat(xs, dim),
        positions=lambda tokens: torch.arange(tokens.shape[1], device=tokens.device),
        causal_mask=causal_mask,
        masked_fill=lambda x, mask, value: x.masked_fill(mask, value),
        tanh=torch.tanh,
    )


def two_frameworks(define):
    """(jaxdl classes, cached `() -> torch classes`) from one `define(nn, F, ops)`."""

    @functools.cache
    def torch_classes():
        torch = require("torch", "torch", "a model's PyTorch twin")

        return define(torch.nn, torch.nn.functional, _torch_ops())

    return define(jnn, jnn.functional, JAX_OPS), torch_classes


def twin_builder(torch_classes, name, **fixed):
    """A registry `torch_twin`: `(**kwargs) -> torch_classes().<name>(**fixed, **kwargs)`."""
    return lambda **kwargs: getattr(torch_classes(), name)(**fixed, **kwargs)
