"""SGD with PyTorch's momentum, dampening, nesterov and coupled weight decay."""

import jax.numpy as jnp

from jaxdl.optim._optimizer import Optimizer, _check_nonnegative


def _direction(p, g, o):
    """The gradient negated under `maximize`, plus coupled weight decay."""
    if o["maximize"]:
        g = -g
    return g + o["weight_decay"] * p if o["weight_decay"] else g


class SGD(Optimizer):
    """torch.optim.SGD.

    buf = momentum * buf + (1 - dampening) * g  (buf = g on the first step),
    g = g + momentum * buf if nesterov else buf, p = p - lr * g.
    A momentum buffer exists when momentum != 0 at construction (as torch's state).
    """

    _inert = ("foreach", "differentiable", "fused")

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach=None, differentiable: bool = False, fused=None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _validate(self, o):
        _check_nonnegative(o, "momentum", "weight_decay")
        if o["nesterov"] and (o["momentum"] <= 0 or o["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _init_state(self, param, o):
        if isinstance(o["momentum"], float | int) and o["momentum"] == 0:
            return {}
        # A step count (step > 0) replaces PyTorch's "buffer is None" check on the first step.
        return {"momentum_buffer": jnp.zeros_like(param), "step": jnp.zeros((), jnp.int32)}

    def _new_state(self, p, g, state, o):
        if "momentum_buffer" not in state:
            return state
        started = state["step"] > 0
        g = _direction(p, g, o)
        buf = jnp.where(started, o["momentum"] * state["momentum_buffer"]
                        + (1 - o["dampening"]) * g, g)
        return {"momentum_buffer": buf, "step": state["step"] + 1}

    def _param_update(self, p, g, new_state, o):
        if "momentum_buffer" not in new_state:
            return p - o["lr"] * _direction(p, g, o)
        buf = new_state["momentum_buffer"]
        # plain momentum steps along the buffer alone: no direction to compute (eager steps
        # would run it and drop it)
        step = _direction(p, g, o) + o["momentum"] * buf if o["nesterov"] else buf
        return p - o["lr"] * step

    def _export_state(self, state):
        if "momentum_buffer" not in state or int(state["step"]) == 0:
            return None
        return {"momentum_buffer": state["momentum_buffer"]}  # torch's SGD keeps no step

    def _import_state(self, entry, fresh):
        if entry is None or "step" not in fresh:
            return dict(fresh) if entry is None else dict(entry)
        return {**entry, "step": jnp.ones((), jnp.int32)}
