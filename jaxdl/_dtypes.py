"""The dtype jaxdl computes in: float32 for float32 and narrower inputs (bfloat16, float16),
float64 for float64 inputs (x64), as PyTorch's CPU kernels accumulate."""

import jax.numpy as jnp


def accumulation_dtype(dtype):
    return jnp.promote_types(dtype, jnp.float32)
