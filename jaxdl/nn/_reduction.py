"""PyTorch's loss `reduction` argument, shared by every loss function."""

import jax.numpy as jnp

REDUCTIONS = ("none", "mean", "sum")


def reduce_loss(loss, reduction: str):
    """Mean, sum, or the unreduced per-element loss."""
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction={reduction!r} is not valid; use one of {REDUCTIONS}")
