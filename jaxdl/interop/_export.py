"""`from_torch` for a module with its own forward: capture it with torch.export, replay it.

The torch module is exported in training mode and, if code outside its stock
layers reads a `training` flag (export specialises such code), again in
evaluation mode. From each graph we build a `_Program` (`_replay.py`): a flat
list of steps over numbered slots. The nodes of a stock layer that jaxdl has are
not replayed; instead one step calls the converted jaxdl layer with the
arguments of that call (read from the data flow, or from the signature that
`preserve_module_call_signature` keeps for layers with several inputs or
outputs), so the layer follows its own train/eval flag, owns its parameters and
shows up in `compare`. Every other node goes through the one aten table
(`_aten.ATEN`).

The converted model mirrors torch's module tree: stock layers become jaxdl
layers, every other module a container holding its own parameters and buffers
under torch's names, so state_dict keys are torch's.
"""

import contextlib
import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._module import Parameter, to_numpy
from jaxdl.interop._aten import ATEN, NEEDS_KEY
from jaxdl.interop._replay import CapturedModule, ExportedModule, _Program, _Ref, _Step

_SHAPE_OPS = ("sym_size.int", "sym_numel")  # cheap: replayed even inside a stock layer


class _Call:
    """A call of a stock layer: input leaves ("ref", node name) or ("const", value) with
    torch's pytree spec of (args, kwargs) (None: one positional tensor), output node names
    with their spec (None: one tensor)."""

    def __init__(self, path, inputs, in_spec, outputs, out_spec):
        self.path, self.inputs, self.in_spec = path, inputs, in_spec
        self.outputs, self.out_spec = outputs, out_spec


def _np_dtype(torch, dtype):
    if dtype == torch.bool:
        return np.dtype(bool)
    name = str(dtype).removeprefix("torch.")
    return jax.dtypes.canonicalize_dtype(np.dtype(name if name != "bfloat16" else jnp.bfloat16))


def _user_frame(node) -> str:
    """The last frame of the node's stack trace outside torch and this package (the fx
    tracer's hook): the user's line."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
    torch_dir = os.sep + "torch" + os.sep
    user = [f for f in frames if torch_dir not in f[0]
            and os.path.dirname(f[0]) != os.path.dirname(__file__)] or frames
    if not user:
        return "no stack trace recorded"
    path, line, fn, code = user[-1]
    return f'File "{path}", line {line}, in {fn}: {code.strip()}'


def data_dependent(node) -> str:
    """The message for an operation whose output shape depends on tensor values."""
    return (f"from_torch: the shape of {node.target} depends on the values in a tensor "
            f"({_user_frame(node)}); a compiled JAX program needs shapes known from the input "
            "shapes. Rewrite it with fixed shapes (e.g. torch.where instead of boolean "
            "indexing).")


def _op_name(target) -> tuple[str, str]:
    """(table key tried first, fallback key) of a graph node's target."""
    overload = getattr(target, "_overloadname", None)
    if overload is not None:  # an OpOverload: aten.add.Tensor
        packet = target.overloadpacket.__name__
        return f"{packet}.{overload}", packet
    module = getattr(target, "__module__", "") or ""
    module = {"_operator": "operator"}.get(module, module)
    return f"{module}.{target.__name__}", f"{module}.{target.__name__}"


def _lookup(target):
    """The table entry of a node, and whether it is the functional form of an in-place op."""
    first, second = _op_name(target)
    for key in (first, second):
        if key in ATEN:
            return ATEN[key], key, False
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable and second.endswith("_"):
        base = second[:-1]
        for key in (f"{base}.{target._overloadname}", base):
            if key in ATEN:
                return ATEN[key], key, True
    return None, first, False


