"""Arrays handed out by a module (state_dict(), parameters(), attribute reads) stay readable
and keep their value after later compiled steps, which donate the rest (issue 13, case 5)."""

import numpy as np
from torch_twin import rand

import jaxdl as dl
from jaxdl import nn, optim


def _trained():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = optim.Adam(model.parameters(), lr=0.1)
    x = rand(np.random.default_rng(0), 16, 4)

    @dl.jit
    def step(model, opt):
        opt.step(dl.grad(lambda m: (m(x) ** 2).mean())(model))

    return model, opt, step


def test_state_dict_parameters_and_attributes_kept_across_compiled_steps():
    model, opt, step = _trained()
    step(model, opt)
    sd = model.state_dict()
    params = list(model.parameters())
    weight = model[0].weight
    opt_state = opt.state_dict()["state"][0]["exp_avg"]
    copies = {k: np.array(v) for k, v in sd.items()}
    kept_state = np.array(opt_state)
    step(model, opt)
    step(model, opt)
    for key, value in sd.items():
        np.testing.assert_array_equal(np.asarray(value), copies[key])
    np.testing.assert_array_equal(np.asarray(params[0]), copies["0.weight"])
    np.testing.assert_array_equal(np.asarray(weight), copies["0.weight"])
    np.testing.assert_array_equal(np.asarray(opt_state), kept_state)
    assert not np.array_equal(np.asarray(model[0].weight), copies["0.weight"])  # it did train


def test_arrays_not_handed_out_are_still_donated():
    model, opt, step = _trained()
    step(model, opt)
    internal = list(model._store.values)  # nobody outside holds these
    model._store.lent.clear()
    step(model, opt)
    assert all(v.is_deleted() for v in internal)
