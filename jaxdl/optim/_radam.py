"""RAdam (Liu et al. 2019) as PyTorch writes it: rectify when rho_t > 5, decoupled option.

optax's `radam` uses threshold 5 too but adds eps inside its sqrt and
computes rho_t in float32; the formula is written here.
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


class RAdam(Optimizer):
    """torch.optim.RAdam.

    rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 t b2^t / (1 - b2^t);
    when rho_t > 5: p -= lr * m_hat * r_t * sqrt(1 - b2^t) / (sqrt(v) + eps),
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t));
    else p -= lr * m_hat.
    """

    _inert = ("foreach", "capturable", "differentiable")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *,
                 foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _validate(self, o):
        _check_betas(o)
        _check_nonnegative(o, "eps", "weight_decay")

    def _init_state(self, param, o):
        return {"step": jnp.zeros((), jnp.int32), "exp_avg": jnp.zeros_like(param),
                "exp_avg_sq": jnp.zeros_like(param)}

    def _update(self, p, g, state, o):
        b1, b2 = o["betas"]
        p, g, step = start_step(p, g, state, o)
        t = step.astype(jnp.float32)
        m, v = moments(state, g, b1, b2)
        m_hat = m / one_minus_power(b1, t)
        bc2 = one_minus_power(b2, t)
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * power(b2, t) / bc2
        safe_rho = jnp.where(rho_t > 5.0, rho_t, 5.0)  # keeps the unused branch finite
        rect = jnp.sqrt(
            (safe_rho - 4) * (safe_rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * safe_rho)
        )
        adaptive = jnp.sqrt(bc2) / (jnp.sqrt(v) + o["eps"])
        scale = jnp.where(rho_t > 5.0, rect * adaptive, 1.0)
        return p - m_hat * o["lr"] * scale, {"step": step, "exp_avg": m, "exp_avg_sq": v}
