"""`optim.lr_scheduler`: PyTorch's learning-rate schedulers, usable inside and outside `dl.jit`.

Each scheduler keeps its counters (`last_epoch`, ...) in array slots of the
optimizer's store and writes the learning rates into the optimizer's lr slots,
so `scheduler.step()` works eagerly and inside a compiled step, and neither
recompiles.

torch's chainable schedulers (StepLR, MultiStepLR, ConstantLR, LinearLR,
ExponentialLR, CosineAnnealingLR) compute each lr from the group's current lr,
so a hand-edited lr, or another scheduler stepping the same optimizer, carries
forward. Multiplying the lr step by step in float32 (inside a trace) would
drift from torch's double-precision chain, so each group instead keeps an
anchor: the lr and epoch its chain started from (the base lr at epoch -1 until
someone else changes the lr), the new lr is the schedule's closed form from the
anchor (`_between`), and the scheduler re-anchors whenever the group's lr is not
the one it last wrote. Eagerly everything is in double precision; inside a
trace in float32 with cancellation-free formulas.
"""

import math
from bisect import bisect_right

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._store import STATE, Stateful
from jaxdl.optim._optimizer import Optimizer


def _traced(*values) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in values)


def _pow(base: float, exponent, traced: bool):
    """base ** exponent; inside a trace through a double-precision log (float32(0.95)**100 is 6e-6 off)."""
    if not traced:
        return base ** exponent
    log_base = math.log(base) if base > 0 else -math.inf
    return jnp.exp(exponent.astype(jnp.float32) * log_base)


def _half_cosine(done, total, traced: bool):
    """(1 + cos(pi * done / total)) / 2, written as sin^2(pi (total - done) / (2 total)).

    The sine form stays accurate near the schedule's minimum, where the cosine
    form loses every float32 digit to cancellation.
    """
    if traced:
        s = jnp.sin(math.pi * (total - done).astype(jnp.float32) / (2 * total))
        return s * s
    return (1 + math.cos(math.pi * done / total)) / 2


def _select(condition, if_true, if_false, traced: bool):
    """`if_true if condition else if_false`, as jnp.where inside a trace."""
    if not traced:
        return if_true if condition else if_false
    return jnp.where(condition, if_true, if_false)


def _count_at_least(value, thresholds, traced: bool):
    """How many sorted thresholds are <= value (bisect_right)."""
    if not traced:
        return bisect_right(thresholds, value)
    if not thresholds:
        return jnp.zeros((), jnp.int32)
    return jnp.sum(value >= jnp.asarray(thresholds, jnp.int32)).astype(jnp.int32)


