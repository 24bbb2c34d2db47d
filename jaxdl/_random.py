"""Global seed and key streams.

PyTorch draws weights from one global generator; `manual_seed` makes them
reproducible. jaxdl keeps the same habit on top of explicit JAX keys: a global
base key plus a counter, folded together for each draw, so that construction
order (not wall-clock or device) decides every weight.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._tracing import is_traced

_base_key = None
_counter = itertools.count()


def manual_seed(seed: int):
    """Seed the global key stream used by module constructors and `nn.init`."""
    global _base_key, _counter
    if not isinstance(seed, int | np.integer):
        raise TypeError(f"manual_seed expects an int, got {type(seed).__name__}")
    _base_key = jax.random.key(int(seed))
    _counter = itertools.count()
    return _base_key


def next_key():
    """A fresh key from the global stream (seeded with 0 unless `manual_seed` was called)."""
    if _base_key is None:
        manual_seed(0)
    return jax.random.fold_in(_base_key, next(_counter))


class KeyStream:
    """Keys for one constructor: split from `key` when given, else from the global stream."""

    def __init__(self, key=None):
        if key is not None and not isinstance(key, jax.Array):
            raise TypeError(f"key must be a jax.random key, got {type(key).__name__}")
        self._key = key
        self._count = itertools.count()

    def __call__(self):
        if self._key is None:
            return next_key()
        return jax.random.fold_in(self._key, next(self._count))


# Weight initialisation draws. Eager jax.random compiles one program per new shape
# (~0.15 s each: 20 s to build GoogLeNet); numpy seeded from the key's bits draws
# the same distribution at once. Under a trace (a key that is a tracer) jax.random
# is used, so constructors stay traceable.
def _numpy_generator(key):
    if is_traced(key):
        return None
    return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())


def uniform(key, shape, dtype, low: float, high: float):
    """U(low, high) samples of `shape`, as a jax array of `dtype`."""
    rng = _numpy_generator(key)
    if rng is None:
        return jax.random.uniform(key, shape, jnp.float32, low, high).astype(dtype)
    return jnp.asarray(rng.uniform(low, high, shape).astype(np.float32), dtype)


def normal(key, shape, dtype):
    """Standard normal samples of `shape`, as a jax array of `dtype`."""
    rng = _numpy_generator(key)
    if rng is None:
        return jax.random.normal(key, shape, jnp.float32).astype(dtype)
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32), dtype)
