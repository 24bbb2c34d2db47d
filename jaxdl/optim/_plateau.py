"""ReduceLROnPlateau: lr cut by `factor` when a metric stops improving, state in store slots."""

import math

import jax.numpy as jnp
import numpy as np

from jaxdl._store import STATE
from jaxdl._tracing import is_traced
from jaxdl.optim._scheduler import LRScheduler


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
        return value if is_traced(value) or np.float32(self._best) != value else self._best

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
        if is_traced(metrics, best, bad, cooldown):
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
        state["best"] = self.best if not is_traced(self.best) else state["best"]
        return state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._best = float(state_dict["best"])
