"""The optimizer base: PyTorch's interface over state kept in the model's store.

An optimizer joins the store of the parameters it updates, and keeps its own
arrays (per-parameter state, the learning rate of each group) there too, so a
`dl.jit` step threads model and optimizer as one list. Learning rates live in
array slots: changing `param_groups[i]["lr"]` (by hand or by a scheduler)
never recompiles. Other options are compile-time constants (Python floats, as
precise as PyTorch's doubles); changing them recompiles once. A scheduler that
changes another float option every step (OneCycleLR's momentum / betas) first
moves it into a slot with `ParamGroup.make_dynamic`.
"""

import math
import warnings
from collections.abc import MutableMapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._gradients import Gradients
from jaxdl._module import Module, Parameters, to_numpy
from jaxdl._store import STATE, Stateful, join
from jaxdl._tracing import is_traced

# Options that always live in array slots (traced, changeable without recompiling).
DYNAMIC_OPTIONS = ("lr",)
# Options PyTorch keeps in its param groups that do not change the math here.
INERT_DEFAULTS = dict(foreach=None, capturable=False, differentiable=False, fused=None)


def _check_lr(lr):
    if is_traced(lr):
        return
    if isinstance(lr, bool) or not isinstance(lr, int | float | np.floating | np.integer | jax.Array):
        raise ValueError(f"Invalid learning rate: lr={lr!r} (must be a number)")
    if not math.isfinite(float(lr)) or float(lr) < 0:
        raise ValueError(f"Invalid learning rate: lr={lr} (must be finite and >= 0)")


def _log(base):
    """log(base), in double precision for a Python `base` (a compile-time option): float32(0.999)
    is 1.3e-5 off in `1 - base`, which PyTorch's double-precision bias corrections and
    schedules do not see."""
    if isinstance(base, float | int):
        return math.log(base) if base > 0 else -math.inf
    return jnp.log(base)


def power(base, t):
    """base ** t for a float32 step count `t`, accurate for bases near 1."""
    return jnp.exp(t * _log(base))


def one_minus_power(base, t):
    """1 - base ** t (bias corrections), without cancellation."""
    return -jnp.expm1(t * _log(base))


class ParamGroup(MutableMapping):
    """One entry of `optimizer.param_groups`: a dict of options plus its parameters."""

    def __init__(self, optimizer: "Optimizer", slots: list[int], options: dict):
        self._optimizer = optimizer
        self.slots = slots
        self._static = {}
        self._dynamic = {}
        self._written = {}  # last Python value written to each dynamic option
        for name, value in options.items():
            if name in DYNAMIC_OPTIONS:
                _check_lr(value)
                self._add_slot(name, value)
            else:
                self._static[name] = value

    def _add_slot(self, name, value):
        self._dynamic[name] = self._optimizer._store.add(_as_slot(value), STATE)
        self._written[name] = value

    def make_dynamic(self, name: str):
        """Move a float (or tuple of floats, e.g. betas) option into an array slot.

        Afterwards, writing it never recompiles; the option then has float32
        precision inside the update (one recompile now, as the store grows).
        """
        if name in self._dynamic:
            return
        if name not in self._static:
            raise KeyError(f"{type(self._optimizer).__name__} has no option {name!r}")
        self._add_slot(name, self._static.pop(name))
        self._optimizer._extend_state(self)

    def _rebase(self, offset):
        self.slots = [i + offset for i in self.slots]
        self._dynamic = {k: i + offset for k, i in self._dynamic.items()}

    def __getitem__(self, key):
        if key == "params":
            return [self._optimizer._store.read(i) for i in self.slots]
        if key in self._dynamic:
            value = self._optimizer._store.read(self._dynamic[key])
            if value.ndim:  # a tuple option such as betas
                return tuple(value) if is_traced(value) else _shown(self._written[key], value)
            if is_traced(value):
                return value
            return _shown(self._written[key], value)
        return self._static[key]

    def __setitem__(self, key, value):
        store = self._optimizer._store
        if key == "params":
            raise KeyError("param_groups[i]['params'] cannot be reassigned; build a new optimizer")
        if key in self._dynamic:
            if key == "lr":
                _check_lr(value)
            store.write(self._dynamic[key], _as_slot(value))
            concrete = not any(is_traced(v) for v in jax.tree.leaves(value))
            if concrete:
                self._written[key] = value
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
        out = dict(self._static)
        for k, i in self._dynamic.items():
            value = store.read(i)
            out[k] = tuple(value[j] for j in range(value.shape[0])) if value.ndim else value
        return out

    def __repr__(self):
        shown = {k: self[k] for k in self if k != "params"}
        return f"ParamGroup({len(self.slots)} params, {shown})"


