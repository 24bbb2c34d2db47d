"""Adam and AdamW, on optax's `scale_by_adam` with PyTorch's weight decay and amsgrad."""

import jax.numpy as jnp
import optax

from jaxdl.optim._optimizer import Optimizer


def _check_betas_eps(o):
    b1, b2 = o["betas"]
    if not 0.0 <= b1 < 1.0 or not 0.0 <= b2 < 1.0:
        raise ValueError(f"Invalid betas: {o['betas']} (each must be in [0, 1))")
    if not o["eps"] >= 0.0:
        raise ValueError(f"Invalid eps value: {o['eps']}")
    if not o["weight_decay"] >= 0.0:
        raise ValueError(f"Invalid weight_decay value: {o['weight_decay']}")


class Adam(Optimizer):
    """torch.optim.Adam: coupled weight decay (g += wd * p), optional amsgrad.

    step = lr * m_hat / (sqrt(v_hat) + eps); with amsgrad the running maximum
    of the uncorrected v is used (optax's amsgrad takes it after correction,
    so that part is written here).
    """

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused=None):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _validate(self, o):
        _check_betas_eps(o)

    def _init_state(self, param, o):
        state = {"step": jnp.zeros((), jnp.int32), "exp_avg": jnp.zeros_like(param),
                 "exp_avg_sq": jnp.zeros_like(param)}
        if o["amsgrad"]:
            state["max_exp_avg_sq"] = jnp.zeros_like(param)
        return state

    def _update(self, p, g, state, o):
        lr, wd = o["lr"], o["weight_decay"]
        b1, b2 = o["betas"]
        if o["maximize"]:
            g = -g
        if wd and self.decoupled:
            p = p * (1 - lr * wd)
        elif wd:
            g = g + wd * p
        adam = optax.scale_by_adam(b1, b2, o["eps"])
        direction, inner = adam.update(
            g, optax.ScaleByAdamState(state["step"], state["exp_avg"], state["exp_avg_sq"])
        )
        new_state = {"step": inner.count, "exp_avg": inner.mu, "exp_avg_sq": inner.nu}
        if o["amsgrad"]:
            v_max = jnp.maximum(state["max_exp_avg_sq"], inner.nu)
            count = inner.count.astype(jnp.float32)
            m_hat = inner.mu / (1 - b1**count)
            direction = m_hat / (jnp.sqrt(v_max / (1 - b2**count)) + o["eps"])
            new_state["max_exp_avg_sq"] = v_max
        return p - lr * direction, new_state


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay p *= (1 - lr * wd), default wd 1e-2."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
