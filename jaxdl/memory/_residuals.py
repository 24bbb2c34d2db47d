"""Residual accounting: what a backward pass keeps from the forward, where, and for which layer.

Like JAX's internal `saved_residuals`, this traces `jax.vjp` of a loss
(abstract inputs are enough: nothing runs) and reads the residual outputs of the
jaxpr. It also attributes each residual to a layer (the `checkpoint_name` tag on
its value, else the innermost `jax.named_scope`, which `offload` sets to the
layer path), tells host-offloaded residuals apart by their memory space, and
separates activations (values that depend on the inputs) from values computed
from parameters alone (e.g. a transposed weight) and from broadcast constants
(not counted: XLA folds them into their users).
"""

import dataclasses

import jax
import numpy as np

from jaxdl._jax_compat import HOST_MEMORY, innermost_scope, name_p
from jaxdl._jax_compat import jaxpr_core as core
from jaxdl._module import Module
from jaxdl._store import PARAM, STATE, Stateful
from jaxdl._transforms import _retrying, _run_threaded, _stores_of
from jaxdl.memory._policies import tagged

# Primitives that move or round a value without making it another layer's value.
_PASS_THROUGH = ("device_put", "reduce_precision", "copy", "copy_p")


def nbytes(x) -> int:
    return int(np.prod(x.shape, dtype=np.int64)) * x.dtype.itemsize  # key dtypes have one too


def abstract(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


@dataclasses.dataclass
class Residual:
    """One value kept for the backward pass."""

    layer: str
    bytes: int
    on_host: bool
    # "activation", "parameter-derived", "broadcast constant" (not counted: XLA folds it),
    # "parameter", "input", "constant"
    source: str


@dataclasses.dataclass
class Traced:
    """A loss traced for accounting: its vjp jaxpr, residuals and the pieces to rebuild it."""

    residuals: list[Residual]
    vjp_jaxpr: core.ClosedJaxpr
    loss: object  # pure loss(train_values, other_values, inputs)
    abstract_args: tuple  # (train, other, inputs) as ShapeDtypeStructs
    stores: list
    train_slots: list  # [(store index, slot index)] differentiated
    other_slots: list  # [(store index, slot index)] the rest of the stores
    workspace_bytes: int


def _scope_name(eqn) -> str:
    return innermost_scope(eqn.source_info.name_stack) or "(outside layers)"


def _layer_of(var, producers) -> str:
    eqn = producers[var]
    while eqn.primitive.name in _PASS_THROUGH and eqn.invars[0] in producers:
        eqn = producers[eqn.invars[0]]
    if eqn.primitive is name_p:
        return eqn.params["name"]
    return _scope_name(eqn)


def _on_host(aval) -> bool:
    return getattr(aval, "memory_space", None) == HOST_MEMORY


def trace(fn, args) -> Traced:
    """Trace the vjp of `fn(*args)` (a scalar loss) with respect to trainable parameters."""
    modules = [a for a in args if isinstance(a, Module)]
    if not modules:
        raise TypeError("dl.memory.report: fn's arguments must include the model (an nn.Module)")

    def attempt(stores):
        with _all_tagged(modules):
            return _trace(fn, args, stores)

    return _retrying(attempt, _stores_of(args))


class _all_tagged:  # noqa: N801 - a context manager over several modules
    def __init__(self, modules):
        self.contexts = [tagged(m) for m in modules]

    def __enter__(self):
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc):
        for c in self.contexts:
            c.__exit__(*exc)


