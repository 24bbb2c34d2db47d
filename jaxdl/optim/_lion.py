"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").

PyTorch 2.13 has no Lion; this follows the paper's Algorithm 2, with optax's
`scale_by_lion` for the sign step, and decoupled weight decay as in the paper.
"""

import jax.numpy as jnp
import optax

from jaxdl.optim._optimizer import Optimizer, _check_betas, _check_nonnegative


class Lion(Optimizer):
    """Lion: c = b1 m + (1 - b1) g; p = p (1 - lr wd) - lr sign(c); m = b2 m + (1 - b2) g.

    Defaults are the paper's (lr 1e-4, betas (0.9, 0.99), weight_decay 0).
    State name "exp_avg", as in the common PyTorch implementation (lion-pytorch).
    """

    _inert = ()

    def __init__(self, params, lr: float = 1e-4, betas=(0.9, 0.99), weight_decay: float = 0.0,
                 *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                                      maximize=maximize))

    def _validate(self, o):
        _check_betas(o)
        _check_nonnegative(o, "weight_decay")

    def _init_state(self, param, o):
        return {"exp_avg": jnp.zeros_like(param)}

    def _update(self, p, g, state, o):
        b1, b2 = o["betas"]
        if o["maximize"]:
            g = -g
        lion = optax.scale_by_lion(b1, b2)
        direction, inner = lion.update(g, optax.ScaleByLionState(jnp.zeros((), jnp.int32), state["exp_avg"]))
        if o["weight_decay"]:
            p = p * (1 - o["lr"] * o["weight_decay"])
        return p - o["lr"] * direction, {"exp_avg": inner.mu}
