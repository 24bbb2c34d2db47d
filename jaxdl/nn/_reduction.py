"""PyTorch's loss `reduction` argument, shared by every loss function."""

import jax.numpy as jnp

from jaxdl.ops._dispatch import REDUCTIONS  # noqa: F401 (re-exported to the losses)


def reduce_loss(loss, reduction: str):
    """Mean, sum, or the unreduced per-element loss."""
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction={reduction!r} is not valid; use one of {REDUCTIONS}")