class LRScheduler(Stateful):
    """Base class: subclasses define `_lr_at(epoch, base_lr, traced)`, PyTorch's closed form."""

    _counters = ("last_epoch",)  # integer state kept in store slots
    _nested = ()  # state_dict keys a subclass loads itself
    _chainable = False  # torch's get_lr starts from the group's current lr (see module doc)

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        self._attach(optimizer)
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            missing = [i for i, g in enumerate(optimizer.param_groups) if "initial_lr" not in g]
            if missing:
                raise KeyError(
                    f"param 'initial_lr' is not specified in param_groups{missing} when resuming "
                    "an optimizer (last_epoch != -1)"
                )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self._write("last_epoch", last_epoch)
        for index, group in enumerate(optimizer.param_groups):
            self._add_chain(index, group["lr"], last_epoch)
        self._initial_step()

    def _attach(self, optimizer):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        self._store = optimizer._store
        self._store.owners.add(self)
        self._mirrors = {}  # double-precision copies of float slots, for eager use
        self._slots = {name: self._store.add(jnp.zeros((), jnp.int32), STATE)
                       for name in self._counters}

    def _initial_step(self):
        self.step()

    # ---- slots --------------------------------------------------------------------------------
    def _rebase(self, store, offset):
        self._store = store
        self._slots = {k: i + offset for k, i in self._slots.items()}

    def _read(self, name):
        """A slot's value: a tracer inside a trace, else its Python mirror while still exact."""
        value = self._store.read(self._slots[name])
        if _traced(value):
            return value
        mirror = self._mirrors.get(name)
        if mirror is not None and np.asarray(mirror, value.dtype) == value:
            return mirror
        return value.item()

    def _write(self, name, value):
        dtype = self._store.values[self._slots[name]].dtype
        self._store.write(self._slots[name], jnp.asarray(value, dtype))
        if _traced(value):
            self._mirrors.pop(name, None)
        else:
            self._mirrors[name] = value

    # ---- chains (chainable schedulers) --------------------------------------------------------
    def _add_chain(self, index, lr, epoch):
        """Slots of one group's chain: it starts from `lr` at `epoch` (the base lr at -1)."""
        if not self._chainable:
            return
        for name, value, dtype in (("anchor_lr", lr, jnp.float32), ("anchor_epoch", epoch, jnp.int32),
                                   ("written", lr, jnp.float32)):
            self._slots[f"{name}{index}"] = self._store.add(jnp.zeros((), dtype), STATE)
            self._write(f"{name}{index}", value)

    def _param_group_added(self, group):
        """Called by `Optimizer.add_param_group`: chain the new group from its current lr.

        torch's chainable forms step a group added later from its own lr too; its lr
        at that time stands in for the base lr torch would not have. Schedulers that
        compute from base_lrs leave the group alone (torch raises there).
        """
        if not self._chainable:
            return
        self.base_lrs.append(group["lr"])
        self._add_chain(len(self.optimizer.param_groups) - 1, group["lr"], self.last_epoch)

    def _between(self, lr, start, epoch, base_lr, traced):
        """The lr at `epoch` of a chain that had `lr` at `start` (start -1: before the first step)."""
        raise NotImplementedError

    def _keeps_anchor(self, start, epoch, traced):
        """Whether the chain from `start` still holds after `epoch` (else it restarts there)."""
        return True

    def _chained_lrs(self, epoch, closed):
        """New lrs of a chainable scheduler; `closed` (step(epoch)) restarts from base_lrs, as torch."""
        lrs = []
        for index, (group, base) in enumerate(zip(self.optimizer.param_groups, self.base_lrs)):
            current, written = group["lr"], self._read(f"written{index}")
            traced = _traced(epoch, current, written, closed)
            # Someone else (a hand edit, another scheduler) changed the lr: chain from it.
            restart = _select(closed, True, current != written, traced)
            anchor_lr = _select(restart, _select(closed, base, current, traced),
                                self._read(f"anchor_lr{index}"), traced)
            anchor_epoch = _select(restart, _select(closed, -1, epoch - 1, traced),
                                   self._read(f"anchor_epoch{index}"), traced)
            lr = self._between(anchor_lr, anchor_epoch, epoch, base, traced)
            keep = self._keeps_anchor(anchor_epoch, epoch, traced)
            self._write(f"anchor_lr{index}", _select(keep, anchor_lr, lr, traced))
            self._write(f"anchor_epoch{index}", _select(keep, anchor_epoch, epoch, traced))
            self._write(f"written{index}", lr)
            lrs.append(lr)
        return lrs

    @property
    def last_epoch(self):
        return self._read("last_epoch")

    @last_epoch.setter
    def last_epoch(self, value):
        self._write("last_epoch", value)

    # ---- the PyTorch interface ----------------------------------------------------------------
    def step(self, epoch=None):
        """Advance one epoch (or jump to `epoch`, torch's deprecated closed form) and write the lrs."""
        if epoch is None:
            self._advance(self.last_epoch + 1, closed=False)
        else:
            self._advance(epoch, closed=True)

    def _advance(self, epoch, closed):
        """Move to `epoch`; `closed` (a bool, traced inside SequentialLR) means from base_lrs."""
        self.last_epoch = epoch
        if self._chainable:
            self._apply(self._chained_lrs(epoch, closed))
        else:
            self._apply(self._lrs_at(epoch, _traced(epoch)))

    def _lrs_at(self, epoch, traced):
        """The closed form: lrs at `epoch` from base_lrs."""
        return [self._lr_at(epoch, base, traced) for base in self.base_lrs]

    def _lr_at(self, epoch, base_lr, traced):
        return self._between(base_lr, -1, epoch, base_lr, traced)

    def _apply(self, lrs):
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr

    def get_last_lr(self) -> list:
        """The learning rate of every param group after the last step."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """Plain attributes and counters; not the optimizer (save that separately, as in torch)."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("optimizer", "_store", "_slots", "_mirrors") and not callable(v)}
        state.update({name: self._read(name) for name in self._slots})
        return state

    def load_state_dict(self, state_dict: dict):
        expected = set(self.state_dict())
        if set(state_dict) != expected:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: expected keys {sorted(expected)}, got "
                f"{sorted(state_dict)}"
            )
        for key, value in state_dict.items():
            if key in self._nested:
                continue
            if key in self._slots:
                self._write(key, value)
            else:
                self.__dict__[key] = value


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
            traced = _traced(self.last_epoch)
            for group, momenta in zip(self.optimizer.param_groups, self._momenta):
                self._set_momentum(group, self._schedule(self.last_epoch, momenta, traced))


