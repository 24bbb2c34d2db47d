"""Every piece of state a trace depends on besides arrays, in one registry.

Two kinds, one per lifetime:
- process-wide modes (no_grad depth, the autocast dtype, anomaly detection): named
  entries here, changed with `set(name, value)`. `key()` returns all their values
  as one tuple, rebuilt on each change, so reading it costs dl.jit nothing per call.
  A mode users set as a plain module attribute, as torch's flags are
  (`dl.backends.cpu.benchmark = False`), is `poll`ed instead: read at every key().
- settings of module trees (train/eval, hyper-parameters such as `Dropout.p`,
  memory policies and call hooks): every non-array attribute set on a module goes
  through `Store.configure` (see `_store.py`), which maps the tree's settings to
  the store's `version`.

`dl.jit`'s cache key is `key()` plus the version of every store it threads. A new
process-wide mode is declared here and is part of every key without touching dl.jit;
a new module setting is a module attribute and needs nothing at all.
"""

_values: dict = {}
_key: tuple = ()
_polled: dict = {}  # name -> function reading the current value


def declare(name: str, default):
    """Add a process-wide mode (at import of the module that owns it)."""
    if name in _values:
        raise ValueError(f"trace state {name!r} declared twice")
    _values[name] = default
    _rebuild()


def poll(name: str, read):
    """Add a process-wide mode kept elsewhere; `read()` gives its current value."""
    if name in _values or name in _polled:
        raise ValueError(f"trace state {name!r} declared twice")
    _polled[name] = read


def get(name: str):
    return _values[name]


def set(name: str, value):  # noqa: A001 - the registry's verb
    _values[name] = value
    _rebuild()


def key() -> tuple:
    """The current value of every process-wide mode, in declaration order."""
    if _polled:
        return _key + tuple(read() for read in _polled.values())
    return _key


def _rebuild():
    global _key
    _key = tuple(_values.values())


def token(value):
    """A hashable stand-in for an attribute value: equal tokens trace alike.

    Hashable values compare by value and type (so 1, 1.0 and True differ); the
    others (lists, dicts, ...) by identity, like the Python objects jax.jit
    closes over: mutating them in place is not seen, assigning a new one is.
    """
    try:
        hash(value)
    except TypeError:
        return _Identity(value)
    return (type(value), value)


class _Identity:
    """Compares by identity and keeps its object alive (so its id is never reused)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, _Identity) and other.value is self.value

    def __hash__(self):
        return id(self.value)