def _as_slot(value):
    if isinstance(value, tuple | list):
        return jnp.stack([jnp.asarray(v, jnp.float32) for v in value])
    return jnp.asarray(value, jnp.float32)


def _shown(written, value):
    """The Python value last written (0.001, not its float32 rounding), unless a trace changed it."""
    if isinstance(written, tuple | list):
        if np.array_equal(np.asarray(written, np.float32), np.asarray(value)):
            return tuple(written)
        return tuple(float(v) for v in np.asarray(value))
    return written if np.float32(written) == value else float(value)


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


def _evaluate_closure(closure):
    """(loss, grads) from a `step(closure)` closure, or a TypeError that shows the jaxdl form."""
    result = closure()
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        return result
    raise TypeError(
        f"opt.step(closure): the closure returned {type(result).__name__}, expected (loss, grads). "
        "jaxdl has no loss.backward(): gradients are return values, so a closure computes and "
        "returns them, e.g. closure = lambda: dl.value_and_grad(loss_fn)(model)"
    )


def _check_nonnegative(options: dict, *names):
    for name in names:
        value = options[name]
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"Invalid {name} value: {value!r} (must be finite and >= 0)")


def _check_betas(options: dict):
    betas = options["betas"]
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"Invalid betas: {betas} (two values, each in [0, 1))")