def _is_view(node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def _expect(torch, val):
    if isinstance(val, torch.Tensor):
        dims = tuple(d if isinstance(d, int) else None for d in val.shape)
        return dims, _np_dtype(torch, val.dtype)
    if isinstance(val, list | tuple) and val and all(isinstance(v, torch.Tensor) for v in val):
        return [_expect(torch, v) for v in val]
    return None


class _Builder:
    """Turns one ExportedProgram into a `_Program`."""

    def __init__(self, torch, ep, units, preserved):
        self.torch, self.ep, self.units, self.preserved = torch, ep, units, preserved
        self.demoted = set()  # nn_module_stack keys of calls replayed op by op
        self.program = _Program()
        self.slots = {}  # node name -> slot of its current value (in-place ops rebind)
        self.buffers = {}  # placeholder name -> state_dict name, for buffers
        self.mutable = set()  # names of nodes that may be updated in place
        self.initial = {}  # placeholder name -> its slot before any in-place update

    def ref(self, node, user):
        if node.name not in self.slots:
            raise NotImplementedError(
                f"from_torch: {node.name}, computed inside a stock layer, is used outside its "
                f"call signature by {user.target} ({_user_frame(user)})")
        return _Ref(self.slots[node.name])

    def convert_args(self, value, user):
        torch = self.torch
        if isinstance(value, torch.fx.Node):
            return self.ref(value, user)
        if isinstance(value, list):  # fx's immutable_list too: plain lists for _resolve
            return [self.convert_args(v, user) for v in value]
        if isinstance(value, tuple):
            items = [self.convert_args(v, user) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, dict):
            return {k: self.convert_args(v, user) for k, v in value.items()}
        if isinstance(value, torch.dtype):
            return _np_dtype(torch, value)
        if isinstance(value, torch.device | torch.layout | torch.memory_format):
            return None
        if isinstance(value, torch.Tensor):
            return jnp.asarray(to_numpy(value))
        return value

    def build(self):
        ep, program = self.ep, self.program
        signature = ep.graph_signature
        params, buffers = signature.inputs_to_parameters, signature.inputs_to_buffers
        constants = signature.inputs_to_lifted_tensor_constants
        self.buffers = dict(buffers)
        self.state_names = params | buffers
        self.mutable = set(buffers)
        calls = self.unit_calls()
        nodes = list(ep.graph.nodes)
        for node in nodes:
            if node.op == "placeholder":
                self.placeholder(node, params, buffers, constants)
            elif node.op == "call_function":
                unit = self.unit_of(node)
                unit = unit and unit[0]
                if node.name in calls:
                    self.emit_call(calls, node)
                if unit is None or (_op_name(node.target)[0] in _SHAPE_OPS and all(
                        n.name in self.slots for n in node.all_input_nodes)):
                    self.emit_op(node)
                elif node.name not in self.slots:
                    self.check_unit_mutation(node, unit, calls)
            elif node.op == "output":
                self.outputs(node)
            elif node.op == "get_attr":  # a sub-graph: `with torch.no_grad():` in forward
                raise CaptureFailed(
                    f"torch.export recorded {node.target} as a sub-graph (torch.no_grad() or "
                    "set_grad_enabled in forward), which jaxdl does not replay")
            else:
                raise NotImplementedError(f"from_torch: graph node {node.op} {node.target} "
                                          "is not supported")
        program.writes = [(*_split(self.buffers[name]), self.slots[name])
                          for name in buffers if self.slots[name] != self.initial[name]]
        return program

    def outputs(self, node):
        kinds = self.torch.export.graph_signature.OutputKind
        leaves = []
        for spec, value in zip(self.ep.graph_signature.output_specs, node.args[0]):
            if spec.kind == kinds.USER_OUTPUT:
                leaves.append(self.convert_args(value, node))
            elif spec.kind == kinds.BUFFER_MUTATION:  # a functional graph's buffer update
                self.slots[self.initial_name(spec.target)] = self.ref(value, node).index
            else:
                raise NotImplementedError(f"from_torch: graph output of kind {spec.kind} "
                                          "is not supported")
        spec = self.ep.call_spec.out_spec
        self.program.output = self.torch.utils._pytree.tree_unflatten(leaves, spec)

    def initial_name(self, buffer):
        return next(name for name, target in self.buffers.items() if target == buffer)

    def placeholder(self, node, params, buffers, constants):
        program, torch = self.program, self.torch
        slot = self.slots[node.name] = program.new_slot()
        self.initial[node.name] = slot
        if node.name in params or node.name in buffers:
            program.state.append((slot, *_split((params | buffers)[node.name])))
        elif node.name in constants:
            program.constants.append(
                (slot, jnp.asarray(to_numpy(self.ep.constants[constants[node.name]]))))
        else:
            val = node.meta["val"]
            if not isinstance(val, torch.Tensor):
                raise TypeError(f"from_torch: example input {node.name} is "
                                f"{type(val).__name__}; only tensors are supported")
            dims = []
            for d in val.shape:
                if isinstance(d, int):
                    dims.append(d)
                else:
                    expr = d.node.expr
                    dims.append(str(expr) if expr.is_Symbol else None)
            program.inputs.append((slot, node.name, dims, _np_dtype(torch, val.dtype).kind))

    def unit_of(self, node):
        """(path, call key) of the stock layer call a node belongs to, or None."""
        for key, (path, _) in node.meta.get("nn_module_stack", {}).items():
            if path in self.units:
                return None if key in self.demoted else (path, key)
        return None

    def unit_calls(self):
        """output node name -> `_Call` for every call of a stock layer.

        Layers with several inputs or outputs (RNNs, attention, losses) were exported with
        their call signature preserved. For the others (preserving costs export time) the
        call is read from the data flow: the one tensor flowing in from outside the call and
        the one leaving it. A call that does not fit is replayed operator by operator.
        """
        calls = {}
        for entry in self.ep.module_call_graph:
            path = entry.fqn.split("@")[0]
            if path in self.units and entry.signature is not None:
                sig = entry.signature
                call = _Call(path, [("const", a.value) if hasattr(a, "value") else ("ref", a.name)
                                    for a in sig.inputs], sig.in_spec,
                             [None if hasattr(o, "value") else o.name for o in sig.outputs],
                             sig.out_spec)
                for name in call.outputs:
                    if name is not None:
                        calls[name] = call
        groups = {}
        for node in self.ep.graph.nodes:
            unit = self.unit_of(node) if node.op == "call_function" else None
            if unit is not None and unit[0] not in self.preserved:
                groups.setdefault(unit, []).append(node)
        for (path, key), members in groups.items():
            inside = set(members)
            own = {name for name, target in self.state_names.items()
                   if target.startswith(path + ".")}
            inputs = {n for m in members for n in m.all_input_nodes
                      if n not in inside and n.name not in own and self.is_tensor(n)}
            outputs = [m for m in members if self.is_tensor(m)
                       and any(u not in inside for u in m.users)]
            if len(inputs) == 1 and len(outputs) == 1:
                calls[outputs[0].name] = _Call(path, [("ref", inputs.pop().name)], None,
                                               [outputs[0].name], None)
            else:
                self.demoted.add(key)
        return calls

    def is_tensor(self, node):
        return isinstance(node.meta.get("val"), self.torch.Tensor)

    def emit_call(self, calls, node):
        call = calls[node.name]
        if any(name in self.slots for name in call.outputs if name is not None):
            return  # already emitted at an earlier output of the same call
        pytree = self.torch.utils._pytree
        leaves = [value if kind == "const" else self.ref_by_name(value, node)
                  for kind, value in call.inputs]
        args = ((leaves[0],), {}) if call.in_spec is None else pytree.tree_unflatten(
            leaves, call.in_spec)
        outs = []
        for name in call.outputs:
            if name is not None:
                self.slots[name] = self.program.new_slot()
            outs.append(None if name is None else _Ref(self.slots[name]))
        template = outs[0] if call.out_spec is None else pytree.tree_unflatten(outs,
                                                                                call.out_spec)
        self.program.steps.append(_Step(module=call.path, args=args, out=template,
                                        what=f"{call.path} ({_user_frame(node)})"))

    def ref_by_name(self, name, user):
        if name not in self.slots:
            raise NotImplementedError(f"from_torch: input {name} of a stock layer call is not "
                                      f"available ({_user_frame(user)})")
        return _Ref(self.slots[name])

    def check_unit_mutation(self, node, unit, calls):
        """A stock layer that updates its own input in place (ReLU(inplace=True)): later
        readers of that input see the layer's output, as in torch."""
        schema = getattr(node.target, "_schema", None)
        if schema is None or not schema.is_mutable:
            return
        target = node.args[0]
        if (self.unit_of(target) or (None,))[0] == unit or target.op == "placeholder":
            return  # the layer's own state (BatchNorm's counters): the jaxdl layer updates it
        if node.name in self.slots:
            self.slots[target.name] = self.slots[node.name]
            return
        raise NotImplementedError(f"from_torch: {unit} updates its input in place in a way "
                                  f"jaxdl cannot follow ({_user_frame(node)})")

    def emit_op(self, node):
        torch = self.torch
        symbolic = torch.fx.experimental.symbolic_shapes
        val = node.meta.get("val")
        where = _user_frame(node)
        if val is not None and symbolic.free_unbacked_symbols(val):
            raise NotImplementedError(data_dependent(node))
        fn, key, in_place = _lookup(node.target)
        if fn is None:
            raise NotImplementedError(
                f"from_torch: {node.target} ({where}) has no entry in jaxdl's aten table "
                "(jaxdl/interop/_aten.py), so this forward cannot be converted")
        if key == "batch_norm" and node.args[5] and node.args[3] is not None:
            raise NotImplementedError(
                f"from_torch: F.batch_norm in training mode with running statistics ({where}) "
                "updates them in place inside the operator; use nn.BatchNorm*d, which converts "
                "to jaxdl's layer")
        args = self.convert_args(node.args, node)
        kwargs = self.convert_args(dict(node.kwargs), node)
        slot = self.program.new_slot()
        self.program.steps.append(_Step(fn=fn, args=args, kwargs=kwargs, out=slot,
                                        random=key in NEEDS_KEY, expect=_expect(torch, val),
                                        what=f"{node.target} ({where})"))
        self.slots[node.name] = slot
        if in_place:
            self.rebind(node, where)

    def rebind(self, node, where):
        target = node.args[0]
        if (_is_view(target) or any(_is_view(u) for u in target.users)
                or (target.op == "placeholder" and target.name not in self.mutable)):
            raise NotImplementedError(
                f"from_torch: {node.target} ({where}) writes in place into "
                f"{'a view of a tensor' if _is_view(target) else target.name}, which jaxdl "
                "cannot follow; write it out of place (e.g. torch.where, torch.cat)")
        self.slots[target.name] = self.slots[node.name]


def _split(name):
    owner, _, attr = name.rpartition(".")
    return owner, attr


_classes = {}


def _named_class(base, name):
    """A subclass of `base` with the torch class's name, so repr reads like torch's."""
    key = (base, name)
    if key not in _classes:
        _classes[key] = type(name, (base,), {"__module__": __name__})
    return _classes[key]


def _mirror(torch, module, path, units, root=None):
    """jaxdl counterpart of a torch module tree: converted stock layers, containers elsewhere."""
    if path in units:
        return units[path]
    twin = root if root is not None else _named_class(CapturedModule, type(module).__name__)()
    for name, param in module._parameters.items():
        twin.register_parameter(name, None if param is None else Parameter(
            jnp.asarray(to_numpy(param)), requires_grad=param.requires_grad))
    for name, buffer in module._buffers.items():
        twin.register_buffer(name, None if buffer is None else jnp.asarray(to_numpy(buffer)),
                             persistent=name not in module._non_persistent_buffers_set)
    for name, child in module._modules.items():
        if child is not None:
            twin.add_module(name, _mirror(torch, child, f"{path}.{name}" if path else name,
                                          units))
    return twin


def _several_inputs_or_outputs(torch, module):
    """Stock layers whose calls need torch.export's preserved signature."""
    nn = torch.nn
    return isinstance(module, nn.RNNBase | nn.RNNCellBase | nn.MultiheadAttention
                      | nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
                      | nn.TransformerEncoder | nn.TransformerDecoder | nn.Transformer
                      | nn.Bilinear | nn.modules.loss._Loss | nn.CosineSimilarity
                      | nn.PairwiseDistance | nn.EmbeddingBag)


def _export(torch, module, example_inputs, dynamic_shapes, preserved):
    """torch.export in the module's current mode, stock layers' call signatures kept."""
    if dynamic_shapes == "batch":
        dims = torch.export.Dim.AUTO
        dynamic_shapes = tuple({0: dims} if x.ndim else None for x in example_inputs)
    try:
        with warnings.catch_warnings():  # RNNs re-assign their weight list; harmless here
            warnings.filterwarnings("ignore", "The tensor attributes .* were assigned during")
            return torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes,
                                       preserve_module_call_signature=tuple(preserved),
                                       strict=False)
    except Exception as err:  # torch's own error says what and where; the caller adds to it
        raise CaptureFailed(first_line(err)) from err


