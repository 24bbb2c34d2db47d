"""The optimizer base: PyTorch's interface over state kept in the model's store.

An optimizer joins the store of the parameters it updates, and keeps its own
arrays (per-parameter state, the learning rate of each group) there too, so a
`dl.jit` step threads model and optimizer as one list. Learning rates live in
array slots: changing `param_groups[i]["lr"]` (by hand or by a scheduler)
never recompiles. Other options are compile-time constants; changing them
recompiles once.
"""

import math
from collections.abc import MutableMapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._gradients import Gradients
from jaxdl._module import Module, Parameters
from jaxdl._store import STATE, Stateful, join

# Options that live in array slots (traced, changeable without recompiling).
DYNAMIC_OPTIONS = ("lr",)


def _check_lr(lr):
    if isinstance(lr, jax.core.Tracer):
        return
    if not math.isfinite(float(lr)) or float(lr) < 0:
        raise ValueError(f"Invalid learning rate: lr={lr} (must be finite and >= 0)")


class ParamGroup(MutableMapping):
    """One entry of `optimizer.param_groups`: a dict of options plus its parameters."""

    def __init__(self, optimizer: "Optimizer", slots: list[int], options: dict):
        self._optimizer = optimizer
        self.slots = slots
        self._static = {}
        self._dynamic = {}
        self._written = {}  # last Python value written to each dynamic option
        store = optimizer._store
        for name, value in options.items():
            if name in DYNAMIC_OPTIONS:
                _check_lr(value)
                self._dynamic[name] = store.add(jnp.asarray(value, jnp.float32), STATE)
                self._written[name] = value
            else:
                self._static[name] = value

    def _rebase(self, offset):
        self.slots = [i + offset for i in self.slots]
        self._dynamic = {k: i + offset for k, i in self._dynamic.items()}

    def __getitem__(self, key):
        if key == "params":
            return [self._optimizer._store.values[i] for i in self.slots]
        if key in self._dynamic:
            value = self._optimizer._store.read(self._dynamic[key])
            if isinstance(value, jax.core.Tracer):
                return value
            # Show 0.001, not its float32 rounding, unless a trace changed it since.
            written = self._written.get(key)
            return written if np.float32(written) == value else float(value)
        return self._static[key]

    def __setitem__(self, key, value):
        store = self._optimizer._store
        if key == "params":
            raise KeyError("param_groups[i]['params'] cannot be reassigned; build a new optimizer")
        if key in self._dynamic:
            _check_lr(value)
            store.write(self._dynamic[key], jnp.asarray(value, jnp.float32))
            if not isinstance(value, jax.core.Tracer):
                self._written[key] = float(value)
        else:
            self._static[key] = value
            store.bump()  # a compile-time constant changed

    def __delitem__(self, key):
        raise KeyError(f"param group options cannot be deleted ({key!r})")

    def __iter__(self):
        yield "params"
        yield from self._dynamic
        yield from self._static

    def __len__(self):
        return 1 + len(self._dynamic) + len(self._static)

    def options(self) -> dict:
        """Every option, dynamic ones as arrays (tracers inside a trace)."""
        store = self._optimizer._store
        return {**self._static, **{k: store.read(i) for k, i in self._dynamic.items()}}

    def __repr__(self):
        shown = {k: self[k] for k in self if k != "params"}
        return f"ParamGroup({len(self.slots)} params, {shown})"


def _param_refs(params) -> list:
    """(module, name) of every parameter in `params` (what `model.parameters()` returns)."""
    if isinstance(params, Parameters):
        return list(params.refs)
    if isinstance(params, list | tuple) and all(isinstance(p, Parameters) for p in params):
        return [ref for p in params for ref in p.refs]
    raise TypeError(
        "optimizer params must be model.parameters() (or a list of param-group dicts whose "
        f"'params' are), got {type(params).__name__}; plain arrays do not say which module "
        "they belong to"
    )


