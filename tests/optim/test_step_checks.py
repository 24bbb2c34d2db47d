"""opt.step checks every gradient entry before changing anything, and names the offending
parameter (issue 13, case 3)."""

import numpy as np
import pytest
from torch_twin import rand

import jaxdl as dl
from jaxdl import nn, optim


def _model():
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))


def _loss(x):
    return lambda m: (m(x) ** 2).mean()


def _snapshot(model):
    return {k: np.array(v) for k, v in model.state_dict().items()}


def _assert_unchanged(model, before):
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(value), before[key])


@pytest.mark.parametrize("compiled", [False, True])
def test_gradients_of_another_model_are_refused(compiled):
    x = rand(np.random.default_rng(0), 8, 4)
    model_a, model_b = _model(), _model()
    opt_a = optim.SGD(model_a.parameters(), lr=0.1)
    before = _snapshot(model_a)

    def step(opt, model_b):
        opt.step(dl.grad(_loss(x))(model_b))

    with pytest.raises(ValueError, match=r"another model.*'0\.weight'|'0\.weight'.*another model"):
        (dl.jit(step) if compiled else step)(opt_a, model_b)
    _assert_unchanged(model_a, before)


def test_wrong_shape_names_the_parameter_and_changes_nothing():
    x = rand(np.random.default_rng(1), 8, 4)
    model = _model()
    opt = optim.Adam(model.parameters(), lr=0.1)
    before = _snapshot(model)
    grads = dl.grad(_loss(x))(model)
    grads["2.bias"] = np.zeros((1, 1), np.float32)  # the last entry: the others come first
    with pytest.raises(ValueError, match=r"'2\.bias'.*\(1, 1\).*\(1,\).*nothing was updated"):
        opt.step(grads)
    _assert_unchanged(model, before)
    assert opt.state_dict()["state"] == {}  # no step counted either
