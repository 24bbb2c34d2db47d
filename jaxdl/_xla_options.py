"""The XLA compiler options `dl.jit` compiles its steps with.

On CPU, XLA (jax 0.10) hands some operations to YNNPACK. Measured on this
project's machine (docs/design.md), YNNPACK wins for matrix products and
reductions (softmax+top-k 3.4x faster with them) but loses for convolutions
(2-3x slower than XLA's own Eigen kernels) and elementwise fusions (a GELU
gradient 7x slower). So `dl.jit` keeps YNNPACK for dots and reductions only. A
user who sets the option in XLA_FLAGS keeps theirs.
"""

import functools
import os

import jax
import jax.numpy as jnp

_YNN_FUSIONS = "xla_cpu_experimental_ynn_fusion_type"
_CPU_OPTIONS = {_YNN_FUSIONS: ",".join("LIBRARY_FUSION_TYPE_" + kind for kind in
                                          ("INDIVIDUAL_DOT", "DOT", "REDUCE"))}


def xla_compiler_options() -> dict | None:
    """Options for `jax.jit(..., compiler_options=...)`: what `dl.jit` uses, for your own
    `jax.jit` calls. None where there is nothing to change (not on CPU, the option set
    in XLA_FLAGS, or an XLA that does not know it)."""
    if jax.default_backend() != "cpu" or _YNN_FUSIONS in os.environ.get("XLA_FLAGS", ""):
        return None
    return dict(_CPU_OPTIONS) if _xla_accepts_cpu_options() else None


@functools.cache
def _xla_accepts_cpu_options() -> bool:
    """Whether this XLA knows the option (its enum names are experimental): one tiny compile."""
    try:
        jax.jit(jnp.negative, compiler_options=_CPU_OPTIONS).lower(1.0).compile()
    except Exception:  # XLA reports an unknown option or value as a generic runtime error
        return False
    return True
