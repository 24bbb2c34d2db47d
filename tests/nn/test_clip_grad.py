"""nn.utils clipping called as in PyTorch: torch's form (parameters) and error_if_nonfinite,
eagerly and inside dl.jit (jaxdl/nn/utils.py)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxdl as dl
from jaxdl import nn, optim


def twins():
    torch.manual_seed(0)
    t_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    model.load_state_dict(t_model.state_dict())
    return model, t_model


def test_torch_form_with_parameters_shows_the_jaxdl_form():
    model, t_model = twins()
    t_model(torch.ones(2, 4)).sum().backward()
    torch.nn.utils.clip_grad_norm_(t_model.parameters(), 1.0)  # torch's form, accepted there
    with pytest.raises(TypeError, match=r"grads, norm = nn.utils.clip_grad_norm_\(grads, max_norm=1.0\)"):
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with pytest.raises(TypeError, match=r"grads = nn.utils.clip_grad_value_\(grads, clip_value=0.5\)"):
        nn.utils.clip_grad_value_(model.parameters(), 0.5)
    with pytest.raises(TypeError, match="takes the gradients, not the parameters"):
        nn.utils.clip_grad_norm_((p for p in model.parameters()), 1.0)


def test_total_norm_of_parameters_matches_torch():
    model, t_model = twins()
    want = torch.nn.utils.get_total_norm(list(t_model.parameters()))
    np.testing.assert_allclose(float(nn.utils.get_total_norm(model.parameters())), float(want),
                               rtol=1e-6)


def nonfinite_loss(m, x):
    return jnp.sum(m(x)) * jnp.inf


def test_error_if_nonfinite_raises_eagerly_like_torch():
    model, t_model = twins()
    (t_model(torch.ones(2, 4)).sum() * torch.inf).backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_(t_model.parameters(), 1.0, error_if_nonfinite=True)
    grads = dl.grad(nonfinite_loss)(model, jnp.ones((2, 4)))
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(grads, 1.0, error_if_nonfinite=True)


def test_error_if_nonfinite_inside_dl_jit_is_refused_not_ignored():
    model, _ = twins()
    opt = optim.SGD(model.parameters(), lr=0.1)
    before = np.asarray(model[0].weight)

    @dl.jit
    def step(model, opt, x):
        grads = dl.grad(nonfinite_loss)(model, x)
        grads, norm = nn.utils.clip_grad_norm_(grads, 1.0, error_if_nonfinite=True)
        opt.step(grads)
        return norm

    with pytest.raises(RuntimeError, match="error_if_nonfinite=True cannot be honoured inside"):
        step(model, opt, jnp.ones((2, 4)))
    np.testing.assert_array_equal(np.asarray(model[0].weight), before)  # no NaN weights
