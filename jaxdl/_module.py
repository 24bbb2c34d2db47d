"""`nn.Module`, `nn.Parameter` and buffers, with PyTorch's names and behaviour.

A module keeps no arrays itself: `self.weight` reads slot `_slots["weight"]`
of the tree's `Store` (see `_store.py`). Assigning a sub-module merges its
store into the parent's, so a whole model (and later its optimizer) is one
flat list of arrays.
"""

import collections
import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl import _anomaly, _convert, _trace_state
from jaxdl._store import BUFFER, PARAM, RNG, Stateful, Store, is_array, join, keep_write, observe
from jaxdl._tracing import is_traced

_trace_state.declare("no_grad", 0)  # depth of nested no_grad blocks


class no_grad(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """Like `torch.no_grad()`: module outputs inside carry no gradient.

    Usable as a context manager or a decorator.
    """

    def __enter__(self):
        _trace_state.set("no_grad", _trace_state.get("no_grad") + 1)
        return self

    def __exit__(self, *exc):
        _trace_state.set("no_grad", _trace_state.get("no_grad") - 1)
        return False


def grad_enabled() -> bool:
    return _trace_state.get("no_grad") == 0


class Parameter:
    """Marks an array as a parameter when assigned to a module attribute.

    Tensors are plain `jax.Array`s: reading the attribute back gives the
    array, not this wrapper.
    """

    def __init__(self, data, requires_grad: bool = True):
        if not is_array(data):
            raise TypeError(
                f"nn.Parameter expects a jax or numpy array, got {type(data).__name__}"
            )
        self.data = jnp.asarray(data)
        self.requires_grad = requires_grad

    def __repr__(self):
        return f"Parameter containing:\n{self.data!r}"


class Buffer:
    """Marks an array as a buffer when assigned to a module attribute (torch.nn.Buffer)."""

    def __init__(self, data, persistent: bool = True):
        if not is_array(data):
            raise TypeError(f"nn.Buffer expects a jax or numpy array, got {type(data).__name__}")
        self.data = jnp.asarray(data)
        self.persistent = persistent


class ShapeError(ValueError):
    """A module received an input of the wrong shape or dtype."""


_DELETED = ("deleted",)  # the setting token of a deleted attribute

_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def to_numpy(value) -> np.ndarray:
    """numpy view of a numpy, jax or torch array, without importing torch."""
    if type(value).__module__.startswith("torch"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return np.asarray(value)


class Parameters:
    """What `Module.parameters()` returns: iterates like PyTorch's generator of arrays.

    It also remembers which module slot each array came from, so an optimizer
    built from it knows what to update.
    """

    def __init__(self, refs):
        self.refs = refs  # [(module, attribute name)]

    def __iter__(self):
        return (getattr(module, name) for module, name in self.refs)

    def __len__(self):
        return len(self.refs)

    def __repr__(self):
        return f"<Parameters: {len(self.refs)} arrays>"


class Module(Stateful):
    """Base class for all layers, used exactly like `torch.nn.Module`."""

    def __init__(self):
        store = Store()
        store.owners.add(self)
        d = self.__dict__
        d["_store"] = store
        d["_slots"] = {}  # attribute name -> slot index (None for a None parameter/buffer)
        d["_params"] = []  # parameter names, registration order
        d["_buffers"] = []  # buffer names, registration order
        d["_non_persistent"] = set()
        d["_modules"] = {}
        d["training"] = True
        d["_path"] = ""
        store.settings[(id(self), "training")] = _trace_state.token(True)

    # ---- store plumbing -------------------------------------------------------------------
    def _rebase(self, store, offset):
        d = self.__dict__
        d["_store"] = store
        d["_slots"] = {k: (None if i is None else i + offset) for k, i in self._slots.items()}

    def _new_slot(self, name, value, kind, trainable=False):
        if "_slots" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {kind} '{name}' before Module.__init__() call in "
                f"{type(self).__name__}.__init__"
            )
        if name in self._slots or name in self._modules:
            self._forget(name)
        elif name in self.__dict__:
            raise KeyError(f"attribute '{name}' already exists in {type(self).__name__}")
        index = None if value is None else self._store.add(value, kind, trainable)
        self._slots[name] = index
        return index

    def _forget(self, name):
        # The slot itself stays in the store (indices are stable); only the name goes.
        self._slots.pop(name, None)
        self._modules.pop(name, None)
        for names in (self._params, self._buffers):
            if name in names:
                names.remove(name)
        self._non_persistent.discard(name)
        self._store.bump()

    def register_parameter(self, name: str, param: Parameter | None):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign {type(param).__name__} as parameter '{name}' "
                "(nn.Parameter or None expected)"
            )
        self._new_slot(
            name, None if param is None else param.data, PARAM, param is not None and param.requires_grad
        )
        self._params.append(name)

    def register_buffer(self, name: str, tensor, persistent: bool = True):
        if tensor is not None and not is_array(tensor):
            raise TypeError(f"cannot assign {type(tensor).__name__} as buffer '{name}' (array expected)")
        self._new_slot(name, None if tensor is None else jnp.asarray(tensor), BUFFER)
        self._buffers.append(name)
        if not persistent:
            self._non_persistent.add(name)

    def _register_rng(self, name: str, key):
        """A key stream slot: threaded through transforms, not part of state_dict."""
        self._new_slot(name, key, RNG)

    def _next_key(self, name: str = "_rng"):
        """Split the module's key stream: returns a fresh key and advances the stream."""
        index = self._slots[name]
        key, sub = jax.random.split(self._store.read(index))
        self._store.write(index, key)
        return sub

    def add_module(self, name: str, module: "Module | None"):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        if name in self._slots:
            self._forget(name)
        self._modules[name] = module
        if module is not None:
            join(self._store, module._store)
            self._set_paths(name, module)
        self._store.bump()

    register_module = add_module

    def _set_paths(self, name, module):
        base = f"{self._path}.{name}" if self._path else name
        for sub_name, sub in module.named_modules(remove_duplicate=False):
            sub.__dict__["_path"] = f"{base}.{sub_name}" if sub_name else base

    # ---- attribute access -----------------------------------------------------------------
    def __getattr__(self, name):
        d = self.__dict__
        slots = d.get("_slots")
        if slots is not None and name in slots:
            index = slots[name]
            return None if index is None else d["_store"].read(index)
        modules = d.get("_modules")
        if modules is not None and name in modules:
            return modules[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self.register_parameter(name, value)
        elif isinstance(value, Buffer):
            self.register_buffer(name, value.data, value.persistent)
        elif isinstance(value, Module):
            self.add_module(name, value)
        elif name in self.__dict__.get("_slots", ()):
            index = self._slots[name]
            if value is None:
                self._slots[name] = None
                self._store.bump()
            elif not is_array(value) and not is_traced(value):
                kind = "parameter" if name in self._params else "buffer"
                raise TypeError(
                    f"cannot assign {type(value).__name__} to {kind} '{name}' of "
                    f"{self._describe()}: expected a jax array"
                )
            elif index is None:
                kind = PARAM if name in self._params else BUFFER
                self._slots[name] = self._store.add(jnp.asarray(value), kind, kind == PARAM)
            else:
                self._store.write(index, jnp.asarray(value))
        elif name in self.__dict__.get("_modules", ()):
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} to child module '{name}' "
                    "(Module or None expected)"
                )
            self._modules[name] = None
            self._store.bump()
        else:
            object.__setattr__(self, name, value)
            # A setting (hyper-parameter, flag, hook): the next compiled call follows it.
            if "_store" in self.__dict__:
                self._store.configure([((id(self), name), _trace_state.token(value))])

    def _update_parameter(self, name: str, value):
        """Write parameter `name` from inside `forward`, as torch's in-place updates without
        grad do (Embedding's max_norm): the new value stays after `dl.value_and_grad`, which
        otherwise gives back the parameter arrays the forward pass read."""
        setattr(self, name, value)
        keep_write(self._store, self._slots[name])

    def _set_call_hook(self, hook, memory=None):
        """Replace the call hook (`jaxdl.memory`'s policies) and the memory state it reads."""
        self._call_hook = hook
        self._memory = memory

    def __delattr__(self, name):
        if name in self._slots or name in self._modules:
            self._forget(name)
        else:
            object.__delattr__(self, name)
            self._store.configure([((id(self), name), _DELETED)])

    # ---- calling --------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        observe(self._store)  # inside dl.jit, this tree's settings are part of the cache key
        # `jaxdl.memory.offload` sets a per-instance call hook (tag the input, or run the
        # root's forward under a `jax.checkpoint` policy); one dict lookup when unset.
        hook = self.__dict__.get("_call_hook")
        if _trace_state.get("detect_anomaly"):
            out = _anomaly.call_checked(self._describe(), lambda: self._forward(hook, args, kwargs))
        else:
            out = self.forward(*args, **kwargs) if hook is None else hook(self, args, kwargs)
        if _trace_state.get("no_grad"):
            out = jax.tree.map(jax.lax.stop_gradient, out)
        return out

    def _forward(self, hook, args, kwargs):
        return self.forward(*args, **kwargs) if hook is None else hook(self, args, kwargs)

    def _describe(self) -> str:
        return f"{self._path or '<root>'} ({type(self).__name__})"

    def _input_error(self, what: str, expected, actual) -> ShapeError:
        return ShapeError(f"{self._describe()}: expected {what} {expected}, got {actual}")

    def _check_input(self, x, ndims: tuple[int, ...], dim: int | None = None, size: int | None = None):
        """Check rank (one of `ndims`) and, when given, the size of axis `dim`."""
        if not hasattr(x, "shape"):
            raise TypeError(f"{self._describe()}: expected an array, got {type(x).__name__}")
        if x.ndim not in ndims:
            ranks = " or ".join(f"{n}-d" for n in ndims)
            raise self._input_error("input of rank", ranks, f"shape {tuple(x.shape)}")
        if size is not None and x.shape[dim] != size:
            axis = dim if dim >= 0 else x.ndim + dim
            raise self._input_error(
                f"input with size {size} on axis {axis}", "", f"shape {tuple(x.shape)}"
            )

    def _check_floating(self, x):
        """Layers with float weights refuse integer, bool and complex inputs, as torch's do,
        rather than promote them silently."""
        if not jnp.issubdtype(x.dtype, jnp.floating):
            like = next((v.dtype for _, v in self.named_parameters()), jnp.dtype(jnp.float32))
            raise ShapeError(f"{self._describe()}: expected a floating-point input ({like}, like "
                             f"its parameters), got dtype {x.dtype}")

    # ---- traversal ------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub_prefix = f"{prefix}.{name}" if prefix else name
            yield from module.named_modules(memo, sub_prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_slots(self, names_attr, prefix="", recurse=True, remove_duplicate=True):
        """(qualified name, module, attribute) for parameters or buffers, PyTorch's order."""
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, module in mods:
            for name in getattr(module, names_attr):
                index = module._slots[name]
                if index is None or (remove_duplicate and index in seen):
                    continue
                seen.add(index)
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), module, name

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        for qualified, module, name in self._named_slots("_params", prefix, recurse, remove_duplicate):
            yield qualified, getattr(module, name)

    def parameters(self, recurse: bool = True) -> Parameters:
        return Parameters([(m, n) for _, m, n in self._named_slots("_params", "", recurse)])

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        for qualified, module, name in self._named_slots("_buffers", prefix, recurse, remove_duplicate):
            yield qualified, getattr(module, name)

    def buffers(self, recurse: bool = True):
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def _trainable_slots(self) -> dict[str, int]:
        """Slot index of every trainable parameter, keyed like named_parameters()."""
        trainable = self._store.trainable
        return {
            qualified: module._slots[name]
            for qualified, module, name in self._named_slots("_params")
            if trainable[module._slots[name]]
        }

    def get_submodule(self, target: str) -> "Module":
        module = self
        for part in target.split(".") if target else []:
            if part not in module._modules:
                raise AttributeError(f"{module._describe()} has no submodule '{part}' (in '{target}')")
            module = module._modules[part]
        return module

    # ---- state dict -----------------------------------------------------------------------
    def _state_entries(self, prefix=""):
        """(key, module, attribute) in PyTorch's state_dict order: own params, own buffers, children."""
        for name in self._params:
            if self._slots[name] is not None:
                yield prefix + name, self, name
        for name in self._buffers:
            if self._slots[name] is not None and name not in self._non_persistent:
                yield prefix + name, self, name
        for name, module in self._modules.items():
            if module is not None:
                yield from module._state_entries(f"{prefix}{name}.")

    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        out = collections.OrderedDict() if destination is None else destination
        for key, module, name in self._state_entries(prefix):
            out[key] = getattr(module, name)
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load arrays (numpy, jax or torch) by PyTorch key; all-or-nothing.

        Every problem is reported in one error and nothing is written unless
        the whole dict fits. Values are cast to the existing dtype, as
        PyTorch's `copy_` does.
        """
        entries = {key: (module, name) for key, module, name in self._state_entries()}
        missing = [k for k in entries if k not in state_dict]
        unexpected = [k for k in state_dict if k not in entries]
        mismatched, updates = [], []
        for key, (module, name) in entries.items():
            if key not in state_dict:
                continue
            value = to_numpy(state_dict[key])
            current = getattr(module, name)
            if tuple(value.shape) != tuple(current.shape):
                mismatched.append(
                    f"{key}: expected shape {tuple(current.shape)}, got {tuple(value.shape)}"
                )
                continue
            updates.append((module, name, value, current.dtype))
        problems = []
        if strict and missing:
            problems.append("missing keys: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(unexpected))
        if mismatched:
            problems.append("shape mismatches: " + "; ".join(mismatched))
        if problems:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__} "
                f"(module unchanged):\n  " + "\n  ".join(problems)
            )
        for module, name, value, dtype in updates:
            # Copy: on CPU jnp.asarray may alias the numpy/torch memory, and a later in-place
            # update of the source (a torch optimizer step, BatchNorm stats) would leak in.
            setattr(module, name, jnp.array(value, dtype=dtype, copy=True))
        return _IncompatibleKeys(missing, unexpected)

    # ---- modes and conversions ------------------------------------------------------------
    def train(self, mode: bool = True):
        token = _trace_state.token(bool(mode))
        for module in self.modules():
            module.__dict__["training"] = bool(mode)
        self._store.configure([((id(m), "training"), token) for m in self.modules()])
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for _, module, name in self._named_slots("_params"):
            self._store.trainable[module._slots[name]] = bool(requires_grad)
        self._store.bump()
        return self

    def zero_grad(self, set_to_none: bool = True):
        """Kept for ported code: jaxdl gradients are return values, never accumulated."""

    def to(self, *args, device=None, dtype=None, non_blocking: bool = False):
        """`to(device)`, `to(dtype)`, `to(device, dtype)`, `to(array)`, `to(sharding)`, as torch's:
        casts floating parameters and buffers, places every array (see `_convert.py`)."""
        return _convert.module_to(self, args, device, dtype)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        """Move to a GPU (`device`: index or name); RuntimeError where JAX sees none."""
        return self.to("cuda" if device is None else device)

    def float(self):
        return self.to(jnp.float32)

    def half(self):
        return self.to(jnp.float16)

    def bfloat16(self):
        return self.to(jnp.bfloat16)

    def apply(self, fn):
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- display --------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            f"({name}): " + repr(module).replace("\n", "\n  ")
            for name, module in self._modules.items()
        ]
        lines = extra_lines + child_lines
        body = ""
        if len(extra_lines) == 1 and not child_lines:
            body = extra_lines[0]
        elif lines:
            body = "\n  " + "\n  ".join(lines) + "\n"
        return f"{type(self).__name__}({body})"
