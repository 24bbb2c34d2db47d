"""Adagrad as PyTorch writes it: lr decay, initial accumulator value, eps outside the sqrt.

optax's `scale_by_rss` adds eps inside the sqrt, so the formula is written here.
"""

import jax.numpy as jnp

from jaxdl.optim._optimizer import Optimizer, _check_nonnegative


class Adagrad(Optimizer):
    """torch.optim.Adagrad: sum += g^2; p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)."""

    _inert = ("foreach", "differentiable", "fused")

    _state_at_construction = True  # torch fills "sum" and "step" in __init__

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach=None, *,
                 maximize: bool = False, differentiable: bool = False, fused=None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize))

    def _validate(self, o):
        _check_nonnegative(o, "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def _init_state(self, param, o):
        return {"step": jnp.zeros((), jnp.int32),
                "sum": jnp.full_like(param, o["initial_accumulator_value"])}

    def _update(self, p, g, state, o):
        if o["maximize"]:
            g = -g
        if o["weight_decay"]:
            g = g + o["weight_decay"] * p
        step = state["step"] + 1
        clr = o["lr"] / (1 + (step - 1).astype(jnp.float32) * o["lr_decay"])
        total = state["sum"] + g * g
        return p - clr * (g / (jnp.sqrt(total) + o["eps"])), {"step": step, "sum": total}