class Optimizer(Stateful):
    """Base class: subclasses define `_init_state` and `_update` for one parameter.

    `state_dict()` uses PyTorch's layout and state names, so a torch
    optimizer's state dict loads here and ours loads into torch.
    """

    # PyTorch creates per-parameter state lazily at the first step (Adagrad: at
    # construction); state_dict() leaves out what torch would not have yet.
    _state_at_construction = False
    # The inert options torch's param groups carry for this optimizer (kept for state dicts).
    _inert = ("foreach", "capturable", "differentiable", "fused")
    # An optimizer whose update is written as `_new_state` and `_param_update` stores the
    # state of a parameter whose minor axis is shorter than a vector (`_flat`) flat (1-D) and
    # updates it on flat views: XLA's CPU loop over a conv weight (O, C, 3, 3) runs scalar
    # code along its minor axis of 3, a loop that writes a 1-D array runs vector code. The
    # parameter keeps its shape and is updated from the new state in a second loop (one
    # reading it through a reshape would make XLA copy it before its in-place update).
    # ResNet-18's weights, one core: SGD's step alone 20.0 -> 18.3 ms, AdamW's 51.4 -> 41.0
    # (benchmarks/optimizer_step.py; docs/design.md, "The optimizer's state stored flat").
    # state_dict() shows torch's shapes. Off by default: in a training step XLA fuses the loops
    # that make some weight gradients (a cropped kernel's, a map matrix's) into the state's
    # update, and over a flat array those loops index the 4-D gradient by divisions; ResNet-18's
    # step at 32 px, one core, took 87.3 ms flat against 74.8 shaped (docs/design.md, "The
    # flat state in training steps"). Set it True on the class before building an optimizer
    # whose step runs alone.
    _flat_state = False

    def __init__(self, params, defaults: dict):
        if isinstance(params, dict):
            params = [params]
        groups = list(params) if isinstance(params, list) and params and isinstance(params[0], dict) \
            else [{"params": params}]
        self._store = None  # set by the first add_param_group
        # Fixed for the optimizer's life (its stored state's shapes follow it); only an update
        # written in two halves can run as two loops (`_step_one`).
        self._flat_state = (type(self)._flat_state
                            and type(self)._param_update is not Optimizer._param_update)
        self.defaults = {**defaults, **{k: INERT_DEFAULTS[k] for k in self._inert}}
        self.param_groups: list[ParamGroup] = []
        self._state: dict[int, dict[str, int]] = {}
        # Step counters: one int vector per group (torch keeps one per parameter; a vector
        # of them is one array instead of many scalars, which XLA handles far faster).
        self._steps: dict[int, int] = {}  # group index -> slot of its step vector
        # Whether every counter of a group is known to be equal (the usual case: each step
        # updates every parameter). Then one shared counter drives the whole group.
        self._uniform: dict[int, bool] = {}
        if not any(_param_refs(g["params"]) for g in groups if isinstance(g, dict) and "params" in g):
            raise ValueError("optimizer got an empty parameter list")
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict):
        """Add a group of parameters (torch's `add_param_group`): options missing from it take
        the optimizer's defaults, and a parameter already in another group is refused.

        Parameters of a module outside the optimizer's store (a head built mid-training)
        join the store; the store's version changes, so `dl.jit` steps retrace once.
        Schedulers built earlier learn of the group (see `lr_scheduler`).
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError("param_group has no 'params' entry")
        unknown = set(param_group) - set(self.defaults) - {"params"}
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)} for {type(self).__name__}; "
                f"valid: {sorted(self.defaults)}"
            )
        options = {**self.defaults, **{k: v for k, v in param_group.items() if k != "params"}}
        _check_lr(options["lr"])
        self._validate(options)
        refs = _param_refs(param_group["params"])
        stores = [m._store for m, _ in refs]
        if self._store is None and stores:
            self._store = join(*stores)
            self._store.owners.add(self)
        elif stores:
            self._store = join(self._store, *stores)  # ours first: existing slots keep their indices
        slots = [m._slots[n] for m, n in refs]
        if len(set(slots)) != len(slots):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; "
                          "in future, this will cause an error", UserWarning, stacklevel=2)
            slots = list(dict.fromkeys(slots))
        taken = {i for group in self.param_groups for i in group.slots}
        if taken.intersection(slots):
            raise ValueError("some parameters appear in more than one parameter group")
        group = ParamGroup(self, slots, options)
        self.param_groups.append(group)
        group_index = len(self.param_groups) - 1
        steps = []
        for index in slots:
            param = self._store.values[index]
            state = self._init_state(param, options)
            if "step" in state:
                steps.append(state.pop("step"))
            self._state[index] = {k: self._store.add(self._stored(v, param.shape), STATE)
                                  for k, v in state.items()}
        if steps:
            self._steps[group_index] = self._store.add(jnp.stack(steps), STATE)
            self._uniform[group_index] = True
        for owner in list(self._store.owners):
            on_added = getattr(owner, "_param_group_added", None)
            if on_added is not None and getattr(owner, "optimizer", None) is self:
                on_added(group)

    def _rebase(self, store, offset):
        self._store = store
        for group in self.param_groups:
            group._rebase(offset)
        self._state = {i + offset: {k: j + offset for k, j in s.items()} for i, s in self._state.items()}
        self._steps = {g: i + offset for g, i in self._steps.items()}

    def _extend_state(self, group: ParamGroup):
        """Add state a now-dynamic option may need (a momentum buffer that momentum=0 skipped)."""
        options = group.options()
        group_index = next(i for i, g in enumerate(self.param_groups) if g is group)
        for index in group.slots:
            param = self._store.values[index]
            fresh = self._init_state(param, options)
            if "step" in fresh and group_index not in self._steps:
                self._steps[group_index] = self._store.add(
                    jnp.zeros((len(group.slots),), fresh["step"].dtype), STATE)
                self._uniform[group_index] = True
            for key, value in fresh.items():
                if key != "step" and key not in self._state[index]:
                    self._state[index][key] = self._store.add(self._stored(value, param.shape), STATE)

    def _validate(self, options: dict):
        """Raise ValueError naming any invalid option value (subclasses extend)."""

    def _init_state(self, param, options: dict) -> dict:
        raise NotImplementedError

    def _update(self, param, grad, state: dict, options: dict):
        """One parameter's step: returns (new_param, new_state). A subclass writes it, or
        writes `_new_state` and `_param_update`, of which it is made."""
        new_state = self._new_state(param, grad, state, options)
        return self._param_update(param, grad, new_state, options), new_state

    def _new_state(self, param, grad, state: dict, options: dict) -> dict:
        """One parameter's new state (elementwise in param, grad and state)."""
        raise NotImplementedError

    def _param_update(self, param, grad, new_state: dict, options: dict):
        """One parameter's new value, from the state `_new_state` made."""
        raise NotImplementedError

    def _step_one(self, param, grad, state: dict, options: dict):
        """`_update`, with the state stored flat where `_flat` says so."""
        if not self._flat(param.shape):
            return self._update(param, grad, state, options)
        new_state = self._new_state(param.reshape(-1), grad.reshape(-1), state, options)
        shaped = {k: self._shaped(v, param.shape) for k, v in new_state.items()}
        return self._param_update(param, grad, shaped, options), new_state

    def _flat(self, shape) -> bool:
        """Whether a parameter of this shape has its state stored flat: a minor axis shorter
        than a vector of 8 floats (a k x k kernel's; a 1x1 kernel's axes of 1 XLA drops)."""
        return self._flat_state and len(shape) > 1 and 1 < shape[-1] < 8

    def _stored(self, value, shape):
        """A state array as the store keeps it: flat if it has its parameter's shape."""
        return value.reshape(-1) if self._flat(shape) and value.shape == shape else value

    def _shaped(self, value, shape):
        """Inverse of `_stored`: a flat state array back in its parameter's shape."""
        flat = self._flat(shape) and value.shape == (math.prod(shape),)
        return value.reshape(shape) if flat else value

    # ---- the PyTorch interface ----------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True):
        """Kept for ported code: jaxdl gradients are return values, never accumulated."""

    def _grads_by_slot(self, grads) -> dict:
        """{slot: (parameter name, gradient)}, every entry checked before anything changes."""
        if isinstance(grads, Gradients):
            if grads.store.live() is not self._store.live():
                name = next(iter(grads), "")
                raise ValueError(
                    f"opt.step: the gradients (e.g. of '{name}') were taken of another model "
                    "than the one whose parameters this optimizer updates (a copy with the same "
                    "architecture?); nothing was updated"
                )
            named = {grads.slots[k]: (k, g) for k, g in grads.items()}
        elif not isinstance(grads, dict):
            raise TypeError(f"opt.step expects the gradient dict from dl.grad, got {type(grads).__name__}")
        else:
            names = {}
            for owner in list(self._store.owners):
                if isinstance(owner, Module) and not owner._path:
                    for qualified, module, name in owner._named_slots("_params"):
                        names.setdefault(qualified, module._slots[name])
            unknown = [k for k in grads if k not in names]
            if unknown:
                raise KeyError(
                    f"gradients for unknown parameter(s) {unknown}; expected keys like "
                    f"{list(names)[:5]} (named_parameters() of the model); nothing was updated"
                )
            named = {names[k]: (k, g) for k, g in grads.items()}
        store = self._store
        wrong = [
            f"'{name}': gradient of shape {tuple(jnp.shape(g))} for a parameter of shape "
            f"{tuple(store.values[i].shape)}"
            for i, (name, g) in named.items() if jnp.shape(g) != store.values[i].shape
        ]
        if wrong:
            raise ValueError("opt.step: " + "; ".join(wrong) + "; nothing was updated")
        return {i: g for i, (_, g) in named.items()}

    def step(self, grads=None, closure=None):
        """Update every parameter that has a gradient in `grads` (from `dl.grad`).

        torch's form `loss = opt.step(closure)` works too, with one difference:
        gradients are return values here, so the closure returns `(loss, grads)`,
        e.g. `opt.step(lambda: dl.value_and_grad(loss_fn)(model))`. It is called
        once (as torch's SGD/Adam/... do) and its loss is returned; with `grads`,
        `step` returns None.
        """
        if callable(grads) and closure is None:  # opt.step(closure), torch's positional form
            grads, closure = None, grads
        loss = None
        if closure is not None:
            if grads is not None:
                raise TypeError("opt.step takes gradients or a closure, not both")
            loss, grads = _evaluate_closure(closure)
        if grads is None:
            raise TypeError(
                "opt.step needs the gradients: opt.step(grads) with grads from dl.grad / "
                "dl.value_and_grad, or opt.step(closure) with a closure returning (loss, grads)"
            )
        self._apply_grads(grads)
        return loss

    def _apply_grads(self, grads):
        by_slot = self._grads_by_slot(grads)
        store = self._store
        for group_index, group in enumerate(self.param_groups):
            options = group.options()
            steps = store.read(self._steps[group_index]) if group_index in self._steps else None
            uniform = self._uniform.get(group_index, False)
            new_steps = {}
            for position, index in enumerate(group.slots):
                grad = by_slot.get(index)
                if grad is None or not store.trainable[index]:
                    continue
                param = store.read(index)
                slots = self._state[index]
                state = {k: store.read(i) for k, i in slots.items()}
                if steps is not None:
                    state["step"] = steps[0] if uniform else steps[position]
                new_param, new_state = self._step_one(param, grad.astype(param.dtype), state,
                                                      options)
                store.write(index, new_param.astype(param.dtype))
                for k, i in slots.items():
                    store.write(i, new_state[k].astype(state[k].dtype))
                if steps is not None:
                    new_steps[position] = new_state["step"]
            if new_steps:
                self._write_steps(group_index, steps, new_steps)

    def _write_steps(self, group_index, steps, new_steps: dict):
        """Store the group's new step counters (positions without a gradient keep theirs)."""
        if self._uniform[group_index] and len(new_steps) == len(steps):
            vector = jnp.broadcast_to(next(iter(new_steps.values())), steps.shape)
        else:
            vector = jnp.stack([new_steps.get(i, steps[i]) for i in range(len(steps))])
            if self._uniform[group_index]:
                # Counters now differ: later steps (and traces) use one counter per parameter.
                self._uniform[group_index] = False
                self._store.bump()
        self._store.write(self._steps[group_index], vector.astype(steps.dtype))

    def _param_state(self, group_index: int, position: int, index: int) -> dict:
        """One parameter's state, by name, in its parameter's shape, with its step counter (as
        torch keeps it)."""
        shape = self._store.values[index].shape
        state = {k: self._shaped(self._store.read(i), shape) for k, i in self._state[index].items()}
        if group_index in self._steps:
            state["step"] = self._store.read(self._steps[group_index])[position]
        return state

    # ---- state dict (PyTorch's format) ---------------------------------------------------------
    def _export_state(self, state: dict) -> dict | None:
        """Our state of one parameter as torch names it; None where torch has none yet."""
        step = state.get("step")
        if step is not None and int(step) == 0 and not self._state_at_construction:
            return None
        return {k: (v.astype(jnp.float32) if k == "step" else v) for k, v in state.items()}

    def _import_state(self, entry: dict | None, fresh: dict) -> dict:
        """Inverse of `_export_state`: torch's entry (or None) to our state dict."""
        return dict(fresh) if entry is None else dict(entry)

    def state_dict(self) -> dict:
        """{"state": {index: {name: array}}, "param_groups": [{option: value, "params": [index]}]}."""
        state, groups, index = {}, [], 0
        for group_index, group in enumerate(self.param_groups):
            indices = []
            for position, slot in enumerate(group.slots):
                exported = self._export_state(self._param_state(group_index, position, slot))
                if exported is not None:
                    state[index] = exported
                indices.append(index)
                index += 1
            groups.append({**{k: group[k] for k in group if k != "params"}, "params": indices})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict):
        """Load a state dict from `state_dict()` or from a torch optimizer; all-or-nothing.

        Raises ValueError listing every mismatch (group sizes, state names,
        shapes); nothing is written unless everything fits.
        """
        writes, problems = self._plan_load(state_dict)
        if problems:
            raise ValueError(
                f"cannot load state_dict into {type(self).__name__} (optimizer unchanged):\n  "
                + "\n  ".join(problems)
            )
        for group, options in writes["options"]:
            for key, value in options.items():
                if key in group._dynamic or group._static.get(key, _MISSING) != value:
                    group[key] = value
        for target, value in writes["state"]:
            if isinstance(target, tuple):  # ("step", group, position)
                continue
            self._store.write(target, value)
        for group_index, slot in self._steps.items():
            vector = np.asarray(self._store.values[slot]).copy()
            for target, value in writes["state"]:
                if isinstance(target, tuple) and target[1] == group_index:
                    vector[target[2]] = int(value)
            self._store.write(slot, jnp.asarray(vector))
            uniform = bool((vector == vector[0]).all())
            if uniform != self._uniform[group_index]:
                self._uniform[group_index] = uniform
                self._store.bump()

    def _plan_load(self, state_dict):
        problems, options, state_writes = [], [], []
        if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
            keys = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            return None, [f"expected keys ['param_groups', 'state'], got {keys}"]
        saved_groups, saved_state = state_dict["param_groups"], state_dict["state"]
        if len(saved_groups) != len(self.param_groups):
            return None, [f"param_groups: {len(saved_groups)} saved, {len(self.param_groups)} here"]
        index = 0
        for g, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(saved["params"]) != len(group.slots):
                problems.append(
                    f"param_groups[{g}]: {len(saved['params'])} params saved, {len(group.slots)} here"
                )
                continue
            new_options = {k: v for k, v in saved.items() if k != "params"}
            if "lr" in new_options:
                try:
                    _check_lr(new_options["lr"])
                except ValueError as err:
                    problems.append(f"param_groups[{g}]: {err}")
            if "betas" in new_options:
                new_options["betas"] = tuple(float(b) for b in new_options["betas"])
            options.append((group, new_options))
            for position, (saved_index, slot) in enumerate(zip(saved["params"], group.slots)):
                current = self._param_state(g, position, slot)
                entry = saved_state.get(saved_index, saved_state.get(str(saved_index)))
                entry = None if entry is None else {k: to_numpy(v) for k, v in entry.items()}
                fresh = self._init_state(self._store.values[slot], group.options())
                try:
                    ours = self._import_state(entry, fresh)
                except KeyError as err:
                    problems.append(f"state[{index}]: missing {err}")
                    index += 1
                    continue
                extra = sorted(set(ours) - set(current))
                missing = sorted(set(current) - set(ours))
                if extra or missing:
                    problems.append(f"state[{index}]: unexpected keys {extra}, missing keys {missing}")
                for name, value in ours.items():
                    if name not in current:
                        continue
                    value = np.asarray(value)
                    if value.shape != current[name].shape:
                        problems.append(
                            f"state[{index}][{name!r}]: expected shape {tuple(current[name].shape)}"
                            f", got {tuple(value.shape)}"
                        )
                        continue
                    if name == "step":
                        target = ("step", g, position)
                    else:
                        target = self._state[slot][name]
                        value = self._stored(value, self._store.values[slot].shape)
                    state_writes.append((target, jnp.asarray(value.astype(current[name].dtype))))
                index += 1
        return {"options": options, "state": state_writes}, problems

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {group[k]}" for k in sorted(group) if k != "params")
        return "\n".join(lines) + "\n)"


_MISSING = object()