class CaptureFailed(NotImplementedError):
    """torch.export raised: the forward is traced with torch.fx instead (`_fx.py`)."""


def first_line(err) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def convert_exported(torch, module, example_inputs, dynamic_shapes, convert_stock):
    """The jaxdl module for a custom torch module (see the module docstring)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"from_torch: example_inputs[{i}] is {type(x).__name__}; "
                            "pass torch tensors (the positional arguments of forward)")
    units = {}
    _find_units(torch, module, "", units, convert_stock)
    modules = dict(module.named_modules())
    preserved = {path for path in units if _several_inputs_or_outputs(torch, modules[path])}

    def capture(training):
        ep = _export(torch, module, example_inputs, dynamic_shapes, preserved)
        program = _Builder(torch, ep, units, preserved).build()
        for symbol, bounds in ep.range_constraints.items():
            high = bounds.upper
            program.ranges[str(symbol)] = (int(bounds.lower),
                                           int(high) if high.is_Integer else None)
        return program

    try:
        programs = capture_modes(module, units, capture)
    except CaptureFailed as failure:  # torch.export refused it: try torch.fx symbolic tracing
        from jaxdl.interop._fx import convert_traced

        return convert_traced(torch, module, example_inputs, dynamic_shapes, units, failure)
    return converted(torch, module, units, programs)


def capture_modes(module, units, capture):
    """{True: program, False: program}: `capture(training)` run in training mode and, if
    code outside the stock layers read a `training` flag meanwhile, again in evaluation
    mode (else one program serves both). Every module's mode is restored afterwards."""
    modules = dict(module.named_modules())
    modes = {name: m.training for name, m in modules.items()}
    programs = {}
    try:
        for training in (True, False):
            module.train(training)
            reads = set()
            with _watch_training(modules, units, reads):
                programs[training] = capture(training)
            if not reads:  # no code outside the stock layers looked at the mode
                programs[not training] = programs[training]
                break
    finally:
        for name, m in modules.items():
            m.training = modes[name]
    return programs