def _trace(fn, args, stores) -> Traced:
    train_slots = [(s, i) for s, store in enumerate(stores)
                   for i, kind in enumerate(store.kinds) if kind == PARAM and store.trainable[i]]
    train_set = set(train_slots)
    other_slots = [(s, i) for s, store in enumerate(stores) for i in range(len(store.values))
                   if (s, i) not in train_set]
    positions = [k for k, a in enumerate(args) if not isinstance(a, Stateful)]

    def loss(train, other, inputs):
        values = [list(store.values) for store in stores]
        for (s, i), v in zip(train_slots, train):
            values[s][i] = v
        for (s, i), v in zip(other_slots, other):
            values[s][i] = v
        call_args = list(args)
        for k, v in zip(positions, inputs):
            call_args[k] = v
        out, _ = _run_threaded(lambda: fn(*call_args), stores, values)
        if not hasattr(out, "shape") or out.shape != ():
            raise ValueError(
                "dl.memory.report: fn(model, *inputs) must return a scalar loss, got "
                f"{getattr(out, 'shape', type(out).__name__)}"
            )
        return out

    def as_abstract(v):
        return None if v is None else jax.tree.map(abstract, v)

    abstract_args = (
        [abstract(stores[s].values[i]) for s, i in train_slots],
        [as_abstract(stores[s].values[i]) for s, i in other_slots],
        [as_abstract(args[k]) for k in positions],
    )
    closed, shapes = jax.make_jaxpr(
        lambda t, o, x: jax.vjp(lambda t: loss(t, o, x), t), return_shape=True
    )(*abstract_args)
    n_res = len(jax.tree.leaves(shapes[1]))
    jaxpr = closed.jaxpr
    n_train = len(jax.tree.leaves(abstract_args[0]))
    n_other = len(jax.tree.leaves(abstract_args[1]))
    arg_kind = {}
    for k, v in enumerate(jaxpr.invars):
        arg_kind[v] = "parameter" if k < n_train + n_other else "input"
    depends = {v for v, kind in arg_kind.items() if kind == "input"}
    producers = {}
    workspace = 0
    for eqn in jaxpr.eqns:
        activations = [v for v in eqn.invars if not isinstance(v, core.Literal) and v in depends]
        if activations:
            depends.update(eqn.outvars)
            if eqn.primitive.name not in _PASS_THROUGH:
                # Backward of one op holds its input activations, their gradients and its
                # output gradient (forward holds less: inputs and outputs).
                out = sum(nbytes(v.aval) for v in eqn.outvars)
                workspace = max(workspace, 2 * sum(nbytes(v.aval) for v in activations) + out)
        for v in eqn.outvars:
            producers[v] = eqn
    residuals, seen = [], set()
    for var in jaxpr.outvars[len(jaxpr.outvars) - n_res:]:
        if isinstance(var, core.Literal) or var in seen:
            continue
        seen.add(var)
        size, host = nbytes(var.aval), _on_host(var.aval)
        if var in arg_kind:
            residuals.append(Residual("(arguments)", size, host, arg_kind[var]))
        elif var not in producers:
            residuals.append(Residual("(constants)", size, host, "constant"))
        else:
            if var in depends:
                source = "activation"
            elif producers[var].primitive.name == "broadcast_in_dim":
                # e.g. the zeros ReLU's derivative selects from: XLA folds such broadcasts of
                # constants into their users instead of keeping activation-sized buffers.
                source = "broadcast constant"
            else:
                source = "parameter-derived"
            residuals.append(Residual(_layer_of(var, producers), size, host, source))
    return Traced(residuals, closed, loss, abstract_args, stores, train_slots, other_slots,
                  workspace)


def store_bytes(stores, train_slots) -> dict:
    """Bytes of parameters/buffers, of trainable parameters, and of optimizer state slots."""
    state = params = 0
    for store in stores:
        for value, kind in zip(store.values, store.kinds):
            if value is None:
                continue
            if kind == STATE:
                state += nbytes(value)
            else:
                params += nbytes(value)
    trainable = sum(nbytes(stores[s].values[i]) for s, i in train_slots)
    return {"params": params, "trainable": trainable, "optimizer_state": state}


def count_flops(jaxpr) -> int:
    """Multiply-add FLOPs (x2) of the convolutions and matmuls in `jaxpr`, sub-jaxprs included."""
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval
            contracted = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
            total += 2 * contracted * int(np.prod(eqn.outvars[0].aval.shape, dtype=np.int64))
        elif name == "conv_general_dilated":
            rhs = eqn.invars[1].aval.shape
            dn = eqn.params["dimension_numbers"]
            out_feature = rhs[dn.rhs_spec[0]]
            per_output = int(np.prod(rhs, dtype=np.int64)) // out_feature
            total += 2 * per_output * int(np.prod(eqn.outvars[0].aval.shape, dtype=np.int64))
        for sub in core.jaxprs_in_params(eqn.params):
            total += count_flops(sub)
    return total
