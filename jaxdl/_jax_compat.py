"""Every JAX name jaxdl uses from outside `jax`'s stable public API, in one place.

JAX promises stability for `jax.*` names only; `jax._src` is private, and
`jax.extend` / `jax.experimental` change between releases (0.11 removed a
batch of `jax.core` names, for example). Everything of that kind that jaxdl
needs is reached through this module, with a fallback where a release moved or
dropped the name, so a new JAX release breaks (at most) this file, and
`tests/test_jax_compat.py` says which function.

Checked against jax 0.10.2 (installed) and jax's source at 0.11.x.
"""

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils, pallas
from jax.experimental.pallas import triton as pallas_triton
from jax.extend import core as jaxpr_core
from jax.extend import source_info_util
from jax.extend.core.primitives import name_p

__all__ = [
    "HOST_MEMORY", "backends_started", "called_function", "gather_replicated", "host_local_to_global",
    "innermost_scope",
    "jaxpr_core",  # ClosedJaxpr, Literal, jaxprs_in_params (left jax.core in 0.11)
    "name_p",  # the primitive `checkpoint_name` binds
    "pallas", "pallas_triton",  # Pallas exists only under jax.experimental
    "varying_axes",
]

# The memory space of host-offloaded values (public as `jax.memory.Space`).
HOST_MEMORY = jax.memory.Space.Host

# A named scope (`jax.named_scope`) in a name stack; jax.extend exports NameStack but not the
# class of its entries, so take it from a stack built through the public function.
_SCOPE = type(source_info_util.new_name_stack("scope").stack[0])


def innermost_scope(name_stack) -> str | None:
    """The innermost `jax.named_scope` of an equation's name stack (transforms skipped), or None."""
    for entry in reversed(name_stack.stack):
        if isinstance(entry, _SCOPE):
            return entry.name
    return None


def called_function(eqn) -> str | None:
    """The name of the function a `jax.jit` or `jax.custom_jvp` call equation calls, else None.

    A jit equation names it in its params; a custom_jvp call only in its jaxpr's debug info.
    """
    if "call_jaxpr" in eqn.params and "jvp_jaxpr_fun" in eqn.params:
        debug = getattr(eqn.params["call_jaxpr"].jaxpr, "debug_info", None)
        return getattr(debug, "func_name", None)
    name = eqn.params.get("name")
    return name if isinstance(name, str) and "jaxpr" in eqn.params else None


def backends_started() -> bool:
    """Whether jax has created its backends (its CPU client reads its options then)."""
    from jax._src import xla_bridge

    started = getattr(xla_bridge, "backends_are_initialized", None)
    return started() if started is not None else bool(getattr(xla_bridge, "_backends", True))


def varying_axes(x) -> frozenset | None:
    """The manual mesh axes `x` varies over inside `shard_map`, or None where JAX does not say.

    jax 0.10 removed `aval.vma` for `aval.manual_axis_type.varying`.
    """
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    varying = getattr(mat, "varying", None) if mat is not None else getattr(aval, "vma", None)
    return None if varying is None else frozenset(varying)


try:  # an all-gather typed as replicated over the axis (jax >= 0.7; not exported by jax.lax)
    from jax._src.lax.parallel import all_gather_invariant as _all_gather_invariant
except ImportError:  # pragma: no cover - a release that moved it: the psum form below
    _all_gather_invariant = getattr(jax.lax, "all_gather_invariant", None)


def gather_replicated(x, axis, *, use_private: bool = True):
    """Concatenate every shard's `x` along axis 0, typed as replicated over `axis`.

    `lax.all_gather` types its result as varying, which `shard_map(out_specs=P())`
    refuses; without JAX's `all_gather_invariant`, psum the shards placed at their
    offsets (replicated by construction, the same values).
    """
    if use_private and _all_gather_invariant is not None:
        return _all_gather_invariant(x, axis, tiled=True)
    index = jax.lax.axis_index(axis)
    n = jax.lax.psum(1, axis)
    placed = jnp.zeros((n * x.shape[0], *x.shape[1:]), x.dtype)
    placed = jax.lax.dynamic_update_slice_in_dim(placed, x, index * x.shape[0], 0)
    return jax.lax.psum(placed, axis)


def host_local_to_global(x, mesh, spec):
    """One global array from each process's local slice (`jax.experimental.multihost_utils`)."""
    return multihost_utils.host_local_array_to_global_array(x, mesh, spec)
