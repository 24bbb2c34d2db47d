"""The online normalizer (Milakov & Gimelshein 2018): pairs (m, d) = (max, sum exp(x - m)).

Pairs merge associatively: (m1, d1) + (m2, d2) = (M, d1 exp(m1 - M) + d2 exp(m2 - M)),
M = max(m1, m2). A row whose entries are all -inf keeps m = -inf and d = 0; exponents
are taken against `safe_shift(m)` (0 there) so no -inf - -inf = nan enters d.
"""

import jax.numpy as jnp


def safe_shift(m):
    """The max to subtract inside exp: m, or 0 where the max is -inf (an empty row so far)."""
    return jnp.where(m == -jnp.inf, 0.0, m)


def merge_md(m, d, axis):
    """Merge the (m, d) pairs along `axis` into one pair per row."""
    total_m = jnp.max(m, axis=axis)
    shift = jnp.expand_dims(safe_shift(total_m), axis)
    return total_m, jnp.sum(d * jnp.exp(m - shift), axis=axis)


def lse(m, d):
    """log sum exp from a merged pair: -inf for a row of -inf, as jax.nn.logsumexp."""
    return m + jnp.log(d)
