"""Schedulers over other schedulers: SequentialLR and ChainedScheduler."""

from bisect import bisect_right

import jax.numpy as jnp

from jaxdl._tracing import is_traced
from jaxdl.optim._plateau import ReduceLROnPlateau
from jaxdl.optim._scheduler import LRScheduler, _count_at_least


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
        traced = is_traced(epoch)
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
