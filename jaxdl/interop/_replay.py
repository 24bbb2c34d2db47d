"""Running a captured torch graph: numbered slots, steps, and the converted root module.

`_export.py` turns a torch.export graph into a `_Program`; here it runs. Steps hold
jax functions, slot numbers, numpy dtypes and plain Python values: nothing torch.
"""

import jax.numpy as jnp
import numpy as np

from jaxdl._module import Module
from jaxdl._random import KeyStream


class _Ref:
    """A slot number inside a step's arguments."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def _resolve(value, env):
    kind = type(value)
    if kind is _Ref:
        return env[value.index]
    if kind is list or kind is tuple:
        return kind(_resolve(v, env) for v in value)
    if isinstance(value, tuple):  # a namedtuple
        return kind(*(_resolve(v, env) for v in value))
    if kind is dict:
        return {k: _resolve(v, env) for k, v in value.items()}
    if kind is slice:  # torch.fx graphs index with sizes computed in the graph
        return slice(_resolve(value.start, env), _resolve(value.stop, env),
                     _resolve(value.step, env))
    return value


def _assign(template, value, env):
    """Store the leaves of `value` in the slots named by the same-shaped `template`."""
    if type(template) is _Ref:
        env[template.index] = value
    elif isinstance(template, list | tuple):
        for t, v in zip(template, value):
            _assign(t, v, env)
    elif isinstance(template, dict):
        for k, t in template.items():
            _assign(t, value[k], env)


class _Step:
    __slots__ = ("fn", "module", "args", "kwargs", "out", "random", "expect", "what")

    def __init__(self, fn=None, module=None, args=(), kwargs=None, out=None, random=False,
                 expect=None, what=""):
        self.fn, self.module, self.args, self.kwargs = fn, module, args, kwargs or {}
        self.out, self.random, self.expect, self.what = out, random, expect, what


class _Program:
    """One exported graph (one mode) as steps over slots."""

    def __init__(self):
        self.size = 0
        self.inputs = []  # (slot, name, dims: int | symbol name | None, numpy dtype kind)
        self.ranges = {}  # symbol name -> (low, high or None)
        self.state = []  # (slot, owner path, attribute)
        self.constants = []  # (slot, array)
        self.steps = []
        self.writes = []  # (owner path, attribute, slot): buffers updated in place
        self.output = None

    def new_slot(self):
        self.size += 1
        return self.size - 1

    def run(self, root, args):
        if len(args) != len(self.inputs):
            raise TypeError(f"{root._describe()}: forward takes {len(self.inputs)} positional "
                            f"arguments (as the captured torch forward), got {len(args)}")
        env = [None] * self.size
        args = [jnp.asarray(value) for value in args]
        self._check_inputs(root, args)
        for (slot, *_), value in zip(self.inputs, args):
            env[slot] = value
        for slot, owner, attr in self.state:
            env[slot] = getattr(root.get_submodule(owner), attr)
        for slot, value in self.constants:
            env[slot] = value
        for step in self.steps:
            try:
                if step.module is not None:
                    call_args, call_kwargs = _resolve(step.args, env)
                    _assign(step.out, root.get_submodule(step.module)(*call_args, **call_kwargs),
                            env)
                    continue
                kwargs = _resolve(step.kwargs, env)
                if step.random:
                    kwargs["rng"] = root._next_key()
                out = step.fn(*_resolve(step.args, env), **kwargs)
                env[step.out] = _conform(out, step.expect) if step.expect else out
            except Exception as err:
                if isinstance(err, _ReplayError):
                    raise
                raise _ReplayError(f"{root._describe()}: replaying {step.what}: "
                                   f"{type(err).__name__}: {err}") from err
        for owner, attr, slot in self.writes:
            setattr(root.get_submodule(owner), attr, env[slot])
        return _resolve(self.output, env)

    def _check_inputs(self, root, args):
        bound = {}
        for (_, name, dims, kind), value in zip(self.inputs, args):
            shape = tuple(value.shape)
            ok = len(shape) == len(dims)
            for dim, size in zip(dims, shape) if ok else ():
                if isinstance(dim, int):
                    ok = ok and dim == size
                elif dim is not None:
                    low, high = self.ranges.get(dim, (0, None))
                    ok = ok and bound.setdefault(dim, size) == size and low <= size and (
                        high is None or size <= high)
            if not ok:
                expected = "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"
                limits = "; ".join(f"{s} in [{lo}, {'inf' if hi is None else hi}]"
                                   for s, (lo, hi) in self.ranges.items())
                raise ValueError(
                    f"{root._describe()}: input '{name}' has shape {shape}, but the graph was "
                    f"captured for shape {expected}{' with ' + limits if limits else ''}. "
                    "Convert with example inputs of this shape, or pass dynamic_shapes to "
                    "from_torch (torch.export's dynamic_shapes).")
            actual = np.dtype(value.dtype).kind
            if kind != actual and not (kind in "iu" and actual in "iu"):
                raise TypeError(f"{root._describe()}: input '{name}' has dtype {value.dtype}, "
                                f"the captured graph expects dtype kind '{kind}'")


class _ReplayError(RuntimeError):
    """An aten step failed while replaying (names the op and the line of the torch forward)."""


def _conform(out, expect):
    """Check a step's result against the shape torch recorded; give integer and bool
    results torch's dtype (jnp and torch promote a few mixed dtypes differently). Floating
    results keep theirs: under `dl.amp.autocast` a matrix product is meant to be 16-bit."""
    if isinstance(expect, list):
        items = [_conform(o, e) for o, e in zip(out, expect)]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    dims, dtype = expect
    shape = getattr(out, "shape", None)
    if shape is None:
        return out
    if len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape)):
        raise ValueError(f"result has shape {tuple(shape)}, torch's has "
                         f"({', '.join('?' if d is None else str(d) for d in dims)})")
    floating = jnp.issubdtype(out.dtype, jnp.floating) and jnp.issubdtype(dtype, jnp.floating)
    if out.dtype == dtype or floating:
        return out
    return out.astype(dtype)


class ExportedModule(Module):
    """The root of a converted custom torch module: replays its captured graph.

    `programs[True]` is the graph exported in training mode, `programs[False]` in
    evaluation mode; this module's `training` flag picks one. Stock layers inside are
    jaxdl layers and follow their own flags.
    """

    def __init__(self, programs):
        super().__init__()
        self.programs = programs
        self._register_rng("_rng", KeyStream(None)())

    def forward(self, *args):
        return self.programs[self.training].run(self, args)


class CapturedModule(Module):
    """A custom torch sub-module inside an `ExportedModule`: holds its parameters and
    buffers; its code runs as part of the root's graph."""

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._describe()}: this module's forward was captured as part of its root's "
            "graph; call the root module (from_torch of this sub-module converts it alone)")
