"""The closed-form schedules: LambdaLR, StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR,
cosine annealing (with warm restarts) and OneCycleLR."""

import math

import jax.numpy as jnp

from jaxdl._tracing import is_traced
from jaxdl.optim._scheduler import (
    LRScheduler,
    _count_at_least,
    _half_cosine,
    _pow,
    _select,
)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); inside `dl.jit` the lambda receives a traced int."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        groups = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, list | tuple) else [lr_lambda] * groups
        if len(self.lr_lambdas) != groups:
            raise ValueError(f"Expected {groups} lr_lambdas, but got {len(self.lr_lambdas)}")
        super().__init__(optimizer, last_epoch)

    def _lrs_at(self, epoch, traced):
        return [base * fn(epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self):
        return {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}


def _clamp0(epoch, traced):
    """max(epoch, 0): a chain's epoch -1 (before the first step) counts as epoch 0 for these forms."""
    return jnp.maximum(epoch, 0) if traced else max(epoch, 0)


class StepLR(LRScheduler):
    """lr *= gamma at every nonzero multiple of step_size (base_lr * gamma ** (epoch // step_size))."""

    _chainable = True

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _between(self, lr, start, epoch, base_lr, traced):
        decays = _clamp0(epoch, traced) // self.step_size - _clamp0(start, traced) // self.step_size
        return lr * _pow(self.gamma, decays, traced)


class MultiStepLR(LRScheduler):
    """lr *= gamma at each milestone (base_lr * gamma ** (milestones <= epoch)); repeats count twice."""

    _chainable = True

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _between(self, lr, start, epoch, base_lr, traced):
        decays = (_count_at_least(epoch, self.milestones, traced)
                  - _count_at_least(start, self.milestones, traced))
        return lr * _pow(self.gamma, decays, traced)


class ConstantLR(LRScheduler):
    """lr *= factor at epoch 0, lr /= factor at total_iters (base_lr * factor until then)."""

    _chainable = True

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"Constant multiplicative factor expected to be between 0 and 1, got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _between(self, lr, start, epoch, base_lr, traced):
        def scale(at):  # the factor in force at an epoch (1 before the first step)
            return _select(at < 0, 1.0, _select(at < self.total_iters, self.factor, 1.0, traced), traced)

        return lr * scale(epoch) / scale(start)


class LinearLR(LRScheduler):
    """lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters), chained."""

    _chainable = True

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"start_factor must be in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"end_factor must be in [0, 1], got {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _factor(self, epoch, traced):
        """The closed form's multiplier at `epoch` >= 0."""
        done = jnp.minimum(epoch, self.total_iters).astype(jnp.float32) if traced \
            else min(epoch, self.total_iters)
        return self.start_factor + (self.end_factor - self.start_factor) * done / self.total_iters

    def _between(self, lr, start, epoch, base_lr, traced):
        # Past total_iters torch leaves the lr alone (also when end_factor = 0 made it 0).
        ended = start >= self.total_iters
        before = _select(start < 0, 1.0, self._factor(_clamp0(start, traced), traced), traced)
        ratio = self._factor(epoch, traced) / _select(ended, 1.0, before, traced)
        return lr * _select(ended, 1.0, ratio, traced)


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch after the first (base_lr * gamma ** epoch)."""

    _chainable = True

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _between(self, lr, start, epoch, base_lr, traced):
        return lr * _pow(self.gamma, _clamp0(epoch, traced) - _clamp0(start, traced), traced)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2, periodic past T_max.

    Chained as torch does: lr - eta_min scales by the cosine's ratio between
    epochs; one epoch past each minimum (epoch = T_max + 1 mod 2 T_max) torch
    adds the first step from base_lr instead, so the schedule restarts from
    base_lrs there, keeping any offset an edit at the minimum itself made.
    """

    _chainable = True

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _h(self, epoch, traced):
        return _half_cosine(epoch % (2 * self.T_max), self.T_max, traced)

    def _minima(self, start, epoch):
        """How many minima (epochs = T_max mod 2 T_max) lie in [start, epoch)."""
        period = 2 * self.T_max
        return (epoch - 1 - self.T_max) // period - (start - 1 - self.T_max) // period

    def _keeps_anchor(self, start, epoch, traced):
        # After a restart torch scales from the restarted lr (which may carry an edit's offset).
        return self._minima(_clamp0(start, traced), epoch) == 0

    def _between(self, lr, start, epoch, base_lr, traced):
        start = _clamp0(start, traced)  # torch's first step leaves the lr as it is
        period, eta = 2 * self.T_max, self.eta_min
        minima = self._minima(start, epoch)
        at_minimum = (start - self.T_max) % period == 0
        h_epoch, h_start = self._h(epoch, traced), self._h(start, traced)
        restarted = eta + (base_lr - eta) * h_epoch + _select(at_minimum, lr - eta, 0.0, traced)
        if not traced:
            return restarted if minima > 0 else eta + (lr - eta) * h_epoch / h_start
        scaled = eta + (lr - eta) * h_epoch / jnp.where(at_minimum, 1.0, h_start)
        return jnp.where(minima > 0, restarted, scaled)


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR: cosine from base_lr to eta_min over T_i epochs, T_i = T_0 * T_mult ** restarts."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        # Epochs at which a restart happens (int32 range), for the traced closed form.
        self._restarts = [0]
        while T_mult > 1 and self._restarts[-1] + T_0 * T_mult ** (len(self._restarts) - 1) < 2**31:
            self._restarts.append(self._restarts[-1] + T_0 * T_mult ** (len(self._restarts) - 1))
        super().__init__(optimizer, last_epoch)

    def _cycle(self, epoch, traced):
        """(T_cur, T_i) at an integer epoch."""
        if self.T_mult == 1:
            return epoch % self.T_0, self.T_0
        n = _count_at_least(epoch, self._restarts, traced) - 1
        if traced:
            starts = jnp.asarray(self._restarts, jnp.int32)
            lengths = jnp.asarray([self.T_0 * self.T_mult ** k for k in range(len(self._restarts))],
                                  jnp.int32)
            return epoch - starts[n], lengths[n]
        return epoch - self._restarts[n], self.T_0 * self.T_mult ** n

    def _lr_at(self, epoch, base_lr, traced):
        t_cur, t_i = self._cycle(epoch, traced)
        return self.eta_min + (base_lr - self.eta_min) * _half_cosine(t_cur, t_i, traced)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith 2018): PyTorch's phases, cosine or linear annealing, and
    momentum (or beta1) cycled inversely; those options move into array slots
    (`ParamGroup.make_dynamic`) so that cycling them never recompiles.
    """

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum=0.85, max_momentum=0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False, last_epoch: int = -1):
        groups = optimizer.param_groups
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0 or not isinstance(total_steps, int):
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        self.cycle_momentum = cycle_momentum
        per_group = lambda v: list(v) if isinstance(v, list | tuple) else [v] * len(groups)  # noqa: E731
        max_lrs = per_group(max_lr)
        initial = [m / div_factor for m in max_lrs]
        minimum = [i / final_div_factor for i in initial]
        up = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(up, "initial", "max", "max_m", "base_m"),
                            (float(2 * pct_start * total_steps) - 2, "max", "initial", "base_m", "max_m"),
                            (total_steps - 1, "initial", "min", "max_m", "max_m")]
        else:
            self._phases = [(up, "initial", "max", "max_m", "base_m"),
                            (total_steps - 1, "max", "min", "base_m", "max_m")]
        self._points = [dict(initial=i, max=m, min=n) for i, m, n in zip(initial, max_lrs, minimum)]
        self._use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and not self._use_beta1:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` enabled")
            for group, max_m in zip(groups, per_group(max_momentum)):
                group.make_dynamic("betas" if self._use_beta1 else "momentum")
                self._set_momentum(group, max_m)
            self._momenta = [dict(base_m=b, max_m=m)
                             for b, m in zip(per_group(base_momentum), per_group(max_momentum))]
        for group, point in zip(groups, self._points):
            group["initial_lr"] = point["initial"]
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, value):
        if self._use_beta1:
            group["betas"] = (value, group["betas"][1])
        else:
            group["momentum"] = value

    def _anneal(self, start, end, step, phase_start, phase_end, traced):
        pct = (step - phase_start) / (phase_end - phase_start)
        if traced:  # cancellation-free forms: float32 must stay accurate near a small end value
            remaining = (phase_end - step) / (phase_end - phase_start)
            if self.anneal_strategy == "linear":
                return start * remaining + end * pct
            s = jnp.sin(math.pi / 2 * remaining)
            return end + (start - end) * s * s
        if self.anneal_strategy == "linear":
            return (end - start) * pct + start
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    def _schedule(self, step, values: dict, traced):
        """The value of a cycled quantity (lr points or momenta) at `step`."""
        if not traced:
            start = 0.0
            for i, (end, *names) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    lo, hi = (names[0], names[1]) if "initial" in values else (names[2], names[3])
                    return self._anneal(values[lo], values[hi], step, start, end, traced)
                start = end
        step = step.astype(jnp.float32)
        out, start = None, 0.0
        for end, *names in self._phases:
            lo, hi = (names[0], names[1]) if "initial" in values else (names[2], names[3])
            value = self._anneal(values[lo], values[hi], step, start, end, traced)
            out = value if out is None else jnp.where(step > start, value, out)
            start = end
        return out

    def _lrs_at(self, epoch, traced):
        if not traced and epoch > self.total_steps:
            raise ValueError(
                f"Tried to step {epoch} times. The specified number of total steps is "
                f"{self.total_steps}"
            )
        return [self._schedule(epoch, point, traced) for point in self._points]

    def _advance(self, epoch, closed):
        super()._advance(epoch, closed)
        if self.cycle_momentum:
            traced = is_traced(self.last_epoch)
            for group, momenta in zip(self.optimizer.param_groups, self._momenta):
                self._set_momentum(group, self._schedule(self.last_epoch, momenta, traced))
