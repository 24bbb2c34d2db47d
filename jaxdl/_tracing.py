"""Whether values are being traced (inside jax.jit, grad, vmap): how code tells a compiled call
from an eager one."""

import jax


def is_traced(*values) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in values)
