"""`dl.detect_anomaly()` / `dl.set_detect_anomaly(True)`, and index checks shared by the layers.

Eagerly, out-of-range indices raise IndexError with torch's message (the values
are concrete, so they are simply looked at). Inside a compiled step they are
tracers: there, with anomaly detection on, `dl.jit` compiles the step under
`jax.experimental.checkify` and the layers add checks:
- every module's floating outputs are finite, naming the module,
- every gradient `dl.grad` returns is finite, naming the parameter,
- indices are in range (embedding, one_hot, class labels of the losses).
checkify keeps the first failing check in program order, so the error names the
first layer where a NaN/inf appeared. Anomaly detection is a trace-state entry
(a separate compilation) and turns donation off, so a failing step leaves the
model and optimizer as they were before it.
"""

import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from jaxdl import _trace_state
from jaxdl._tracing import is_traced

_trace_state.declare("detect_anomaly", False)

# Set while dl.jit traces a step under checkify: checks can be emitted.
_checkified = [False]
# Descriptions of the modules whose forward is being run, innermost last.
_layers: list[str] = []
# Exception class of each check message emitted (IndexError for indices).
_kinds: dict[str, type] = {}


class detect_anomaly(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """Like `torch.autograd.detect_anomaly()`: inside, eager and compiled steps raise at the
    first NaN/inf (naming the layer or parameter) and at out-of-range indices."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = bool(check_nan)

    def __enter__(self):
        self._previous = _trace_state.get("detect_anomaly")
        _trace_state.set("detect_anomaly", self.check_nan)
        return self

    def __exit__(self, *exc):
        _trace_state.set("detect_anomaly", self._previous)
        return False


def set_detect_anomaly(mode: bool):
    """Like `torch.autograd.set_detect_anomaly`: turn anomaly detection on or off globally."""
    _trace_state.set("detect_anomaly", bool(mode))


def is_anomaly_enabled() -> bool:
    return _trace_state.get("detect_anomaly")


def _where() -> str:
    return _layers[-1] + ": " if _layers else ""


def check(ok, message: str, kind: type = RuntimeError, *fmt_args):
    """Raise `kind(message)` where `ok` is False: now if `ok` is concrete, at the end of the
    compiled step if it is traced under anomaly detection; otherwise (traced without
    checkify) nothing can be checked."""
    message = _where() + message
    if not is_traced(ok):
        if not bool(np.all(np.asarray(ok))):
            raise kind(message.format(*(np.asarray(a).ravel()[0] for a in fmt_args)))
    elif _checkified[0]:
        _kinds[message] = kind
        checkify.check(jnp.all(ok), message, *fmt_args)


def check_indices(indices, high: int, message: str, ignore_index=None):
    """Indices must lie in [0, high), except entries equal to `ignore_index` (IndexError).
    `message` may hold {} for the first bad value."""
    if not is_traced(indices):
        values = np.asarray(indices)
        bad = (values < 0) | (values >= high)
        if ignore_index is not None:
            bad &= values != ignore_index
        if bad.any():
            raise IndexError(_where() + message.format(values[bad].ravel()[0]))
    elif _checkified[0]:
        bad = (indices < 0) | (indices >= high)
        if ignore_index is not None:
            bad &= indices != ignore_index
        first = jnp.where(jnp.any(bad), indices.ravel()[jnp.argmax(bad.ravel())], 0)
        check(~jnp.any(bad), message, IndexError, first)


def finite_outputs(out, what: str):
    """Under anomaly detection: every floating array in `out` is finite."""
    for leaf in jax.tree.leaves(out):
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact):
            check(jnp.all(jnp.isfinite(leaf)), f"{what} contains NaN or inf")


def call_checked(description: str, run):
    """Run a module's forward with its outputs checked (anomaly detection on)."""
    _layers.append(description)
    try:
        out = run()
        finite_outputs(out, "output")
        return out
    finally:
        _layers.pop()


def checkified(pure):
    """`pure` with its checks functionalised: returns (error, result)."""

    def run(*args):
        _checkified[0] = True
        try:
            return pure(*args)
        finally:
            _checkified[0] = False

    return checkify.checkify(run, errors=checkify.user_checks)


def raise_error(err):
    """Raise the first failed check of a checkified step as the exception it was declared as."""
    text = err.get()
    if text is None:
        return
    kind = next((k for m, k in _kinds.items() if text.startswith(m.split("{}")[0])), RuntimeError)
    raise kind(re.sub(r" \((`check` failed|check failed at).*$", "", text, flags=re.S))
