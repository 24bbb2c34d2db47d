"""vDNN_dyn: choose the cheapest configuration whose planned peak fits a memory budget.

Each configuration (none, conv, all, remat) is traced on the example inputs
and accounted with `report` (nothing runs). Its estimated cost per step is
    max(0, 2 * host bytes / host_bandwidth - step FLOPs / flops_per_second)
  + extra FLOPs / flops_per_second
The first term is the transfer time (offload in forward, fetch in backward) not
hidden behind the step's own compute, as vDNN overlaps them; the second is the
recomputation (conv and matmul FLOPs beyond those of "none"). Defaults are the
vDNN paper's setting: PCIe 3 x16 (~12 GB/s) and a Maxwell Titan X (~6 TFLOP/s fp32).
"""

import dataclasses

import jax.numpy as jnp

from jaxdl.memory._policies import CONFIGURATIONS, OffloadState, install
from jaxdl.memory._report import _fmt, report


class BudgetError(ValueError):
    """No configuration fits the memory budget."""


@dataclasses.dataclass
class Candidate:
    configuration: str
    planned_peak_bytes: int
    device_bytes: int
    host_bytes: int
    transfer_s: float
    recompute_s: float
    fits: bool
    parts: dict

    @property
    def cost_s(self) -> float:
        return self.transfer_s + self.recompute_s


@dataclasses.dataclass
class Plan:
    """The planner's choice, every candidate it weighed, and why."""

    configuration: str
    budget_bytes: int
    candidates: list
    reason: str

    def __str__(self):
        lines = [f"vDNN_dyn plan: {self.configuration!r} for a budget of "
                 f"{_fmt(self.budget_bytes)} ({self.reason})",
                 f"  {'config':<7} {'planned peak':>12} {'residuals dev':>13} "
                 f"{'host':>11} {'est. cost/step':>14}  fits"]
        for c in self.candidates:
            lines.append(f"  {c.configuration:<7} {_fmt(c.planned_peak_bytes):>12} "
                         f"{_fmt(c.device_bytes):>13} {_fmt(c.host_bytes):>11} "
                         f"{c.cost_s * 1e3:>11.1f} ms  {'yes' if c.fits else 'no'}")
        return "\n".join(lines)


class _RestoredHooks:
    """Puts back the call hooks and offload state of a module tree on exit."""

    def __init__(self, model):
        self.saved = [(m, m.__dict__.get("_call_hook"), m.__dict__.get("_memory"))
                      for m in model.modules()]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for module, hook, memory in self.saved:
            module._set_call_hook(hook, memory)


def _sum_loss(output):
    return jnp.sum(output.astype(jnp.float32))


def plan(model, example_inputs, *, budget_bytes: int, loss_fn=None,
         host_bandwidth: float = 12e9, flops_per_second: float = 6e12) -> Plan:
    """Weigh none/conv/all/remat for `model` on `example_inputs` and pick the cheapest that fits.

    Arguments:
        model: the module; its hooks are left as they were.
        example_inputs: a tuple of the model's inputs (arrays or `jax.ShapeDtypeStruct`).
        budget_bytes: device memory available for one training step.
        loss_fn: `loss_fn(output) -> scalar` (default: the sum of the output).
            An optimizer built on the model is counted; without one, Adam's 2x params.
        host_bandwidth: bytes/s between device and pinned host memory.
        flops_per_second: the device's sustained conv/matmul rate.

    Returns:
        A `Plan`. Raises `BudgetError` (a ValueError) when no configuration fits,
        naming the minimum achievable bytes and what dominates it.
    """
    if not isinstance(example_inputs, tuple | list):
        example_inputs = (example_inputs,)
    loss_fn = loss_fn or _sum_loss

    def step_loss(m, *inputs):
        return loss_fn(m(*inputs))

    reports = {}
    with _RestoredHooks(model):
        for configuration in CONFIGURATIONS:
            install(model, configuration, OffloadState(configuration, configuration))
            reports[configuration] = report(step_loss, model, *example_inputs,
                                            compiled=False, measure=False)
    base_flops = reports["none"].step_flops
    compute_s = base_flops / flops_per_second
    candidates = [
        Candidate(
            configuration=name,
            planned_peak_bytes=r.planned_peak_bytes,
            device_bytes=r.device_bytes,
            host_bytes=r.host_bytes,
            transfer_s=max(0.0, 2 * r.host_bytes / host_bandwidth - compute_s),
            recompute_s=max(0, r.step_flops - base_flops) / flops_per_second,
            fits=r.planned_peak_bytes <= budget_bytes,
            parts=r.peak_parts(),
        )
        for name, r in reports.items()
    ]
    fitting = [c for c in candidates if c.fits]
    if not fitting:
        best = min(candidates, key=lambda c: c.planned_peak_bytes)
        part, size = max(best.parts.items(), key=lambda kv: kv[1])
        raise BudgetError(
            f"dl.memory: no configuration fits budget_bytes={budget_bytes} "
            f"({_fmt(budget_bytes)}); the minimum achievable is {best.planned_peak_bytes} bytes "
            f"({_fmt(best.planned_peak_bytes)}) with {best.configuration!r}, dominated by "
            f"{part} ({_fmt(size)}); parts: "
            + ", ".join(f"{k} {_fmt(v)}" for k, v in best.parts.items())
        )
    chosen = min(fitting, key=lambda c: c.cost_s)  # ties: the least aggressive (listed first)
    too_big = [c.configuration for c in candidates if not c.fits]
    reason = (f"planned peak {_fmt(chosen.planned_peak_bytes)} fits; est. overhead "
              f"{chosen.cost_s * 1e3:.1f} ms/step, the lowest of the fitting configurations")
    if too_big:
        reason += "; over budget: " + ", ".join(too_big)
    return Plan(chosen.configuration, budget_bytes, candidates, reason)