class Optimizer(Stateful):
    """Base class: subclasses define `_init_state` and `_update` for one parameter."""

    def __init__(self, params, defaults: dict):
        if isinstance(params, dict):
            params = [params]
        groups = list(params) if isinstance(params, list) and params and isinstance(params[0], dict) \
            else [{"params": params}]
        refs_per_group = [_param_refs(g["params"]) for g in groups]
        modules = [m for refs in refs_per_group for m, _ in refs]
        if not modules:
            raise ValueError("optimizer got an empty parameter list")
        self._store = join(*[m._store for m in modules])
        self._store.owners.add(self)
        self.defaults = dict(defaults)
        self.param_groups: list[ParamGroup] = []
        self._state: dict[int, dict[str, int]] = {}
        seen = set()
        for group, refs in zip(groups, refs_per_group):
            unknown = set(group) - set(defaults) - {"params"}
            if unknown:
                raise ValueError(
                    f"unknown option(s) {sorted(unknown)} for {type(self).__name__}; "
                    f"valid: {sorted(defaults)}"
                )
            slots = [m._slots[n] for m, n in refs]
            if seen.intersection(slots):
                raise ValueError("some parameters appear in more than one parameter group")
            seen.update(slots)
            options = {**defaults, **{k: v for k, v in group.items() if k != "params"}}
            self._validate(options)
            pg = ParamGroup(self, slots, options)
            self.param_groups.append(pg)
            for index in slots:
                state = self._init_state(self._store.values[index], options)
                self._state[index] = {k: self._store.add(v, STATE) for k, v in state.items()}

    def _rebase(self, store, offset):
        self._store = store
        for group in self.param_groups:
            group._rebase(offset)
        self._state = {i + offset: {k: j + offset for k, j in s.items()} for i, s in self._state.items()}

    def _validate(self, options: dict):
        """Raise ValueError naming any invalid option value (subclasses extend)."""

    def _init_state(self, param, options: dict) -> dict:
        raise NotImplementedError

    def _update(self, param, grad, state: dict, options: dict):
        """One parameter's step: returns (new_param, new_state)."""
        raise NotImplementedError

    # ---- the PyTorch interface ----------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True):
        """Kept for ported code: jaxdl gradients are return values, never accumulated."""

    def _grads_by_slot(self, grads) -> dict:
        if isinstance(grads, Gradients):
            return {grads.slots[k]: g for k, g in grads.items()}
        if not isinstance(grads, dict):
            raise TypeError(f"opt.step expects the gradient dict from dl.grad, got {type(grads).__name__}")
        names = {}
        for owner in list(self._store.owners):
            if isinstance(owner, Module) and not owner._path:
                for qualified, module, name in owner._named_slots("_params"):
                    names.setdefault(qualified, module._slots[name])
        unknown = [k for k in grads if k not in names]
        if unknown:
            raise KeyError(
                f"gradients for unknown parameter(s) {unknown}; expected keys like "
                f"{list(names)[:5]} (named_parameters() of the model)"
            )
        return {names[k]: g for k, g in grads.items()}

    def step(self, grads, closure=None):
        """Update every parameter that has a gradient in `grads` (from `dl.grad`)."""
        if closure is not None:
            raise NotImplementedError("step(closure) is not supported: pass the gradients")
        by_slot = self._grads_by_slot(grads)
        store = self._store
        for group in self.param_groups:
            options = group.options()
            for index in group.slots:
                grad = by_slot.get(index)
                if grad is None or not store.trainable[index]:
                    continue
                param = store.read(index)
                if grad.shape != param.shape:
                    raise ValueError(
                        f"gradient of shape {tuple(grad.shape)} for a parameter of shape "
                        f"{tuple(param.shape)}"
                    )
                slots = self._state[index]
                state = {k: store.read(i) for k, i in slots.items()}
                new_param, new_state = self._update(param, grad.astype(param.dtype), state, options)
                store.write(index, new_param.astype(param.dtype))
                for k, i in slots.items():
                    store.write(i, new_state[k].astype(state[k].dtype))

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {group[k]}" for k in sorted(group) if k != "params")
        return "\n".join(lines) + "\n)"
