"""RMSprop as PyTorch writes it: alpha 0.99, eps added outside the sqrt, centered, momentum.

optax's `scale_by_rms` adds eps inside the sqrt, so the formula is written here.
"""

import jax.numpy as jnp

from jaxdl.optim._optimizer import Optimizer, _check_nonnegative


class RMSprop(Optimizer):
    """torch.optim.RMSprop.

    v = alpha * v + (1 - alpha) * g^2; with centered, avg = sqrt(v - mean_g^2)
    else sqrt(v); denominator avg + eps; with momentum buf = m * buf + g / denom,
    p -= lr * buf, else p -= lr * g / denom.
    """

    _inert = ("foreach", "capturable", "differentiable")

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 capturable: bool = False, foreach=None, maximize: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize))

    def _validate(self, o):
        _check_nonnegative(o, "alpha", "eps", "weight_decay", "momentum")

    def _init_state(self, param, o):
        state = {"step": jnp.zeros((), jnp.int32), "square_avg": jnp.zeros_like(param)}
        if not (isinstance(o["momentum"], float | int) and o["momentum"] == 0):
            state["momentum_buffer"] = jnp.zeros_like(param)
        if o["centered"]:
            state["grad_avg"] = jnp.zeros_like(param)
        return state

    def _update(self, p, g, state, o):
        alpha = o["alpha"]
        if o["maximize"]:
            g = -g
        if o["weight_decay"]:
            g = g + o["weight_decay"] * p
        new = {"step": state["step"] + 1}
        v = new["square_avg"] = state["square_avg"] * alpha + (1 - alpha) * g * g
        if o["centered"]:
            mean = new["grad_avg"] = state["grad_avg"] + (1 - alpha) * (g - state["grad_avg"])
            avg = jnp.sqrt(v - mean * mean)
        else:
            avg = jnp.sqrt(v)
        avg = avg + o["eps"]
        if "momentum_buffer" in state:
            buf = new["momentum_buffer"] = state["momentum_buffer"] * o["momentum"] + g / avg
            return p - o["lr"] * buf, new
        return p - o["lr"] * (g / avg), new
