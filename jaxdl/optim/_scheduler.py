"""The learning-rate scheduler base (`optim.lr_scheduler.LRScheduler`) and the numerics its schedules
share.

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

import jax.numpy as jnp
import numpy as np

from jaxdl._store import STATE, Stateful
from jaxdl._tracing import is_traced
from jaxdl.optim._optimizer import Optimizer, power


def _pow(base: float, exponent, traced: bool):
    """base ** exponent; inside a trace through a double-precision log (float32(0.95)**100 is 6e-6 off)."""
    return power(base, exponent.astype(jnp.float32)) if traced else base ** exponent


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
        if is_traced(value):
            return value
        mirror = self._mirrors.get(name)
        if mirror is not None and np.asarray(mirror, value.dtype) == value:
            return mirror
        return value.item()

    def _write(self, name, value):
        dtype = self._store.values[self._slots[name]].dtype
        self._store.write(self._slots[name], jnp.asarray(value, dtype))
        if is_traced(value):
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
            traced = is_traced(epoch, current, written, closed)
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
            self._apply(self._lrs_at(epoch, is_traced(epoch)))

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
