"""Adamax (Adam with the infinity norm) as PyTorch writes it: eps inside the max."""

import jax.numpy as jnp

from jaxdl.optim._adam import first_moment, start_step
from jaxdl.optim._optimizer import (
    Optimizer,
    _check_betas,
    _check_nonnegative,
    one_minus_power,
)


class Adamax(Optimizer):
    """torch.optim.Adamax: u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) * m / u.

    optax's `scale_by_adamax` adds eps after the max; torch inside it.
    """

    _inert = ("foreach", "capturable", "differentiable")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize))

    def _validate(self, o):
        _check_betas(o)
        _check_nonnegative(o, "eps", "weight_decay")

    def _init_state(self, param, o):
        return {"step": jnp.zeros((), jnp.int32), "exp_avg": jnp.zeros_like(param),
                "exp_inf": jnp.zeros_like(param)}

    def _update(self, p, g, state, o):
        b1, b2 = o["betas"]
        p, g, step = start_step(p, g, state, o)
        m = first_moment(state, g, b1)
        u = jnp.maximum(state["exp_inf"] * b2, jnp.abs(g) + o["eps"])
        clr = o["lr"] / one_minus_power(b1, step.astype(jnp.float32))
        return p - clr * (m / u), {"step": step, "exp_avg": m, "exp_inf": u}
