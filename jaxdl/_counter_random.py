"""Counter-based random bits for dropout: a hash of (seed, row, column), not a stream.

`jax.random.bernoulli` (threefry) costs about 10 ms per million draws on one CPU core,
as much as the rest of a small transformer's dropout layers' work many times over (a
GPT step at dropout 0.1 spent 100 of its 360 ms there, 2026-11-30). Two rounds of
MurmurHash3's finaliser per element cost 0.5 ms per million. The key still decides
everything: its bits seed the hash, so the same key gives the same mask, eagerly and
compiled, and the flash-attention kernels regenerate a tile's mask in the backward
from its indices alone.

Each element's 32 bits come from fmix32(fmix32(seed ^ row * c1) + column): rows are the
flattened leading axes. Dropout needs P(keep) = 1 - p per element (to 2^-32) and no
visible structure; two rows whose mixed starts land within one row length of each other
share some decisions (about one element in ten thousand of a 2048 x 512 mask), which
dropout's regularisation cannot notice.
"""

import math

import jax
import jax.numpy as jnp
from jax import lax


def fmix32(x):
    """MurmurHash3's 32-bit finaliser: a bijection on uint32 that mixes every bit."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def stream_seed(seeds, stream):
    """One uint32 seed per stream index (an attention head, say) from a key's two words."""
    return fmix32(seeds[0] + stream.astype(jnp.uint32) * jnp.uint32(0x9E3779B9)) ^ seeds[1]


def keep_mask(seed, rows, cols, p):
    """Which (row, col) entries dropout keeps, P(keep) = 1 - p: a pure function of the
    indices. `seed` broadcasts against rows (the per-row part is mixed once) and cols."""
    row_part = fmix32(seed ^ (rows.astype(jnp.uint32) * jnp.uint32(0x27D4EB2F)))
    bits = fmix32(row_part + cols.astype(jnp.uint32))
    return bits >= jnp.uint32(min(int(round(p * 2.0**32)), 2**32 - 1))


def bernoulli_keep(key, shape, p):
    """A keep mask of `shape` (True with probability 1 - p) drawn from the jax key."""
    seed = stream_seed(jax.random.bits(key, (2,), jnp.uint32), jnp.uint32(0))
    shape = tuple(shape)
    lead, last = math.prod(shape[:-1]), (shape[-1] if shape else 1)
    rows = lax.broadcasted_iota(jnp.uint32, (lead, 1), 0)
    cols = lax.broadcasted_iota(jnp.uint32, (1, last), 1)
    return keep_mask(seed, rows, cols, p).reshape(shape)
