"""`from_torch` where torch.export cannot capture a forward: torch.fx symbolic tracing.

torch.export refuses some forwards that symbolic tracing records without trouble,
for instance one returning a container its pytree does not know (a `@dataclass`,
an `OrderedDict` subclass such as a model-output class). `torch.fx` runs the
forward on proxies instead of tensors: each stock layer jaxdl has becomes one
`call_module` node (it is made a leaf), every other tensor operation a
`call_function` (a torch or `torch.nn.functional` function, a Python operator)
or `call_method` (a Tensor method) node. These are replayed through the same
`_Program` as an exported graph (`_replay.py`):

- `torch.nn.functional.<name>` by `jaxdl.nn.functional.<name>`, which takes torch's
  arguments;
- `torch.<name>` and `Tensor.<name>` by the aten table's entry for the operator of
  that name (`torch.cat` -> `ATEN["cat"]`: torch's Python functions are generated
  from the aten schemas, so the positional arguments agree) when every overload
  of it has the same entry, else by the few adapters in `_FX` below, which pick
  the overload as torch's argument parser does;
- Python operators on tensors and sizes as themselves.

Anything else is refused at conversion time with the line of the user's forward.
fx records no shapes, so the graph is run once on fake tensors (`_propagate`):
that gives each result's shape and dtype for the replay to check, as for an
exported graph, and finds sizes that depend on tensor values.
"""

import collections
import copy
import dataclasses
import functools
import inspect
import operator

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl.interop._aten import ATEN, NEEDS_KEY
from jaxdl.interop._export import (
    _expect,
    _np_dtype,
    _split,
    _user_frame,
    capture_modes,
    converted,
    data_dependent,
    first_line,
)
from jaxdl.interop._replay import _Program, _Ref, _Step
from jaxdl.nn import functional as F

# Tensor methods and torch functions that return a view: an in-place update of such a
# result, or of a tensor viewed by one, would change the other tensor too in torch.
_VIEWS = {"view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "T", "mT",
          "unsqueeze", "squeeze", "expand", "expand_as", "flatten", "unflatten", "narrow",
          "select", "split", "chunk", "unbind", "diagonal", "movedim", "detach", "getitem",
          "swapaxes", "as_strided", "contiguous"}
_IN_PLACE_OPERATORS = {operator.iadd: operator.add, operator.isub: operator.sub,
                       operator.imul: operator.mul, operator.itruediv: operator.truediv}
# attributes read by getattr: of tensors, and of (values, indices) pairs
_ATTRIBUTES = {"shape", "ndim", "dtype", "T", "mT", "values", "indices"}


def _sizes(args):
    """torch's `x.view(2, 3)` / `x.view((2, 3))` / `torch.zeros(2, 3)`: one tuple of sizes."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], list | tuple) else args


def _by_dim(whole, along):
    """x.sum() vs x.sum(dim): the aten overload torch's argument parser picks."""
    return lambda self, *args, **kwargs: (
        ATEN[along] if args or "dim" in kwargs else ATEN[whole])(self, *args, **kwargs)


def _max_or_min(name):
    def op(self, *args, **kwargs):
        other = args[0] if args else kwargs.get("other")
        if not args and not kwargs:
            return ATEN[name](self)
        if hasattr(other, "shape"):  # torch.max(a, b): elementwise
            return ATEN[f"{name}.other"](self, other)
        return _ValuesIndices(*ATEN[f"{name}.dim"](self, *args, **kwargs))
    return op


# torch.return_types.max & co.: `.values`, `.indices` or unpacking
_ValuesIndices = collections.namedtuple("_ValuesIndices", "values indices")


def _to(self, *args, dtype=None, **kwargs):
    """x.to(dtype) / x.to(device[, dtype]) / x.to(other): only the dtype matters here."""
    for arg in args:
        if hasattr(arg, "shape"):
            dtype = arg.dtype
        elif arg is not None and not isinstance(arg, str | bool):
            dtype = arg
    return self if dtype is None else self.astype(dtype)


def _split_sizes(self, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, int):
        return ATEN["split.Tensor"](self, split_size_or_sections, dim)
    return ATEN["split_with_sizes"](self, split_size_or_sections, dim)


def _size(self, dim=None):
    return tuple(self.shape) if dim is None else self.shape[dim]


