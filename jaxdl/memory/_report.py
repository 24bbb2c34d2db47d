"""`dl.memory.report`: where a training step's memory goes, per layer, without running it."""

import dataclasses

import jax

from jaxdl._module import Module
from jaxdl._store import Stateful
from jaxdl.memory._policies import policy_of
from jaxdl.memory._residuals import count_flops, nbytes, store_bytes, trace


def _fmt(n) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


@dataclasses.dataclass
class MemoryReport:
    """Memory of one training step of `fn(model, *inputs)`, as planned from its trace.

    Attributes:
        policy: the configuration the model ran under ("none", "conv", "all", "remat").
        by_layer: {layer path: {"device": bytes, "host": bytes}} of activation residuals.
        device_bytes / host_bytes: activation residuals kept on the device / offloaded.
        param_derived_bytes: residuals computed from parameters alone (e.g. a transposed
            weight): on the device, not activations.
        param_bytes: parameters and buffers; gradient_bytes: trainable parameters;
        optimizer_bytes: optimizer state (the store's optimizer slots when an optimizer
            was built on the model, else 2x trainable parameters, as Adam keeps).
        input_bytes: the inputs to `fn` that are not modules.
        workspace_bytes: the largest single op's working set in backward: its input
            activations, their gradients and its output gradient (convolution algorithm
            workspaces are not counted).
        planned_peak_bytes: the sum of all of the above that lives on the device.
        compiled: XLA's memory analysis of the compiled step ({} when not compiled);
            on CPU it does not show offload or remat savings.
        measured_peak_bytes: `peak_bytes_in_use` after running the step on a GPU, else None.
        forward_flops / step_flops: conv+matmul FLOPs of the forward and of the whole step.
    """

    policy: str
    by_layer: dict
    device_bytes: int
    host_bytes: int
    param_derived_bytes: int
    param_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    input_bytes: int
    workspace_bytes: int
    compiled: dict = dataclasses.field(default_factory=dict)
    measured_peak_bytes: int | None = None
    forward_flops: int = 0
    step_flops: int = 0

    @property
    def planned_peak_bytes(self) -> int:
        return sum(self.peak_parts().values())

    def peak_parts(self) -> dict:
        """The planned peak's components, by name."""
        return {
            "parameters": self.param_bytes,
            "gradients": self.gradient_bytes,
            "optimizer state": self.optimizer_bytes,
            "inputs": self.input_bytes,
            "device residuals": self.device_bytes + self.param_derived_bytes,
            "largest layer working set": self.workspace_bytes,
        }

    def _rows(self):
        rows = [(name, _fmt(b["device"]), _fmt(b["host"])) for name, b in self.by_layer.items()]
        rows.append(("TOTAL residuals", _fmt(self.device_bytes), _fmt(self.host_bytes)))
        return rows

    def _summary(self):
        lines = [(name, _fmt(value)) for name, value in self.peak_parts().items()]
        lines.append(("planned peak", _fmt(self.planned_peak_bytes)))
        for key, value in self.compiled.items():
            lines.append((f"compiled {key}", _fmt(value)))
        if self.measured_peak_bytes is not None:
            lines.append(("measured peak", _fmt(self.measured_peak_bytes)))
        return lines

    def __str__(self):
        rows = [("layer", "device", "host"), *self._rows()]
        width = max(len(r[0]) for r in rows)
        out = [f"MemoryReport (policy {self.policy!r}), activation residuals kept for backward:"]
        for name, dev, host in rows:
            out.append(f"  {name:<{width}}  {dev:>11}  {host:>11}")
        out.append("Planned device memory of one training step:")
        width = max(len(k) for k, _ in self._summary())
        out += [f"  {k:<{width}}  {v:>11}" for k, v in self._summary()]
        return "\n".join(out)

    def _repr_html_(self):
        def table(head, rows):
            cells = "".join(f"<th>{h}</th>" for h in head)
            body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
            return f"<table><tr>{cells}</tr>{body}</table>"

        return (f"<b>MemoryReport</b> (policy {self.policy!r})"
                + table(("layer", "device", "host"), self._rows())
                + table(("planned device memory", "bytes"), self._summary()))


def _is_concrete(x) -> bool:
    return all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(x))


def report(fn, *args, compiled: bool = True, measure: bool = True) -> MemoryReport:
    """Account the memory of a training step of `fn(model, *inputs) -> scalar loss`.

    Arguments:
        fn: the loss function; gradients are taken with respect to the trainable
            parameters of the module arguments.
        args: the model (and optionally an optimizer built on it) and inputs, which
            may be `jax.ShapeDtypeStruct`s: accounting traces, it does not run.
        compiled: also compile the step and include XLA's memory analysis (costly for
            big models on CPU; lowering needs no data).
        measure: on a GPU with concrete inputs, run the step once and record the
            device's `peak_bytes_in_use`.

    Returns:
        A `MemoryReport`.
    """
    traced = trace(fn, args)
    model = next(a for a in args if isinstance(a, Module))
    by_layer: dict[str, dict] = {}
    device = host = derived = 0
    for r in traced.residuals:
        if r.source == "activation":
            entry = by_layer.setdefault(r.layer, {"device": 0, "host": 0})
            entry["host" if r.on_host else "device"] += r.bytes
            if r.on_host:
                host += r.bytes
            else:
                device += r.bytes
        elif r.source in ("parameter-derived", "constant"):
            derived += r.bytes
    sizes = store_bytes(traced.stores, traced.train_slots)
    optimizer = sizes["optimizer_state"] or 2 * sizes["trainable"]
    inputs = sum(nbytes(x) for x in jax.tree.leaves(traced.abstract_args[2]))
    step = jax.grad(traced.loss)
    result = MemoryReport(
        policy=policy_of(model), by_layer=by_layer, device_bytes=device, host_bytes=host,
        param_derived_bytes=derived, param_bytes=sizes["params"],
        gradient_bytes=sizes["trainable"], optimizer_bytes=optimizer, input_bytes=inputs,
        workspace_bytes=traced.workspace_bytes,
        forward_flops=count_flops(jax.make_jaxpr(traced.loss)(*traced.abstract_args).jaxpr),
        step_flops=count_flops(jax.make_jaxpr(step)(*traced.abstract_args).jaxpr),
    )
    concrete = [a for a in args if not isinstance(a, Stateful)]
    measure = measure and jax.default_backend() == "gpu" and _is_concrete(concrete)
    if compiled or measure:
        _compile(result, step, traced, concrete, compiled, measure)
    return result


def _compile(result, step, traced, concrete, compiled, measure):
    executable = jax.jit(step).lower(*traced.abstract_args).compile()
    if compiled:
        analysis = executable.memory_analysis()
        if analysis is not None:
            result.compiled = {
                "arguments": analysis.argument_size_in_bytes,
                "outputs": analysis.output_size_in_bytes,
                "temporaries": analysis.temp_size_in_bytes,
                "host temporaries": getattr(analysis, "host_temp_size_in_bytes", 0),
            }
    if measure:
        train, other = ([traced.stores[s].values[i] for s, i in slots]
                        for slots in (traced.train_slots, traced.other_slots))
        jax.block_until_ready(executable(train, other, concrete))
        stats = jax.devices()[0].memory_stats() or {}
        result.measured_peak_bytes = stats.get("peak_bytes_in_use")
