"""The flat state store behind every module tree and optimizer.

All arrays of a module tree (parameters, buffers, key streams) and of the
optimizers built on it live in one Python list, `Store.values`. Modules keep
only slot indices. `dl.jit` hands the whole list to the compiled function and
swaps in the returned one: O(1) Python work per step, however many arrays.

`version` changes whenever something a trace depends on changes (a slot added,
a shape or dtype changed, train/eval, freezing), so compiled code is reused
exactly while it is still valid. Switching modes (train/eval) goes back to the
version that mode had, so alternating them does not compile again.
"""

import itertools
import weakref

import jax
import numpy as np

PARAM, BUFFER, RNG, STATE = "param", "buffer", "rng", "state"

_versions = itertools.count(1)


def is_array(value) -> bool:
    return isinstance(value, jax.Array | np.ndarray | np.generic)


class Store:
    """One list of arrays shared by every object of a tree, with per-slot metadata."""

    def __init__(self):
        self.values: list = []
        self.kinds: list[str] = []
        self.trainable: list[bool] = []
        self.shardings: dict[int, jax.sharding.Sharding] = {}  # slots placed by fully_shard
        self.owners = weakref.WeakSet()
        self.version = next(_versions)
        self._modes: dict = {}  # mode signature -> its version, since the last bump()
        self.merged_into: Store | None = None

    def live(self) -> "Store":
        """The store this one was merged into (itself if never merged)."""
        store = self
        while store.merged_into is not None:
            store = store.merged_into
        return store

    def bump(self):
        self.version = next(_versions)
        self._modes.clear()

    def switch_mode(self, before, after):
        """Record that a mode signature (e.g. the train/eval flags) went from `before` to
        `after` without changing the structure: the version becomes the one `after` had,
        or a new one."""
        self._modes.setdefault(before, self.version)
        self.version = self._modes.setdefault(after, next(_versions))

    def add(self, value, kind: str, trainable: bool = False) -> int:
        self.values.append(value)
        self.kinds.append(kind)
        self.trainable.append(trainable)
        self.bump()
        return len(self.values) - 1

    def read(self, index: int):
        if _contexts:
            _check_visible(self)
        return self.values[index]

    def write(self, index: int, value):
        if _contexts:
            _check_visible(self)
        old = self.values[index]
        if old is not None and (old.shape != value.shape or old.dtype != value.dtype):
            self.bump()
        self.values[index] = value

    def absorb(self, other: "Store"):
        """Move every slot of `other` into this store and repoint its owners."""
        other = other.live()
        if other is self:
            return
        offset = len(self.values)
        self.values.extend(other.values)
        self.kinds.extend(other.kinds)
        self.trainable.extend(other.trainable)
        self.shardings.update({i + offset: s for i, s in other.shardings.items()})
        for owner in list(other.owners):
            owner._rebase(self, offset)
            self.owners.add(owner)
        other.values, other.kinds, other.trainable, other.shardings = [], [], [], {}
        other.merged_into = self
        self.bump()


def join(*stores: Store) -> Store:
    """Merge stores into one (the first) and return it."""
    first = stores[0].live()
    for store in stores[1:]:
        first.absorb(store)
    return first


# Transform contexts (dl.jit, dl.grad, ...) currently tracing, outermost first,
# each with the set of stores it threads through as explicit inputs. A store
# read inside a trace that some context does not thread would be baked in as a
# constant (stale weights) or leak tracers on write; instead the outermost such
# context learns it and traces again.
_contexts: list[set] = []


class UnthreadedStore(Exception):  # noqa: N818 - control flow, never reaches users
    def __init__(self, store: Store, context: set):
        super().__init__("internal: state read inside a transform that does not thread it")
        self.store = store
        self.context = context


def _check_visible(store: Store):
    for context in _contexts:
        if store not in context:
            raise UnthreadedStore(store, context)


class tracing_context:  # noqa: N801 - used like a function
    """Marks `stores` as threaded through the trace running inside this block."""

    def __init__(self, stores):
        self.stores = set(stores)

    def __enter__(self):
        _contexts.append(self.stores)
        return self.stores

    def __exit__(self, *exc):
        _contexts.pop()
        return False


class Stateful:
    """An object whose arrays live in a `Store` (modules, optimizers, schedulers, scalers).

    Transforms thread the store of every `Stateful` argument through the trace.
    """

    _store: Store

    def _rebase(self, store: Store, offset: int):
        """Called when this object's store is merged into `store` at `offset`."""
        raise NotImplementedError