_FX = {
    **{f"{prefix}.{name}": _by_dim(name, along) for prefix in ("torch", "Tensor")
       for name, along in (("sum", "sum.dim_IntList"), ("mean", "mean.dim"),
                           ("prod", "prod.dim_int"), ("all", "all.dim"), ("any", "any.dim"))},
    **{f"{prefix}.{name}": _max_or_min(name) for prefix in ("torch", "Tensor")
       for name in ("max", "min")},
    **{f"{prefix}.{name}": lambda self, *size, _name=name: ATEN[_name](self, _sizes(size))
       for prefix in ("torch", "Tensor")
       for name in ("view", "reshape", "permute", "expand", "repeat", "tile")},
    **{f"Tensor.{name}": lambda self, *size, dtype=None, _fill=fill, **kwargs: jnp.full(
        _sizes(size), _fill, dtype or self.dtype)
       for name, fill in (("new_zeros", 0), ("new_ones", 1), ("new_empty", 0))},
    **{f"torch.{name}": lambda *size, dtype=None, _fill=fill, **kwargs: ATEN["full"](
        _sizes(size), float(_fill), dtype=dtype) for name, fill in
       (("zeros", 0), ("ones", 1), ("empty", 0))},
    **{f"Tensor.{name}": lambda self, _dtype=dtype: self.astype(_dtype) for name, dtype in
       (("float", jnp.float32), ("double", jnp.float64), ("half", jnp.float16),
        ("bfloat16", jnp.bfloat16), ("int", jnp.int32), ("long", jnp.int64),
        ("bool", jnp.bool_))},
    "Tensor.to": _to,
    "Tensor.size": _size,
    "Tensor.dim": lambda self: self.ndim,
    "Tensor.numel": lambda self: int(np.prod(self.shape)),
    "Tensor.view_as": lambda self, other: jnp.reshape(self, other.shape),
    "Tensor.reshape_as": lambda self, other: jnp.reshape(self, other.shape),
    "Tensor.expand_as": lambda self, other: jnp.broadcast_to(self, other.shape),
    "Tensor.squeeze": lambda self, dim=None: ATEN["squeeze"](self) if dim is None else (
        ATEN["squeeze.dim"](self, dim)),
    "Tensor.split": _split_sizes,
    "torch.split": _split_sizes,
    "Tensor.div": lambda self, other, *, rounding_mode=None: ATEN["div.Tensor_mode"](
        self, other, rounding_mode=rounding_mode),
    "torch.tensor": lambda data, *, dtype=None, **kwargs: jnp.asarray(data, dtype),
    "operator.matmul": ATEN["matmul"],  # follows dl.amp.autocast, as the aten entry does
    "builtins.getattr": lambda obj, name: None if name == "device" else getattr(obj, name),
    # the checks fx adds for arguments left at their defaults (traced as constants)
    "torch._assert": lambda condition, message: None,
    "torch.fx._symbolic_trace._assert_is_none": lambda value, message: None,
}
_FX["torch.squeeze"], _FX["torch.div"] = _FX["Tensor.squeeze"], _FX["Tensor.div"]


def _aten_entry(name):
    """The aten table's entry for an operator whose overloads all share it, else None."""
    entries = {id(fn): fn for key, fn in ATEN.items() if key.split(".")[0] == name}
    return next(iter(entries.values())) if len(entries) == 1 else None


def _functional(torch, target):
    """jaxdl.nn.functional's function for a torch.nn.functional one, with its random key
    (keyword-only `key`, or `dropout_key` for scaled_dot_product_attention) as `rng`."""
    name = target.__name__
    if getattr(torch.nn.functional, name, None) is not target or not hasattr(F, name):
        return None, False
    fn = getattr(F, name)
    params = inspect.signature(fn).parameters
    key = next((k for k in ("dropout_key", "key")
                if k in params and params[k].kind is params[k].KEYWORD_ONLY), None)
    if key is None:
        return fn, False
    return (lambda *args, rng, **kwargs: fn(*args, **{key: rng}, **kwargs)), True


