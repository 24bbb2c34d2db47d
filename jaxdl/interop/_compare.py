"""`compare`: run a torch model and its jaxdl port side by side, layer by layer.

Every sub-module's output is captured by path: on the torch side with forward
hooks, on the jaxdl side by wrapping each sub-module's `forward` for the
duration of the call (restored afterwards). With a loss, every parameter's
gradient is compared too. The report says where a port first goes wrong.
"""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from jaxdl._extras import require
from jaxdl._module import to_numpy
from jaxdl._transforms import jit as dl_jit
from jaxdl._transforms import value_and_grad


@dataclasses.dataclass
class CompareRow:
    """One compared array: a sub-module's output or a parameter's gradient.

    `max_rel` is the largest |jaxdl - torch| / |torch| over elements where
    |torch| > atol (smaller entries are judged by atol alone); `ok` is numpy's
    allclose rule, |jaxdl - torch| <= atol + rtol * |torch| everywhere.
    """

    path: str
    kind: str  # "output" or "grad"
    shape: tuple
    max_abs: float
    max_rel: float
    ok: bool


@dataclasses.dataclass
class CompareReport:
    rows: list
    rtol: float
    atol: float
    unmatched: dict  # {"torch": [paths run only by torch], "jaxdl": [...]}

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def first_divergence(self):
        """The first row beyond tolerance (outputs in execution order, then gradients)."""
        return next((row for row in self.rows if not row.ok), None)

    def to_dict(self) -> dict:
        first = self.first_divergence
        return {
            "ok": self.ok,
            "first_divergence": None if first is None else dataclasses.asdict(first),
            "rtol": self.rtol,
            "atol": self.atol,
            "rows": [dataclasses.asdict(row) for row in self.rows],
            "unmatched": self.unmatched,
        }

    def __str__(self):
        header = ("path", "kind", "shape", "max_abs", "max_rel", "ok")
        lines = [header] + [
            (row.path, row.kind, str(row.shape), f"{row.max_abs:.3g}", f"{row.max_rel:.3g}",
             "ok" if row.ok else "DIFF")
            for row in self.rows
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
                for line in lines]
        text.insert(1, "  ".join("-" * w for w in widths))
        first = self.first_divergence
        summary = (f"all {len(self.rows)} arrays within rtol={self.rtol:g}, atol={self.atol:g}"
                   if first is None else
                   f"first divergence: {first.path} ({first.kind}), max abs {first.max_abs:.3g}")
        text.append(summary)
        for side, paths in self.unmatched.items():
            if paths:
                text.append(f"run only by {side}: {', '.join(paths)}")
        return "\n".join(text)


