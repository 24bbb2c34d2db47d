"""PyTorch's loss `reduction` argument, shared by every loss function and module."""

import warnings

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


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """The `reduction` that PyTorch's deprecated `size_average` / `reduce` arguments mean,
    with torch's warning (`torch.nn._reduction.legacy_get_string`); either one, when
    given, overrides `reduction`, as in torch."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = ("mean" if size_average else "sum") if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction}' instead.", UserWarning, stacklevel=3)
    return reduction
