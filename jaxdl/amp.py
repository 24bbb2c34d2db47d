"""`dl.amp`: autocast (a global mixed-precision policy) and GradScaler (dynamic loss scaling).

autocast follows PyTorch's CUDA op lists: matmul-like ops (linear, conv,
attention matmuls) compute in the low dtype; softmax, log_softmax, norms and
losses in float32; parameters stay float32. The functional ops ask this module
with `amp.lower(...)` / `amp.full(...)`; the active dtype is the "autocast" entry
of the trace-state registry (`_trace_state.py`), so entering autocast compiles a
separate version under `dl.jit`.

PyTorch's CPU autocast lists differ (softmax, log_softmax and the norms stay
bfloat16 there); jaxdl uses the CUDA lists on every backend.
"""

import contextlib

import jax
import jax.numpy as jnp

from jaxdl import _trace_state
from jaxdl._convert import as_dtype
from jaxdl._store import STATE, Stateful, Store
from jaxdl._tracing import is_traced

_policy: list = []  # stack of active dtypes (None where autocast(enabled=False))
_trace_state.declare("autocast", None)


def policy_key():
    """The active autocast dtype's name (None when off), as the trace-state registry keeps it."""
    dtype = _policy[-1] if _policy else None
    return None if dtype is None else jnp.dtype(dtype).name


def _active():
    return _policy[-1] if _policy else None


def _cast(arrays, dtype, only):
    out = tuple(
        x.astype(dtype) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) and only(x)
        else x
        for x in arrays
    )
    return out[0] if len(out) == 1 else out


def lower(*arrays):
    """Arrays for a matmul-like op: cast floating arrays to the autocast dtype (when active)."""
    dtype = _active()
    if dtype is None:
        return arrays[0] if len(arrays) == 1 else arrays
    return _cast(arrays, dtype, lambda x: True)


def full(*arrays):
    """Arrays for a precision-sensitive op: cast 16-bit floats to float32 (when active)."""
    if _active() is None:
        return arrays[0] if len(arrays) == 1 else arrays
    return _cast(arrays, jnp.float32, lambda x: jnp.finfo(x.dtype).bits < 32)