def _compare_arrays(path, kind, actual, expected, rtol, atol) -> CompareRow:
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        return CompareRow(path, kind, f"{actual.shape} vs torch {expected.shape}",
                          math.inf, math.inf, False)
    if expected.size == 0:
        return CompareRow(path, kind, expected.shape, 0.0, 0.0, True)
    diff = np.abs(actual - expected)
    same_nan = np.isnan(actual) & np.isnan(expected)
    diff = np.where(same_nan, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    big = np.abs(expected) > atol
    max_rel = float(np.max(diff[big] / np.abs(expected[big]))) if big.any() else 0.0
    ok = bool(np.all(diff <= atol + rtol * np.abs(expected)))
    return CompareRow(path, kind, expected.shape, float(diff.max()), max_rel, ok)


def _leaves(tree):
    if isinstance(tree, tuple | list):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [] if tree is None else [tree]


def _display(path):
    return path or "<root>"


class _Recorder:
    """(path, leaf index or None, array) for every array leaf of every sub-module call."""

    def __init__(self):
        self.records = []
        self.calls = {}

    def clear(self):
        self.records, self.calls = [], {}

    def __call__(self, path, output):
        leaves = [leaf for leaf in _leaves(output) if hasattr(leaf, "shape")]
        count = self.calls[path] = self.calls.get(path, 0) + 1
        name = path if count == 1 else f"{path}#{count}"  # a module called again
        for i, leaf in enumerate(leaves):
            self.records.append((name, i if len(leaves) > 1 else None, leaf))


def _run_torch(torch, model, inputs, loss_fn):
    record, handles = _Recorder(), []
    for path, module in model.named_modules():
        def hook(module, args, output, path=path):
            # A copy: a later in-place op (ReLU(inplace=True)) would change the output.
            record(_display(path), torch.utils._pytree.tree_map_only(
                torch.Tensor, lambda t: t.detach().clone(), output))

        handles.append(module.register_forward_hook(hook))
    try:
        model.zero_grad(set_to_none=True)
        args = [torch.as_tensor(np.asarray(x)) for x in inputs]
        output = model(*args)
        grads = {}
        if loss_fn is not None:
            loss_fn(output).backward()
            grads = {name: p.grad for name, p in model.named_parameters()
                     if p.requires_grad and p.grad is not None}
    finally:
        for handle in handles:
            handle.remove()
    records = [(p, i, to_numpy(leaf)) for p, i, leaf in record.records]
    return records, {name: to_numpy(g) for name, g in grads.items()}


def _run_jaxdl(model, inputs, loss_fn, use_jit):
    record, wrapped = _Recorder(), []

    def wrap(module, path):
        original = module.forward

        def forward(*args, **kwargs):
            out = original(*args, **kwargs)
            record(_display(path), out)
            return out

        module.__dict__["forward"] = forward  # an instance attribute shadows the method
        wrapped.append(module)

    def step(model, *args):
        record.clear()  # a retraced attempt starts over
        if loss_fn is None:
            model(*args)
            return [leaf for _, _, leaf in record.records], {}

        def objective(m):
            return loss_fn(m(*args)), [leaf for _, _, leaf in record.records]

        # Outputs captured inside the differentiated function leave it as aux values.
        (_, leaves), grads = value_and_grad(objective, has_aux=True)(model)
        return leaves, dict(grads)

    args = [jnp.asarray(np.asarray(x)) for x in inputs]
    try:
        for path, module in model.named_modules():
            wrap(module, path)
        leaves, grads = (dl_jit(step, donate=False) if use_jit else step)(model, *args)
    finally:
        for module in wrapped:
            module.__dict__.pop("forward", None)
    records = [(p, i, np.asarray(leaf)) for (p, i, _), leaf in zip(record.records, leaves)]
    return records, {name: np.asarray(g) for name, g in grads.items()}


def compare(torch_model, jaxdl_model, inputs, loss_fn=None, *, rtol: float = 1e-4,
            atol: float = 1e-5, jit: bool = True) -> CompareReport:
    """Run both models on the same inputs; compare every sub-module output and gradient.

    Arguments:
        torch_model: the reference `torch.nn.Module`.
        jaxdl_model: its port (`from_torch` or hand-written, same sub-module paths).
        inputs: one array or a tuple of arrays (numpy, jax or torch), the positional
            arguments of both forwards.
        loss_fn: optional; `loss_fn(output) -> scalar` working on both torch and jax
            arrays, or a pair `(torch_loss_fn, jaxdl_loss_fn)`. With it, every trainable
            parameter's gradient is compared too.
        rtol, atol: tolerance, numpy's allclose rule per element.
        jit: run the jaxdl side as one compiled step (fast); False runs it eagerly, op by
            op, e.g. to step through a forward in a debugger.

    Returns:
        A `CompareReport`: `.rows` (path, kind, shape, max_abs, max_rel, ok) with outputs in
        execution order (a module's output follows its children's) then gradients,
        `.first_divergence`, `.ok`, `.to_dict()`, and a table as `str(report)`.

    Put both models in the same mode; in training mode dropout draws different masks on
    each side. Both models run once (BatchNorm statistics advance once each).
    """
    torch = require("torch", "torch", "dl.interop.compare")

    inputs = tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)
    inputs = tuple(to_numpy(x) for x in inputs)
    torch_loss, jax_loss = (loss_fn if isinstance(loss_fn, tuple | list)
                            else (loss_fn, loss_fn))
    t_records, t_grads = _run_torch(torch, torch_model, inputs, torch_loss)
    j_records, j_grads = _run_jaxdl(jaxdl_model, inputs, jax_loss, jit)

    j_outputs = {(p, i): leaf for p, i, leaf in j_records}
    rows = []
    for path, index, expected in t_records:
        if (path, index) in j_outputs:
            label = path if index is None else f"{path}[{index}]"
            rows.append(_compare_arrays(label, "output", j_outputs[(path, index)], expected,
                                        rtol, atol))
    for name, expected in t_grads.items():
        actual = j_grads.get(name)
        if actual is None:
            rows.append(CompareRow(name, "grad", expected.shape, math.inf, math.inf, False))
        else:
            rows.append(_compare_arrays(name, "grad", actual, expected, rtol, atol))
    t_paths = {p for p, _, _ in t_records}
    j_paths = {p for p, _, _ in j_records}
    unmatched = {"torch": sorted(t_paths - j_paths), "jaxdl": sorted(j_paths - t_paths)}
    return CompareReport(rows, rtol, atol, unmatched)
