"""The flat state store behind every module tree and optimizer.

All arrays of a module tree (parameters, buffers, key streams) and of the
optimizers built on it live in one Python list, `Store.values`. Modules keep
only slot indices. `dl.jit` hands the whole list to the compiled function and
swaps in the returned one: O(1) Python work per step, however many arrays.

`version` changes whenever something a trace depends on changes (a slot added,
a shape or dtype changed, freezing, or a setting: any non-array attribute of a
module, train/eval included, see `_trace_state.py`), so compiled code is reused
exactly while it is still valid. Settings going back to values they had go back
to the version they had, so alternating train/eval does not compile again.

Arrays handed out to the user (attribute reads, `state_dict()`, `parameters()`)
are remembered in `lent`: `dl.jit` donates a copy of those slots instead, so a
kept array stays readable and keeps its value after later compiled steps.
"""

import itertools
import weakref

import jax
import numpy as np

PARAM, BUFFER, RNG, STATE = "param", "buffer", "rng", "state"
_UNSET = object()

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
        self.settings: dict = {}  # (id(owner), attribute) -> _trace_state.token(value)
        self._signature = None  # frozenset(settings.items()) at `version`, when known
        self._by_settings: dict = {}  # settings signature -> its version, since the last bump()
        self.lent: set[int] = set()  # slots whose current array the user may hold
        self.merged_into: Store | None = None
        # Made while tracing (a loss module built inside the step): rebuilt by every trace
        # from the same code, so its settings cannot go stale and it needs no key entry.
        self.transient = bool(_contexts)

    def live(self) -> "Store":
        """The store this one was merged into (itself if never merged)."""
        store = self
        while store.merged_into is not None:
            store = store.merged_into
        return store

    def bump(self):
        self.version = next(_versions)
        self._signature = None
        self._by_settings.clear()

    def configure(self, changes):
        """Apply settings `[((id(owner), attribute), token)]`; when any differs, the version
        becomes the one these settings had (since the last structural change) or a new one."""
        settings = self.settings
        changed = [(key, token) for key, token in changes if settings.get(key, _UNSET) != token]
        if not changed:
            return
        if self._signature is None:
            self._signature = frozenset(settings.items())
        self._by_settings.setdefault(self._signature, self.version)
        settings.update(changed)
        self._signature = frozenset(settings.items())
        self.version = self._by_settings.setdefault(self._signature, next(_versions))

    def add(self, value, kind: str, trainable: bool = False) -> int:
        self.values.append(value)
        self.kinds.append(kind)
        self.trainable.append(trainable)
        self.bump()
        return len(self.values) - 1

    def read(self, index: int):
        if _contexts:
            _check_visible(self)
        else:
            self.lent.add(index)
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
        self.settings.update(other.settings)
        self.lent.update(i + offset for i in other.lent)
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
# The contexts among them whose compiled result is cached (dl.jit): a module called
# inside must have its store in the cache key even when it holds no arrays (a loss
# module's hyper-parameters, captured by a closure), so it is threaded too.
_keyed: list[set] = []


class UnthreadedStore(Exception):  # noqa: N818 - control flow, never reaches users
    def __init__(self, store: Store, context: set):
        super().__init__("internal: state read inside a transform that does not thread it")
        self.store = store
        self.context = context


# Parameter slots written on purpose inside a forward pass, one set per running
# dl.value_and_grad (innermost last): torch's in-place updates under no_grad (Embedding's
# max_norm renormalisation) persist, while other parameters get back the arrays the forward saw.
kept_writes: list[set] = []


def keep_write(store: Store, index: int):
    """Slot `index` of `store` was written inside the forward pass and keeps the new value."""
    for kept in kept_writes:
        kept.add((store, index))


def _check_visible(store: Store):
    for context in _contexts:
        if store not in context:
            raise UnthreadedStore(store, context)


def observe(store: Store):
    """A module of `store` is called inside the running trace (a no-op outside traces)."""
    if store.transient:
        return
    for context in _keyed:
        if store not in context:
            raise UnthreadedStore(store, context)


class tracing_context:  # noqa: N801 - used like a function
    """Marks `stores` as threaded through the trace running inside this block; `keyed`
    when the trace is cached under the stores' versions (dl.jit)."""

    def __init__(self, stores, keyed: bool = False):
        self.stores = set(stores)
        self.keyed = keyed

    def __enter__(self):
        _contexts.append(self.stores)
        if self.keyed:
            _keyed.append(self.stores)
        return self.stores

    def __exit__(self, *exc):
        _contexts.pop()
        if self.keyed:
            _keyed.pop()
        return False


class Stateful:
    """An object whose arrays live in a `Store` (modules, optimizers, schedulers, scalers).

    Transforms thread the store of every `Stateful` argument through the trace.
    """

    _store: Store

    def _rebase(self, store: Store, offset: int):
        """Called when this object's store is merged into `store` at `offset`."""
        raise NotImplementedError