def _lookup(torch, node):
    """(function, its name for messages, random, in place) for a call node, or (None, name, ...)"""
    if node.op == "call_method":
        name = node.target
        base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
        key = f"Tensor.{base}"
        fn = _FX.get(key) or _aten_entry(base)
        return fn, f"Tensor.{name}", base in NEEDS_KEY, base != name
    target = node.target
    if isinstance(target, type) and dataclasses.is_dataclass(target):
        return target, target.__qualname__, False, False  # fx builds dataclasses in the graph
    fn, random = _functional(torch, target)
    name = getattr(target, "__name__", repr(target))
    if fn is not None:
        in_place = name.endswith("_") or node.kwargs.get("inplace") is True
        return fn, f"torch.nn.functional.{name}", random, in_place
    if target in _IN_PLACE_OPERATORS:
        return _IN_PLACE_OPERATORS[target], f"operator.{name}", False, True
    module = {"_operator": "operator"}.get(target.__module__, target.__module__ or "")
    key = f"{module}.{name}"
    if module in ("operator", "math", "builtins") or key in _FX:
        return _FX.get(key) or ATEN.get(key), key, False, False
    if getattr(torch, name, None) is target:
        fn = _FX.get(f"torch.{name}") or _aten_entry(name)
        return fn, f"torch.{name}", name in NEEDS_KEY, False
    return None, f"{module}.{name}", False, False