class autocast(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """`with dl.amp.autocast(dtype=jnp.bfloat16):` mixed precision, as `torch.autocast`.

    Arguments:
        device_type: accepted for ported code ("cuda", "cpu"); the policy is the same.
        dtype: `jnp.bfloat16` (default) or `jnp.float16` (torch's dtypes work too).
        enabled: False turns autocast off inside an enclosing autocast region.
    """

    def __init__(self, device_type: str = "cuda", dtype=jnp.bfloat16, enabled: bool = True,
                 cache_enabled=None):
        if not isinstance(device_type, str):  # autocast(jnp.bfloat16) or autocast(torch.float16)
            device_type, dtype = "cuda", device_type
        dtype = as_dtype(dtype)
        if dtype not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
            raise ValueError(f"autocast dtype must be bfloat16 or float16, got {dtype}")
        self.device_type, self.dtype, self.enabled = device_type, dtype, bool(enabled)

    def __enter__(self):
        _policy.append(self.dtype if self.enabled else None)
        _trace_state.set("autocast", policy_key())
        return self

    def __exit__(self, *exc):
        _policy.pop()
        _trace_state.set("autocast", policy_key())
        return False


class GradScaler(Stateful):
    """Dynamic loss scaling with `torch.amp.GradScaler`'s semantics, usable inside `dl.jit`.

    Gradients are return values here, so `unscale_` returns the unscaled
    gradients and `step(opt, grads)` takes them::

        scaled = scaler.scale(loss)              # inside the differentiated function
        scaler.step(opt, grads)                  # unscale, skip if any inf/nan
        scaler.update()                          # grow or back off the scale

    The scale, the growth tracker and the inf flag found since the last
    `update()` live in array slots, so all of this works inside a compiled
    step; a skipped step is selected away with `jnp.where` (no recompile).
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if growth_factor <= 1.0:
            raise ValueError(f"growth_factor should be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"backoff_factor should be in (0, 1), got {backoff_factor}")
        if not isinstance(growth_interval, int) or growth_interval <= 0:
            raise ValueError(f"growth_interval should be a positive int, got {growth_interval}")
        self._enabled = enabled
        self._growth_factor, self._backoff_factor = growth_factor, backoff_factor
        self._growth_interval = growth_interval
        self._store = Store()
        self._store.owners.add(self)
        self._slots = {
            "scale": self._store.add(jnp.asarray(init_scale, jnp.float32), STATE),
            "growth_tracker": self._store.add(jnp.zeros((), jnp.int32), STATE),
            "found_inf": self._store.add(jnp.zeros((), jnp.float32), STATE),
        }
        # Per-optimizer inf flags of the current step, from unscale_ to step (torch keeps
        # the same per-optimizer record); the sum also goes to the found_inf slot for update().
        self._found_per_optimizer: dict[int, object] = {}

    def _rebase(self, store, offset):
        self._store = store
        self._slots = {k: i + offset for k, i in self._slots.items()}

    def _read(self, name):
        return self._store.read(self._slots[name])

    def _write(self, name, value):
        self._store.write(self._slots[name], jnp.asarray(value, self._store.values[self._slots[name]].dtype))

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs):
        """outputs * scale (any pytree), keeping each output's dtype."""
        if not self._enabled:
            return outputs
        scale = self._read("scale")
        return jax.tree.map(lambda x: x * scale.astype(x.dtype), outputs)

    def unscale_(self, optimizer, grads):
        """Divide `grads` by the scale and record whether any is inf/nan; returns them."""
        if not self._enabled:
            return grads
        if id(optimizer) in self._found_per_optimizer:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        inv_scale = 1.0 / self._read("scale")
        leaves = [g for g in jax.tree.leaves(grads) if g is not None]
        found = jnp.zeros((), jnp.float32)
        for g in leaves:
            found = jnp.maximum(found, jnp.logical_not(jnp.all(jnp.isfinite(g))).astype(jnp.float32))
        self._found_per_optimizer[id(optimizer)] = found
        self._write("found_inf", self._read("found_inf") + found)
        return jax.tree.map(lambda g: (g * inv_scale).astype(g.dtype), grads)

    def step(self, optimizer, grads):
        """`optimizer.step(grads)` with unscaled gradients, skipped when any is inf/nan."""
        if not self._enabled:
            return optimizer.step(grads)
        if id(optimizer) not in self._found_per_optimizer:
            grads = self.unscale_(optimizer, grads)
        found = self._found_per_optimizer[id(optimizer)]
        if not is_traced(found):
            if not float(found):
                optimizer.step(grads)
            return None
        store = optimizer._store
        before = list(store.values)
        optimizer.step(grads)
        skip = found > 0
        for index, (old, new) in enumerate(zip(before, store.values)):
            if new is not old:
                store.values[index] = jnp.where(skip, old, new)
        return None

    def update(self, new_scale=None):
        """Back off the scale after a skipped step, grow it after `growth_interval` good ones."""
        if not self._enabled:
            return
        self._found_per_optimizer.clear()
        if new_scale is not None:
            self._write("scale", new_scale)
            self._write("found_inf", 0.0)
            return
        scale, tracker = self._read("scale"), self._read("growth_tracker")
        found = self._read("found_inf") > 0
        successful = tracker + 1
        grow = successful == self._growth_interval
        grown = scale * self._growth_factor
        grown = jnp.where(jnp.isfinite(grown), grown, scale)
        self._write("scale", jnp.where(found, scale * self._backoff_factor,
                                       jnp.where(grow, grown, scale)))
        self._write("growth_tracker", jnp.where(found | grow, 0, successful))
        self._write("found_inf", 0.0)

    def get_scale(self):
        """The current scale: a float eagerly (1.0 when disabled), an array inside a trace."""
        if not self._enabled:
            return 1.0
        scale = self._read("scale")
        return scale if is_traced(scale) else float(scale)

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def state_dict(self) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": int(self._read("growth_tracker"))}

    def load_state_dict(self, state_dict: dict):
        if not self._enabled:
            return
        expected = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
        if set(state_dict) != expected:
            raise ValueError(f"GradScaler.load_state_dict: expected keys {sorted(expected)}, got "
                             f"{sorted(state_dict)}")
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._store.bump()  # the factors are compile-time constants of traced steps
        self._write("scale", float(state_dict["scale"]))
        self._write("growth_tracker", int(state_dict["_growth_tracker"]))
