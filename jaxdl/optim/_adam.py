"""Adam and AdamW, with PyTorch's bias corrections, weight decay and amsgrad.

Written out rather than built on `optax.scale_by_adam`: optax computes
`1 - b2 ** t` in float32 (1.3e-5 relative error at b2=0.999, t=1) and takes the
amsgrad maximum after bias correction; torch does neither.
"""

import jax.numpy as jnp

from jaxdl.optim._optimizer import (
    Optimizer,
    _check_betas,
    _check_nonnegative,
    one_minus_power,
)


def decoupled(o) -> bool:
    """Whether the weight decay is AdamW's, on p itself, rather than added to g."""
    return bool(o["weight_decay"]) and bool(o.get("decoupled_weight_decay"))


def decay_weights(p, g, o):
    """PyTorch's weight decay: decoupled p *= 1 - lr * wd, or coupled g += wd * p."""
    wd = o["weight_decay"]
    if not wd:
        return p, g
    if decoupled(o):
        return p * (1 - o["lr"] * wd), g
    return p, g + wd * p


def start_step(p, g, state, o):
    """What every Adam-family step begins with: the gradient negated under `maximize`,
    weight decay applied, and the step counter advanced. Returns (p, g, step)."""
    if o["maximize"]:
        g = -g
    p, g = decay_weights(p, g, o)
    return p, g, state["step"] + 1


def first_moment(state, g, b1):
    """torch's exp_avg.lerp_(g, 1 - b1)."""
    return state["exp_avg"] + (1 - b1) * (g - state["exp_avg"])


def moments(state, g, b1, b2):
    """The first moment and torch's exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)."""
    return first_moment(state, g, b1), state["exp_avg_sq"] * b2 + (1 - b2) * g * g


class Adam(Optimizer):
    """torch.optim.Adam: coupled weight decay (g += wd * p) unless decoupled_weight_decay."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused=None, decoupled_weight_decay: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _validate(self, o):
        _check_betas(o)
        _check_nonnegative(o, "eps", "weight_decay")

    def _init_state(self, param, o):
        state = {"step": jnp.zeros((), jnp.int32), "exp_avg": jnp.zeros_like(param),
                 "exp_avg_sq": jnp.zeros_like(param)}
        if o["amsgrad"]:
            state["max_exp_avg_sq"] = jnp.zeros_like(param)
        return state

    def _new_state(self, p, g, state, o):
        b1, b2 = o["betas"]
        _, g, step = start_step(p, g, state, o)
        m, v = moments(state, g, b1, b2)
        new_state = {"step": step, "exp_avg": m, "exp_avg_sq": v}
        if o["amsgrad"]:
            new_state["max_exp_avg_sq"] = jnp.maximum(state["max_exp_avg_sq"], v)
        return new_state

    def _param_update(self, p, g, new_state, o):
        b1, b2 = o["betas"]
        if decoupled(o):  # coupled decay went into the state, through g
            p, _ = decay_weights(p, g, o)
        t = new_state["step"].astype(jnp.float32)
        v = new_state["max_exp_avg_sq" if o["amsgrad"] else "exp_avg_sq"]
        denom = jnp.sqrt(v) / jnp.sqrt(one_minus_power(b2, t)) + o["eps"]
        step_size = o["lr"] / one_minus_power(b1, t)
        return p - step_size * (new_state["exp_avg"] / denom)


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay p *= (1 - lr * wd), default wd 1e-2."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach=None, capturable: bool = False, differentiable: bool = False,
                 fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)