def converted(torch, module, units, programs):
    """The converted module: a root replaying `programs` over the mirrored module tree."""
    root = _named_class(ExportedModule, type(module).__name__)(programs)
    return _tie(module, _mirror(torch, module, "", units, root=root))


def _tie(module, twin):
    """One Parameter under several names in torch (a GPT's output layer sharing the
    embedding) becomes one slot of the store under those names: one array, the gradients
    of every use summed, one optimizer update, every key in state_dict - as in torch."""
    first = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        owner, _, attr = name.rpartition(".")
        if id(param) not in first:
            first[id(param)] = (owner, attr)
            continue
        source_owner, source_attr = first[id(param)]
        source, target = twin.get_submodule(source_owner), twin.get_submodule(owner)
        target._slots[attr] = source._slots[source_attr]
        target._store.bump()
    return twin


def _watched_class(cls):
    """`cls` with `training` as a property that records each read (see _watch_training)."""
    if cls not in _watched:
        def read(self):
            for reads in _watching:
                reads.add(id(self))
            return self.__dict__["training"]

        def write(self, value):
            self.__dict__["training"] = value

        _watched[cls] = type(cls.__name__, (cls,), {
            "training": property(read, write), "__module__": cls.__module__,
            "__qualname__": cls.__qualname__})
    return _watched[cls]


_watched = {}
_watching = []


@contextlib.contextmanager
def _watch_training(modules, units, reads):
    """Record in `reads` whether code outside the stock layers reads a module's `training`
    flag while exporting. If nothing does, the graph is the same in both modes and one
    export serves both (an export of a ResNet-50 takes seconds). The converted stock layers
    follow their own flags at run time, so their reads do not count."""
    swapped = []
    for path, m in modules.items():
        if not any(path == u or path.startswith(u + ".") for u in units):
            swapped.append((m, type(m)))
            m.__class__ = _watched_class(type(m))
    _watching.append(reads)
    try:
        yield
    finally:
        _watching.remove(reads)
        for m, cls in swapped:
            m.__class__ = cls


def _find_units(torch, module, path, units, convert_stock):
    """Stock layers jaxdl has (outermost first): they run as jaxdl layers."""
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    if path and not isinstance(module, containers):
        try:
            units[path] = convert_stock(module, path)
            return
        except NotImplementedError:
            pass  # a custom module, or a stock one jaxdl lacks: replay its operators
    for name, child in module.named_children():
        _find_units(torch, child, f"{path}.{name}" if path else name, units, convert_stock)