class _SchedulerList(LRScheduler):
    """A scheduler over other schedulers of the same optimizer; their states nest in its state_dict."""

    _nested = ("_schedulers",)

    def _check_schedulers(self, optimizer, schedulers):
        if not schedulers:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler")
        for i, scheduler in enumerate(schedulers):
            if isinstance(scheduler, ReduceLROnPlateau):
                raise ValueError(f"{type(self).__name__} does not support ReduceLROnPlateau (index {i})")
            if scheduler.optimizer is not optimizer:
                raise ValueError(f"scheduler {i} ({type(scheduler).__name__}) uses another optimizer")
        self._schedulers = list(schedulers)

    def _param_group_added(self, group):
        """The sub-schedulers hear of the group themselves."""

    def state_dict(self):
        state = {k: v for k, v in super().state_dict().items() if k != "_schedulers"}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        subs = state_dict.get("_schedulers")
        if subs is None or len(subs) != len(self._schedulers):
            raise ValueError(f"{type(self).__name__}.load_state_dict: expected {len(self._schedulers)} "
                             "sub-scheduler states under '_schedulers'")
        super().load_state_dict(state_dict)
        for scheduler, sub in zip(self._schedulers, subs):
            scheduler.load_state_dict(sub)


class SequentialLR(_SchedulerList):
    """Runs `schedulers[i]` from `milestones[i - 1]` on, as torch: the active one steps (chaining
    from the current lr) and each takes over at its milestone from its closed form at epoch 0.

    Inside a trace the active scheduler is data-dependent: every one steps from the same
    state and only the active one's lrs and counters are kept.
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        self._check_schedulers(optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR expects len(milestones) == len(schedulers) - 1, got "
                f"{len(milestones)} milestones for {len(schedulers)} schedulers"
            )
        self._milestones = list(milestones)
        super().__init__(optimizer, last_epoch)

    def _initial_step(self):
        # torch: lrs back to initial_lr, every sub-scheduler one epoch back (undoing its own
        # initial step), then the initial step of the one active at epoch 0.
        self.last_epoch = self.last_epoch + 1
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in self._schedulers:
            scheduler.last_epoch = scheduler.last_epoch - 1
        self._schedulers[bisect_right(self._milestones, 0)]._initial_step()

    def step(self):
        epoch = self.last_epoch + 1
        self.last_epoch = epoch
        traced = _traced(epoch)
        index = _count_at_least(epoch, self._milestones, traced)
        if not traced:
            scheduler = self._schedulers[index]
            starts = index > 0 and self._milestones[index - 1] == epoch
            scheduler._advance(0 if starts else scheduler.last_epoch + 1, closed=starts)
            return
        groups = self.optimizer.param_groups
        before = [group["lr"] for group in groups]
        candidates = []
        for i, scheduler in enumerate(self._schedulers):
            saved = {name: scheduler._read(name) for name in scheduler._slots}
            for group, lr in zip(groups, before):
                group["lr"] = lr
            starts = epoch == self._milestones[i - 1] if i else False
            scheduler._advance(jnp.where(starts, 0, scheduler.last_epoch + 1), closed=starts)
            candidates.append([jnp.asarray(group["lr"], jnp.float32) for group in groups])
            for name, old in saved.items():
                scheduler._write(name, jnp.where(index == i, scheduler._read(name), old))
        for g, group in enumerate(groups):
            group["lr"] = jnp.stack([lrs[g] for lrs in candidates])[index]

    def _lrs_at(self, epoch, traced):
        """Closed form (for a SequentialLR nested in another): from each sub-scheduler's base."""
        index = _count_at_least(epoch, self._milestones, traced)
        starts = [0, *self._milestones]
        if not traced:
            return self._schedulers[index]._lrs_at(epoch - starts[index], traced)
        options = [s._lrs_at(epoch - start, traced) for s, start in zip(self._schedulers, starts)]
        return [jnp.stack([jnp.asarray(o[g], jnp.float32) for o in options])[index]
                for g in range(len(self.base_lrs))]


