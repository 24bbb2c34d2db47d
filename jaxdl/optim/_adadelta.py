"""Adadelta (Zeiler 2012) as PyTorch writes it, with lr (default 1.0) scaling the step."""

import jax.numpy as jnp

from jaxdl.optim._optimizer import Optimizer, _check_nonnegative


class Adadelta(Optimizer):
    """torch.optim.Adadelta.

    v = rho v + (1 - rho) g^2; delta = sqrt(u + eps) / sqrt(v + eps) * g;
    u = rho u + (1 - rho) delta^2; p -= lr * delta. optax's `scale_by_adadelta`
    matches this except for the lr factor, written here in one place instead.
    """

    _inert = ("foreach", "capturable", "differentiable")

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach=None, *, capturable: bool = False,
                 maximize: bool = False, differentiable: bool = False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _validate(self, o):
        _check_nonnegative(o, "eps", "weight_decay")
        if not 0.0 <= o["rho"] <= 1.0:
            raise ValueError(f"Invalid rho value: {o['rho']} (must be in [0, 1])")

    def _init_state(self, param, o):
        return {"step": jnp.zeros((), jnp.int32), "square_avg": jnp.zeros_like(param),
                "acc_delta": jnp.zeros_like(param)}

    def _update(self, p, g, state, o):
        rho, eps = o["rho"], o["eps"]
        if o["maximize"]:
            g = -g
        if o["weight_decay"]:
            g = g + o["weight_decay"] * p
        v = state["square_avg"] * rho + (1 - rho) * g * g
        delta = jnp.sqrt(state["acc_delta"] + eps) / jnp.sqrt(v + eps) * g
        u = state["acc_delta"] * rho + (1 - rho) * delta * delta
        return p - o["lr"] * delta, {"step": state["step"] + 1, "square_avg": v, "acc_delta": u}
