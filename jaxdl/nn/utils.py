"""`nn.utils`: gradient clipping and flat parameter vectors.

Gradients are return values here (the dict `dl.grad` gives), so the clipping
functions return the clipped gradients instead of editing `.grad` in place.
"""

import collections.abc
import math

import jax
import jax.numpy as jnp

from jaxdl._module import Parameters
from jaxdl._tracing import is_traced


def _leaves(grads) -> list:
    return [g for g in jax.tree.leaves(grads) if g is not None]


def _check_gradients(grads, function: str, arguments: str):
    """torch's form passes `model.parameters()`; here gradients are values: show the jaxdl form."""
    if isinstance(grads, Parameters) or isinstance(grads, collections.abc.Iterator):
        raise TypeError(
            f"nn.utils.{function} takes the gradients, not the parameters (jaxdl gradients are "
            f"return values, not .grad fields): grads = dl.grad(loss_fn)(model); "
            f"grads{', norm' if function == 'clip_grad_norm_' else ''} = "
            f"nn.utils.{function}(grads, {arguments})"
        )


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False):
    """Norm of all arrays of a pytree together, as if concatenated (torch's get_total_norm)."""
    leaves = list(tensors) if isinstance(tensors, Parameters) else _leaves(tensors)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    norm_type = float(norm_type)
    if norm_type == math.inf:
        total = jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in leaves]))
    else:
        norms = jnp.stack([jnp.linalg.norm(g.ravel(), norm_type) for g in leaves])
        total = jnp.linalg.norm(norms, norm_type)
    if not error_if_nonfinite:
        return total
    if is_traced(total):
        # A compiled step cannot stop halfway with the state as it was, as torch does; refuse
        # rather than let a non-finite norm through silently.
        raise RuntimeError(
            "error_if_nonfinite=True cannot be honoured inside a compiled or transformed function "
            "(dl.jit, dl.vmap, ...): check the returned total norm after the step "
            "(jnp.isfinite(norm)), let dl.amp.GradScaler skip non-finite steps, or clip eagerly"
        )
    if not jnp.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients is non-finite, so it cannot be "
            "clipped. Pass error_if_nonfinite=False to clip anyway."
        )
    return total


def clip_grad_norm_(grads, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None):
    """Scale `grads` so that their total norm is at most `max_norm`.

    Arguments:
        grads: the gradient dict from `dl.grad` (any pytree of arrays).
        max_norm: the largest allowed total norm.
        norm_type: p of the p-norm (`float("inf")` for the max norm).
        error_if_nonfinite: raise when the norm is inf/nan (eagerly; inside `dl.jit` this
            raises at trace time, since a compiled step cannot stop halfway).

    Returns:
        `(clipped_grads, total_norm)`: the same structure as `grads` scaled by
        `min(1, max_norm / (total_norm + 1e-6))` (torch's formula), and the
        norm before clipping.
    """
    _check_gradients(grads, "clip_grad_norm_", f"max_norm={max_norm}")
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    scale = jnp.minimum(max_norm / (total + 1e-6), 1.0)
    clipped = jax.tree.map(lambda g: (g * scale).astype(g.dtype), grads)
    return clipped, total


def clip_grad_value_(grads, clip_value: float, foreach=None):
    """Clamp every gradient entry to [-clip_value, clip_value]; returns the clipped gradients."""
    _check_gradients(grads, "clip_grad_value_", f"clip_value={clip_value}")
    return jax.tree.map(lambda g: jnp.clip(g, -clip_value, clip_value), grads)


def parameters_to_vector(parameters):
    """One flat vector of all parameters (or arrays), in iteration order."""
    return jnp.concatenate([jnp.ravel(p) for p in parameters])


def vector_to_parameters(vec, parameters: Parameters):
    """Write slices of `vec` into the parameters of `model.parameters()`, in order."""
    if not isinstance(parameters, Parameters):
        raise TypeError(
            "vector_to_parameters needs model.parameters() (it writes into the modules), got "
            f"{type(parameters).__name__}"
        )
    sizes = [getattr(m, n).size for m, n in parameters.refs]
    if vec.ndim != 1 or vec.shape[0] != sum(sizes):
        raise ValueError(
            f"vector_to_parameters: expected a vector of {sum(sizes)} elements, got shape "
            f"{tuple(vec.shape)}"
        )
    offset = 0
    for (module, name), size in zip(parameters.refs, sizes):
        old = getattr(module, name)
        setattr(module, name, vec[offset:offset + size].reshape(old.shape).astype(old.dtype))
        offset += size
