"""NAdam (Dozat 2016) as PyTorch writes it: momentum decay schedule mu_t, decoupled option.

optax's `nadam` has no mu_t schedule (momentum_decay), so the formula is written here.
"""

import jax.numpy as jnp

from jaxdl.optim._adam import moments, start_step
from jaxdl.optim._optimizer import (
    Optimizer,
    _check_betas,
    _check_nonnegative,
    one_minus_power,
    power,
)


class NAdam(Optimizer):
    """torch.optim.NAdam.

    mu_t = b1 (1 - 0.5 * 0.96^(t * momentum_decay)); mu_product *= mu_t;
    p -= lr (1 - mu_t) / (1 - mu_product) * g / denom
         + lr mu_{t+1} / (1 - mu_product mu_{t+1}) * m / denom,
    denom = sqrt(v / (1 - b2^t)) + eps.
    """

    _inert = ("foreach", "capturable", "differentiable")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _validate(self, o):
        _check_betas(o)
        _check_nonnegative(o, "eps", "weight_decay", "momentum_decay")

    def _init_state(self, param, o):
        return {"step": jnp.zeros((), jnp.int32), "mu_product": jnp.ones((), jnp.float32),
                "exp_avg": jnp.zeros_like(param), "exp_avg_sq": jnp.zeros_like(param)}

    def _update(self, p, g, state, o):
        b1, b2 = o["betas"]
        lr, decay = o["lr"], o["momentum_decay"]
        p, g, step = start_step(p, g, state, o)
        t = step.astype(jnp.float32)
        mu = b1 * (1.0 - 0.5 * power(0.96, t * decay))
        mu_next = b1 * (1.0 - 0.5 * power(0.96, (t + 1) * decay))
        mu_product = state["mu_product"] * mu
        m, v = moments(state, g, b1, b2)
        denom = jnp.sqrt(v / one_minus_power(b2, t)) + o["eps"]
        p = p - lr * (1.0 - mu) / (1.0 - mu_product) * (g / denom)
        p = p - lr * mu_next / (1.0 - mu_product * mu_next) * (m / denom)
        return p, {"step": step, "mu_product": mu_product, "exp_avg": m, "exp_avg_sq": v}
