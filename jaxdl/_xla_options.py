"""The XLA compiler options `dl.jit` compiles its steps with.

On CPU, XLA (jax 0.10) hands some operations to YNNPACK. Measured on this
project's machine (docs/design.md), YNNPACK wins for matrix products and
reductions (softmax+top-k 3.4x faster with them) but loses for convolutions
(2-3x slower than XLA's own Eigen kernels) and elementwise fusions (a GELU
gradient 7x slower). So `dl.jit` keeps YNNPACK for dots and reductions only.

A training step donates its weights, and XLA's default copy insertion then
copied every weight read by an input-gradient product (which no update
depends on) before updating it in place: AlexNet's 12 such weights, 234 MB a
step at 224 px. Region-based copy insertion proves those reads finish first
and drops the copies (docs/design.md, "Donated weights copied every step").

A user who sets an option in XLA_FLAGS keeps theirs.
"""

import functools
import os

import jax
import jax.numpy as jnp

_YNN_FUSIONS = "xla_cpu_experimental_ynn_fusion_type"
_REGION_COPIES = "xla_cpu_copy_insertion_use_region_analysis"
_CPU_OPTIONS = {
    _YNN_FUSIONS: ",".join("LIBRARY_FUSION_TYPE_" + kind for kind in ("INDIVIDUAL_DOT", "DOT", "REDUCE")),
    _REGION_COPIES: True,
}


def xla_compiler_options() -> dict | None:
    """Options for `jax.jit(..., compiler_options=...)`: what `dl.jit` uses, for your own
    `jax.jit` calls. None where there is nothing to change (not on CPU, every option set
    in XLA_FLAGS, or an XLA that knows none of them)."""
    if jax.default_backend() != "cpu":
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    options = {name: value for name, value in _CPU_OPTIONS.items()
               if name not in flags and _xla_accepts(name, value)}
    return options or None


@functools.cache
def _xla_accepts(name, value) -> bool:
    """Whether this XLA knows the option (experimental names come and go): one tiny compile."""
    try:
        jax.jit(jnp.negative, compiler_options={name: value}).lower(1.0).compile()
    except Exception:  # XLA reports an unknown option or value as a generic runtime error
        return False
    return True