class ChainedScheduler(_SchedulerList):
    """Steps every scheduler of the list, in order, at each `step()` (torch's ChainedScheduler)."""

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        optimizer = schedulers[0].optimizer if optimizer is None and schedulers else optimizer
        self._check_schedulers(optimizer, schedulers)
        self._attach(optimizer)
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]

    def step(self):
        for scheduler in self._schedulers:
            scheduler.step()


class ReduceLROnPlateau(LRScheduler):
    """Multiply lr by `factor` after `patience` epochs without improvement of `step(metrics)`.

    Its state (best value, counters) lives in slots, so `step(loss)` inside
    `dl.jit` works with a traced loss.
    """

    _counters = ("last_epoch", "num_bad_epochs", "cooldown_counter")

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0.0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown!")
        groups = len(optimizer.param_groups)
        self.min_lrs = list(min_lr) if isinstance(min_lr, list | tuple) else [min_lr] * groups
        if len(self.min_lrs) != groups:
            raise ValueError(f"expected {groups} min_lrs, got {len(self.min_lrs)}")
        self.default_min_lr = None if isinstance(min_lr, list | tuple) else min_lr
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = (
            threshold, threshold_mode, cooldown, eps)
        self._attach(optimizer)
        worst = math.inf if mode == "min" else -math.inf
        self._slots["best"] = self._store.add(jnp.asarray(worst, jnp.float32), STATE)
        self._best = worst  # double-precision copy for eager use
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]

    @property
    def best(self):
        value = self._read("best")
        return value if _traced(value) or np.float32(self._best) != value else self._best

    def _is_better(self, a, best):
        sign = 1.0 if self.mode == "min" else -1.0
        if self.threshold_mode == "rel":
            return sign * a < sign * best * (1.0 - sign * self.threshold)
        return sign * a < sign * best - self.threshold

    def _param_group_added(self, group):
        """torch's rule: a scalar min_lr extends to the new group; a list must be extended by hand."""
        if self.default_min_lr is not None:
            self.min_lrs.append(self.default_min_lr)

    def step(self, metrics, epoch=None):
        if len(self.min_lrs) != len(self.optimizer.param_groups):
            raise RuntimeError(
                f"The number of param groups in the `optimizer` ({len(self.optimizer.param_groups)}) "
                f"differs from when `ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually "
                "due to a new param group being added to the optimizer. Please modify the `min_lrs` "
                "field to match the length of the `optimizer` param groups."
            )
        epoch = self.last_epoch + 1 if epoch is None else epoch
        self.last_epoch = epoch
        best, bad, cooldown = self.best, self._read("num_bad_epochs"), self._read("cooldown_counter")
        if _traced(metrics, best, bad, cooldown):
            self._traced_step(jnp.asarray(metrics, jnp.float32), best, bad, cooldown)
            return
        current = float(metrics)
        if self._is_better(current, best):
            self._best, best, bad = current, current, 0
        else:
            bad += 1
        if cooldown > 0:
            cooldown, bad = cooldown - 1, 0
        if bad > self.patience:
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, min_lr)
                if old - new > self.eps:
                    group["lr"] = new
            cooldown, bad = self.cooldown, 0
        self._write("best", best)
        self._write("num_bad_epochs", bad)
        self._write("cooldown_counter", cooldown)

    def _traced_step(self, current, best, bad, cooldown):
        better = self._is_better(current, best)
        best = jnp.where(better, current, best)
        bad = jnp.where(better, 0, bad + 1)
        in_cooldown = cooldown > 0
        cooldown = jnp.where(in_cooldown, cooldown - 1, cooldown)
        bad = jnp.where(in_cooldown, 0, bad)
        reduce = bad > self.patience
        for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
            old = group["lr"]
            new = jnp.maximum(old * self.factor, min_lr)
            group["lr"] = jnp.where(reduce & (old - new > self.eps), new, old)
        self._write("best", best)
        self._write("num_bad_epochs", jnp.where(reduce, 0, bad))
        self._write("cooldown_counter", jnp.where(reduce, self.cooldown, cooldown))

    def state_dict(self):
        state = super().state_dict()
        state["best"] = self.best if not _traced(self.best) else state["best"]
        return state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._best = float(state_dict["best"])
