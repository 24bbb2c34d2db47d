"""Compare a jaxdl functional op with its torch.nn.functional twin: values and gradients.

`check_functional(ours, theirs, floats, constants=(), kwargs=None)` calls both on the same
float inputs (differentiated) and constant inputs (indices, lengths, passed through), and
compares the outputs and the gradients of sum(output * fixed random cotangent) w.r.t. every
float input.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as TF
from torch_twin import assert_close, flatten

import jaxdl.nn.functional as F


def _torch_value(c):
    return torch.tensor(c) if isinstance(c, np.ndarray) else c


def _jax_value(c):
    return jnp.asarray(c) if isinstance(c, np.ndarray) else c


def check_functional(ours, theirs, floats, constants=(), kwargs=None, *, torch_kwargs=None,
                     fwd_tol=1e-5, grad_tol=1e-4, seed=7):
    """Returns jaxdl's outputs (a list of leaves) for further checks. Array keyword arguments
    reach torch as tensors unless `torch_kwargs` is given."""
    kwargs = kwargs or {}
    if torch_kwargs is None:
        torch_kwargs = {k: _torch_value(v) for k, v in kwargs.items()}
    t_in = [torch.tensor(x, requires_grad=True) for x in floats]
    t_out = flatten(theirs(*t_in, *[_torch_value(c) for c in constants], **torch_kwargs))
    cot_rng = np.random.default_rng(seed)
    cots = [cot_rng.standard_normal(tuple(o.shape)).astype(np.float32)
            if o.is_floating_point() else None for o in t_out]
    loss = sum((o * torch.tensor(c)).sum() for o, c in zip(t_out, cots)
               if c is not None and o.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()

    consts = [_jax_value(c) for c in constants]

    def objective(*xs):
        leaves = flatten(ours(*xs, *consts, **kwargs))
        return sum(jnp.sum(o * c) for o, c in zip(leaves, cots) if c is not None), leaves

    # one compiled program instead of one per eager op keeps these tests fast
    grads, leaves = jax.jit(jax.grad(objective, argnums=tuple(range(len(floats))), has_aux=True))(
        *[jnp.asarray(x) for x in floats])
    assert len(leaves) == len(t_out)
    for k, (a, e) in enumerate(zip(leaves, t_out)):
        assert_close(a, e, f"output {k}", fwd_tol)
    for k, (g, t) in enumerate(zip(grads, t_in)):
        expected = np.zeros(t.shape, np.float32) if t.grad is None else t.grad.numpy()
        assert_close(g, expected, f"grad of input {k}", grad_tol, floor=1e-6)
    return leaves


def check_by_name(case, floats, constants=(), kwargs=None):
    """`check_functional` on F.<name> and torch's F.<name>; `case` is "name" or "name-variant"."""
    name = case.split("-")[0]
    return check_functional(getattr(F, name), getattr(TF, name), floats, constants, kwargs)


def positive(rng, *shape):
    """float32 inputs bounded away from zero (weights, variances, rates, p-norm inputs)."""
    return np.abs(rng.standard_normal(shape)).astype(np.float32) + 0.1


def signs(rng, *shape):
    """float32 targets of -1 and +1."""
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)