class _Builder:
    """Turns one fx Graph into a `_Program` (one mode)."""

    def __init__(self, torch, module, graph, constants, example_inputs):
        self.torch, self.module = torch, module
        self.graph, self.constants, self.example_inputs = graph, constants, example_inputs
        self.program = _Program()
        self.slots = {}  # node name -> slot of its current value (in-place ops rebind)
        self.buffers = {}  # node name -> state_dict name of a buffer read by get_attr
        self.initial = {}  # node name of a buffer -> its slot before any in-place update
        self.parameters = {name for name, _ in module.named_parameters(remove_duplicate=False)}
        self.state = self.parameters | {name for name, _ in
                                        module.named_buffers(remove_duplicate=False)}
        self.inputs = 0

    def build(self):
        for node in self.graph.nodes:
            handler = getattr(self, node.op)
            handler(node)
        self.program.writes = [(*_split(self.buffers[name]), self.slots[name])
                               for name in self.buffers if self.slots[name] != self.initial[name]]
        return self.program

    def arg(self, value):
        torch = self.torch
        if isinstance(value, torch.fx.Node):
            return _Ref(self.slots[value.name])
        if isinstance(value, list):  # fx's immutable_list too: plain lists for _resolve
            return [self.arg(v) for v in value]
        if isinstance(value, tuple):
            items = [self.arg(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, dict):  # fx records dicts (subclasses too) as plain dicts
            return {k: self.arg(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self.arg(value.start), self.arg(value.stop), self.arg(value.step))
        if isinstance(value, torch.dtype):
            return _np_dtype(torch, value)
        if isinstance(value, torch.device | torch.layout | torch.memory_format):
            return None
        return value

    def placeholder(self, node):
        if self.inputs >= len(self.example_inputs):  # an argument left at its default
            if not node.args:
                raise TypeError(f"from_torch: forward's argument {node.target} has no default "
                                f"and no example input ({len(self.example_inputs)} given)")
            slot = self.slots[node.name] = self.program.new_slot()
            self.program.constants.append((slot, node.args[0]))
            return
        # a fake tensor, where a size that may vary is a symbol (all fixed if that run failed)
        x = node.meta.get("val", self.example_inputs[self.inputs])
        self.inputs += 1
        dims = [size if isinstance(size, int) else None for size in x.shape]
        slot = self.slots[node.name] = self.program.new_slot()
        self.program.inputs.append((slot, node.target, dims, _np_dtype(self.torch, x.dtype).kind))

    def get_attr(self, node):
        slot = self.slots[node.name] = self.program.new_slot()
        if node.target in self.state:
            self.program.state.append((slot, *_split(node.target)))
            if node.target not in self.parameters:
                self.buffers[node.name], self.initial[node.name] = node.target, slot
        else:  # a tensor made while tracing (torch.tensor([...]) in forward) or a plain attribute
            self.program.constants.append((slot, jnp.asarray(np.asarray(
                self.constants[node.target].detach().cpu()))))

    def call_module(self, node):
        slot = self.slots[node.name] = self.program.new_slot()
        self.emit(node, _Step(
            module=node.target, args=(self.arg(node.args), self.arg(dict(node.kwargs))),
            out=_Ref(slot), what=f"{node.target} ({_user_frame(node)})"))
        if getattr(self.module.get_submodule(node.target), "inplace", False) is True:
            self.rebind(node, node.target)

    def call_function(self, node):
        fn, name, random, in_place = _lookup(self.torch, node)
        where = _user_frame(node)
        if name == "builtins.getattr" and node.args[1] not in _ATTRIBUTES | {"device"}:
            fn, name = None, f"Tensor.{node.args[1]}"
        if fn is None:
            raise NotImplementedError(
                f"from_torch: {name} ({where}) has no entry in jaxdl's table for torch.fx "
                "graphs (jaxdl/interop/_fx.py, and the aten table in _aten.py it reuses), so "
                "this forward cannot be converted")
        slot = self.slots[node.name] = self.program.new_slot()
        self.emit(node, _Step(
            fn=fn, args=self.arg(node.args), kwargs=self.arg(dict(node.kwargs)), out=slot,
            random=random, expect=_expect(self.torch, node.meta.get("val")),
            what=f"{name} ({where})"))
        if in_place:
            self.rebind(node, name)

    call_method = call_function

    def emit(self, node, step):
        """Append a step; under torch.no_grad() its result passes no gradient back."""
        self.program.steps.append(step)
        if not node.meta["grad_enabled"]:
            slot = self.slots[node.name]
            self.program.steps.append(_Step(fn=_no_gradient, args=(_Ref(slot),), out=slot,
                                            what=f"torch.no_grad() ({_user_frame(node)})"))

    def rebind(self, node, name):
        """An in-place update: later readers of the updated tensor see the new value."""
        target = node.args[0]
        viewed = [u for u in target.users if u is not node and self.is_view(u)]
        if self.is_view(target) or viewed or target.op == "placeholder" or (
                target.op == "get_attr" and target.name not in self.buffers):
            raise NotImplementedError(
                f"from_torch: {name} ({_user_frame(node)}) updates {target.name} in place, "
                "which is an input, a parameter, a view or viewed by another tensor: jaxdl "
                "cannot follow that; write it out of place (x = x + y, torch.where, torch.cat)")
        self.slots[target.name] = self.slots[node.name]

    def is_view(self, node):
        if node.op == "call_method":
            return node.target in _VIEWS
        if node.op == "call_function":
            name = getattr(node.target, "__name__", "")
            return name in _VIEWS or (name == "getattr" and node.args[1] in _VIEWS)
        return False

    def output(self, node):
        self.program.output = self.arg(node.args[0])


def _no_gradient(value):
    """stop_gradient on the arrays in a result (a tensor, a tuple of them, a size...)."""
    return jax.tree.map(lambda v: jax.lax.stop_gradient(v) if isinstance(v, jax.Array) else v,
                        value)


def _leaf_tracer(torch, units):
    class Tracer(torch.fx.Tracer):
        """Stock layers jaxdl has are leaves; buffers are read through the graph, so an
        in-place update of one is recorded instead of done to the torch module."""

        record_stack_traces = True
        proxy_buffer_attributes = True

        def is_leaf_module(self, m, qualname):
            return qualname in units

        def create_node(self, *args, **kwargs):  # fx records no grad mode: keep it here
            node = super().create_node(*args, **kwargs)
            node.meta["grad_enabled"] = torch.is_grad_enabled()
            return node

    return Tracer()


def _dynamic_axes(example_inputs, dynamic_shapes):
    """input index -> axes that may vary: axis 0 for "batch", none for None, the axes
    named in torch.export's per-input dicts otherwise."""
    if dynamic_shapes == "batch":
        return {i: {0} for i, x in enumerate(example_inputs) if x.ndim}
    if dynamic_shapes is None:
        return {}
    specs = dynamic_shapes.values() if isinstance(dynamic_shapes, dict) else dynamic_shapes
    return {i: set(spec) for i, spec in enumerate(specs) if isinstance(spec, dict)}


def convert_traced(torch, module, example_inputs, dynamic_shapes, units, export_failure):
    """The jaxdl module for a custom torch module that torch.export refused (its error in
    `export_failure`), from `torch.fx` symbolic tracing in each mode the code needs."""
    dynamic = _dynamic_axes(example_inputs, dynamic_shapes)
    # Arguments after the example inputs keep their defaults, as torch.export keeps them
    # (`mask=None`: fx would otherwise trace `if mask is not None` with a proxy).
    params = list(inspect.signature(module.forward).parameters.values())[len(example_inputs):]
    defaults = {p.name: p.default for p in params if p.default is not p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def capture(training):
        try:
            graph = _leaf_tracer(torch, units).trace(module, concrete_args=defaults)
        except Exception as err:
            raise NotImplementedError(_neither(module, export_failure, err)) from err
        constants = {n.target: _attribute(module, n.target) for n in graph.nodes
                     if n.op == "get_attr"}
        try:
            _check_trace(torch, module, graph, example_inputs)
            _propagate(torch, module, graph, example_inputs, dynamic)
            return _Builder(torch, module, graph, constants, example_inputs).build()
        except NotImplementedError as err:
            raise NotImplementedError(
                f"{err}\n(traced with torch.fx because torch.export could not capture this "
                f"forward: {export_failure})") from err

    before = set(vars(module))
    try:
        programs = capture_modes(module, units, capture)
    finally:
        for name in set(vars(module)) - before:  # fx stores traced constants on the module
            delattr(module, name)
    return converted(torch, module, units, programs)


def _check_trace(torch, module, graph, example_inputs):
    """fx records what forward does to proxies, which can differ from what it does to
    tensors (`isinstance(x, torch.Tensor)` is False for a proxy). So forward and the traced
    graph both run in torch on the example inputs, each on its own copy of the module with
    the same random seed, and must give the same outputs."""
    results = []
    for run in (lambda m: m, lambda m: torch.fx.GraphModule(m, graph)):
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(0)
            results.append(_leaves(run(copy.deepcopy(module))(*example_inputs)))
    same = len(results[0]) == len(results[1]) and all(
        a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else a == b
        for a, b in zip(*results))
    if not same:
        raise NotImplementedError(
            f"from_torch: the torch.fx graph of {type(module).__name__}.forward computes "
            "something other than forward on the example inputs: forward must treat its "
            "tensors alike whatever their type (fx traces it with proxies, for which "
            "isinstance(x, torch.Tensor) is False)")


def _leaves(out):
    """The tensors and other values in an output, containers (dataclasses too) opened."""
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return _leaves([getattr(out, f.name) for f in dataclasses.fields(out)])
    if isinstance(out, dict):
        return _leaves(list(out.values()))
    if isinstance(out, list | tuple):
        return [leaf for item in out for leaf in _leaves(item)]
    return [out]


def _propagate(torch, module, graph, example_inputs, dynamic):
    """Run the graph on fake tensors with torch's own shape rules (nothing computed; a copy
    of the module runs, so its buffers stay as they are): `node.meta["val"]` then holds the
    shape and dtype each replayed result is checked against, a size that may vary being a
    symbol. Refuses an operation whose output shape depends on tensor values. Where torch's
    fake kernels cannot follow, the remaining results go unchecked."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )
    from torch.fx.experimental import symbolic_shapes as symbolic

    mode = FakeTensorMode(shape_env=symbolic.ShapeEnv(), allow_non_fake_inputs=True)
    inputs = [mode.from_tensor(x, symbolic_context=symbolic.StatelessSymbolicContext(
        dynamic_sizes=[symbolic.DimDynamic.DYNAMIC if axis in dynamic.get(i, ())
                       else symbolic.DimDynamic.STATIC for axis in range(x.ndim)]))
        for i, x in enumerate(example_inputs)]

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            try:
                val = node.meta["val"] = super().run_node(node)
            except (DataDependentOutputException, DynamicOutputShapeException) as err:
                raise NotImplementedError(data_dependent(node)) from err
            if symbolic.free_unbacked_symbols(val):  # a size torch only knows by running it
                raise NotImplementedError(data_dependent(node))
            return val

    recorder = Recorder(torch.fx.GraphModule(copy.deepcopy(module), graph))
    with mode:
        try:
            recorder.run(*inputs)
        except NotImplementedError:
            raise
        except Exception:  # the checks are a bonus: the replay does not need them
            pass


def _neither(module, export_failure, trace_error):
    return (
        f"from_torch: neither torch.export nor torch.fx symbolic tracing could capture "
        f"{type(module).__name__}.forward.\n"
        f"  torch.export: {export_failure}\n"
        f"  torch.fx: {first_line(trace_error)}\n"
        "What to do: Python control flow on tensor values (`if x.sum() > 0:`) or sizes taken "
        "from values cannot be captured by either: compute both branches and pick with "
        "torch.where, keep shapes fixed. Output containers torch.export does not know can be "
        "registered (torch.export.register_dataclass, torch.utils._pytree). Or write the "
        "jaxdl twin by hand and load the torch state_dict. See docs/interop.md.")


def _attribute(module, qualname):
    return functools.reduce(getattr, qualname.split("."), module)
