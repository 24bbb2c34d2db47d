"""Optimizers against torch.optim: 200-step trajectories, state dicts, bad input, no recompiles."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxdl as dl
from jaxdl import nn, optim

STEPS = 200


# (name, options): every option that changes the math, alone or combined.
CASES = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=1e-2, amsgrad=True, maximize=True)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("RMSprop", dict(lr=1e-3)),
    ("RMSprop", dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=0.01, centered=True)),
    ("RMSprop", dict(lr=1e-3, momentum=0.9, maximize=True)),
    ("RMSprop", dict(lr=1e-3, momentum=0.5, centered=True)),
    ("Adagrad", dict(lr=0.05)),
    ("Adagrad", dict(lr=0.05, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1,
                     eps=1e-6, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.01, maximize=True)),
    ("Adamax", dict(lr=1e-2)),
    ("Adamax", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01, maximize=True)),
    ("NAdam", dict(lr=1e-2)),
    ("NAdam", dict(lr=1e-2, momentum_decay=1e-2, weight_decay=0.01)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=1e-2)),
    ("RAdam", dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.01)),
    ("RAdam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
]


def make_pair(seed=0):
    """A jaxdl MLP and its torch twin with the same weights."""
    dl.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    twin.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    return model, twin


def batches(n=8, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 6)).astype(np.float32),
             rng.standard_normal((16, 3)).astype(np.float32)) for _ in range(n)]


def mse(model, x, y, sign):
    return sign * jnp.mean((model(x) - y) ** 2)


def _sign(opt):
    # With maximize=True both sides maximize -mse: ascending mse itself diverges
    # chaotically, and float32 rounding differences then grow exponentially.
    return -1.0 if opt.param_groups[0]["maximize"] else 1.0


@dl.jit
def _train_step(model, opt, x, y, sign):
    loss, grads = dl.value_and_grad(mse)(model, x, y, sign)
    opt.step(grads)
    return loss


def train_step(model, opt, x, y):
    return _train_step(model, opt, x, y, _sign(opt))


def torch_steps(twin, opt, data, steps):
    sign = _sign(opt)
    for i in range(steps):
        x, y = data[i % len(data)]
        opt.zero_grad()
        (sign * torch.mean((twin(torch.tensor(x)) - torch.tensor(y)) ** 2)).backward()
        opt.step()


def assert_params_close(model, twin, rtol=1e-5, atol=1e-6):
    ours = model.state_dict()
    for name, value in twin.state_dict().items():
        np.testing.assert_allclose(np.asarray(ours[name]), value.numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)


def lion_reference(params, grads, exp_avgs, lr, b1, b2, wd):
    """The Lion paper's Algorithm 2 (decoupled weight decay), in torch."""
    for p, g, m in zip(params, grads, exp_avgs):
        update = torch.sign(b1 * m + (1 - b1) * g)
        p.mul_(1 - lr * wd).add_(update, alpha=-lr)
        m.mul_(b2).add_(g, alpha=1 - b2)


def _torch_step(twin, topt, x, y):
    topt.zero_grad()
    torch.mean((twin(torch.tensor(x)) - torch.tensor(y)) ** 2).backward()
    topt.step()


@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_trajectory_matches_torch(name, options):
    model, twin = make_pair()
    opt = getattr(optim, name)(model.parameters(), **options)
    topt = getattr(torch.optim, name)(twin.parameters(), **options)
    data = batches()
    for i in range(STEPS):
        train_step(model, opt, *data[i % len(data)])
    torch_steps(twin, topt, data, STEPS)
    assert_params_close(model, twin)


@pytest.mark.parametrize("name", ["Adam", "NAdam", "RAdam", "Adagrad"])
def test_parameters_skipping_steps_keep_their_own_step_counts(name):
    """A parameter without a gradient in some steps is not stepped, as in torch (grad None)."""
    model, twin = make_pair()
    opt = getattr(optim, name)(model.parameters(), lr=1e-2)
    topt = getattr(torch.optim, name)(twin.parameters(), lr=1e-2)
    data = batches()
    step = dl.jit(lambda m, o, x, y, keep: o.step(
        {k: g for k, g in dl.grad(mse)(m, x, y, 1.0).items() if k in keep}))
    for i in range(30):
        x, y = data[i % len(data)]
        keep = ("0.weight", "0.bias", "2.weight", "2.bias") if i % 3 else ("0.weight", "2.weight")
        step(model, opt, x, y, tuple(keep))
        topt.zero_grad()
        torch.mean((twin(torch.tensor(x)) - torch.tensor(y)) ** 2).backward()
        for name_, p in twin.named_parameters():
            if name_ not in keep:
                p.grad = None
        topt.step()
    assert_params_close(model, twin)
    ours = opt.state_dict()["state"]
    theirs = topt.state_dict()["state"]
    assert [float(ours[i]["step"]) for i in range(4)] == [float(theirs[i]["step"]) for i in range(4)]


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lion_matches_paper_formula(wd):
    model, twin = make_pair()
    opt = optim.Lion(model.parameters(), lr=1e-3, weight_decay=wd)
    data = batches()
    for i in range(50):
        train_step(model, opt, *data[i % len(data)])
    params = list(twin.parameters())
    exp_avgs = [torch.zeros_like(p) for p in params]
    for i in range(50):
        x, y = data[i % len(data)]
        twin.zero_grad()
        torch.mean((twin(torch.tensor(x)) - torch.tensor(y)) ** 2).backward()
        with torch.no_grad():
            lion_reference(params, [p.grad for p in params], exp_avgs, 1e-3, 0.9, 0.99, wd)
    assert_params_close(model, twin)


def test_param_groups_with_own_options():
    model, twin = make_pair()
    opt = optim.SGD([{"params": model[0].parameters()},
                     {"params": model[2].parameters(), "lr": 0.2, "momentum": 0.5}], lr=0.05)
    topt = torch.optim.SGD([{"params": twin[0].parameters()},
                            {"params": twin[2].parameters(), "lr": 0.2, "momentum": 0.5}], lr=0.05)
    data = batches()
    for i in range(20):
        train_step(model, opt, *data[i % len(data)])
    torch_steps(twin, topt, data, 20)
    assert_params_close(model, twin)
    assert opt.param_groups[1]["lr"] == 0.2 and opt.param_groups[0]["momentum"] == 0.0


def test_lr_change_takes_effect_without_recompiling():
    model, twin = make_pair()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    topt = torch.optim.Adam(twin.parameters(), lr=1e-2)
    step = dl.jit(_train_step.fn)
    data = batches()
    for i in range(30):
        for group, tgroup in zip(opt.param_groups, topt.param_groups):
            group["lr"] = tgroup["lr"] = 1e-2 * 0.9 ** i
        step(model, opt, *data[i % len(data)], 1.0)
        torch_steps(twin, topt, [data[i % len(data)]], 1)
    assert step.trace_count == 1
    assert_params_close(model, twin)
    assert opt.param_groups[0]["lr"] == 1e-2 * 0.9 ** 29


def test_dynamic_betas_do_not_recompile():
    model, _ = make_pair()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    opt.param_groups[0].make_dynamic("betas")
    step = dl.jit(_train_step.fn)
    data = batches()
    for i in range(5):
        opt.param_groups[0]["betas"] = (0.9 - 0.01 * i, 0.999)
        step(model, opt, *data[0], 1.0)
    assert step.trace_count == 1
    assert opt.param_groups[0]["betas"] == (0.86, 0.999)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad", "NAdam"])
def test_state_dict_round_trips_through_torch(name):
    options = dict(lr=0.01, momentum=0.9) if name in ("SGD", "RMSprop") else dict(lr=0.01)
    model, twin = make_pair()
    opt = getattr(optim, name)(model.parameters(), **options)
    topt = getattr(torch.optim, name)(twin.parameters(), **options)
    data = batches()
    torch_steps(twin, topt, data, 5)
    # torch -> ours: continue both for 10 steps, trajectories stay equal.
    model.load_state_dict({k: v.numpy().copy() for k, v in twin.state_dict().items()})
    opt.load_state_dict(topt.state_dict())
    for i in range(10):
        train_step(model, opt, *data[i % len(data)])
    torch_steps(twin, topt, data, 10)
    assert_params_close(model, twin)
    # ours -> torch: a fresh torch optimizer loads our state dict and matches ours.
    sd = opt.state_dict()
    assert set(sd["param_groups"][0]) == set(topt.state_dict()["param_groups"][0])
    fresh = getattr(torch.optim, name)(twin.parameters(), **options)
    fresh.load_state_dict({
        "state": {i: {k: torch.tensor(np.asarray(v)) for k, v in s.items()}
                  for i, s in sd["state"].items()},
        "param_groups": sd["param_groups"],
    })
    for i, entry in topt.state_dict()["state"].items():
        for key, value in entry.items():
            expected = value.numpy()
            np.testing.assert_allclose(fresh.state[list(twin.parameters())[i]][key].numpy(),
                                       expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_state_dict_before_first_step_is_empty_like_torch():
    model, twin = make_pair()
    assert optim.Adam(model.parameters()).state_dict()["state"] == {}
    ours = optim.Adagrad(model.parameters(), initial_accumulator_value=0.5).state_dict()
    theirs = torch.optim.Adagrad(twin.parameters(), initial_accumulator_value=0.5).state_dict()
    assert set(ours["state"]) == set(theirs["state"])
    np.testing.assert_array_equal(np.asarray(ours["state"][0]["sum"]), theirs["state"][0]["sum"])


def test_load_state_dict_of_other_structure_lists_problems_and_changes_nothing():
    model, _ = make_pair()
    opt = optim.Adam(model.parameters(), lr=1e-2)
    train_step(model, opt, *batches()[0])
    before = opt.state_dict()
    dl.manual_seed(3)
    other = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    other_opt = optim.Adam(other.parameters(), lr=0.5, amsgrad=True)
    train_step(other, other_opt, *batches()[0])
    with pytest.raises(ValueError) as err:
        opt.load_state_dict(other_opt.state_dict())
    message = str(err.value)
    assert "state[0]['exp_avg']: expected shape (16, 6), got (8, 6)" in message
    assert "max_exp_avg_sq" in message
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for i, entry in before["state"].items():
        for k, v in entry.items():
            np.testing.assert_array_equal(np.asarray(after["state"][i][k]), np.asarray(v))
    with pytest.raises(ValueError, match="param_groups: 2 saved, 1 here"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": []}, {"params": []}]})


@pytest.mark.parametrize("lr", [-1.0, math.nan, math.inf])
def test_bad_lr_is_refused(lr):
    model, _ = make_pair()
    with pytest.raises(ValueError, match="lr="):
        optim.SGD(model.parameters(), lr=lr)
    opt = optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="lr="):
        opt.param_groups[0]["lr"] = lr


def test_unknown_and_invalid_options_are_named():
    model, _ = make_pair()
    with pytest.raises(ValueError, match="momentun"):
        optim.SGD([{"params": model.parameters(), "momentun": 0.9}])
    with pytest.raises(TypeError, match="momentun"):
        optim.Adam(model.parameters(), momentun=0.9)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam(model.parameters(), betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="weight_decay"):
        optim.RMSprop(model.parameters(), weight_decay=-1)
    with pytest.raises(ValueError, match="rho"):
        optim.Adadelta(model.parameters(), rho=2.0)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    model, twin = make_pair()
    x, y = batches()[0]
    grads = dl.grad(mse)(model, x, y, 1.0)
    torch.mean((twin(torch.tensor(x)) - torch.tensor(y)) ** 2).backward()
    clipped, total = nn.utils.clip_grad_norm_(grads, max_norm, norm_type)
    want = torch.nn.utils.clip_grad_norm_(twin.parameters(), max_norm, norm_type)
    np.testing.assert_allclose(float(total), float(want), rtol=1e-5)
    for (name, p) in twin.named_parameters():
        np.testing.assert_allclose(np.asarray(clipped[name]), p.grad.numpy(), rtol=1e-5, atol=1e-7)
    opt = optim.SGD(model.parameters(), lr=0.1)
    opt.step(clipped)  # the clipped dict still routes to the parameters


def test_parameters_to_vector_and_back():
    model, twin = make_pair()
    vec = nn.utils.parameters_to_vector(model.parameters())
    np.testing.assert_array_equal(
        np.asarray(vec), torch.nn.utils.parameters_to_vector(twin.parameters()).detach().numpy())
    nn.utils.vector_to_parameters(vec * 2, model.parameters())
    np.testing.assert_array_equal(np.asarray(model[2].bias), 2 * twin[2].bias.detach().numpy())
    with pytest.raises(ValueError, match="expected a vector of 163 elements"):
        nn.utils.vector_to_parameters(vec[:5], model.parameters())


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name,options", [("SGD", dict(lr=0.05, momentum=0.9)), ("Adam", dict(lr=1e-2))])
def test_step_with_closure_matches_torch(name, options, jit):
    """torch's `loss = opt.step(closure)`; the jaxdl closure returns (loss, grads)."""
    model, twin = make_pair()
    opt = getattr(optim, name)(model.parameters(), **options)
    topt = getattr(torch.optim, name)(twin.parameters(), **options)
    data = batches()

    def step(model, opt, x, y):
        return opt.step(lambda: dl.value_and_grad(mse)(model, x, y, 1.0))

    step = dl.jit(step) if jit else step
    for i in range(20):
        x, y = data[i % len(data)]

        def closure(x=x, y=y):
            topt.zero_grad()
            loss = torch.mean((twin(torch.tensor(x)) - torch.tensor(y)) ** 2)
            loss.backward()
            return loss

        ours, theirs = step(model, opt, x, y), topt.step(closure)
        np.testing.assert_allclose(float(ours), theirs.item(), rtol=1e-5)
    assert_params_close(model, twin)


def test_step_closure_in_the_torch_form_explains_the_jaxdl_form():
    model, _ = make_pair()
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = batches()[0]
    with pytest.raises(TypeError, match=r"no loss.backward\(\).*value_and_grad"):
        opt.step(lambda: mse(model, x, y, 1.0))  # a torch closure returns only the loss
    with pytest.raises(TypeError, match="needs the gradients"):
        opt.step()
    grads = dl.grad(mse)(model, x, y, 1.0)
    with pytest.raises(TypeError, match="not both"):
        opt.step(grads, closure=lambda: (0.0, grads))
    assert opt.step(closure=lambda: (1.5, grads)) == 1.5


@pytest.mark.parametrize("name,options,added", [
    ("SGD", dict(lr=0.05, momentum=0.9), dict(lr=0.02, nesterov=True)),
    ("AdamW", dict(lr=1e-2), dict(lr=3e-3, betas=(0.8, 0.99))),
])
def test_group_added_mid_training_follows_torch(name, options, added):
    model, twin = make_pair()
    opt = getattr(optim, name)(model[0].parameters(), **options)
    topt = getattr(torch.optim, name)(twin[0].parameters(), **options)
    step = dl.jit(_train_step.fn)
    data = batches()
    for i in range(60):
        if i == 20:
            opt.add_param_group({"params": model[2].parameters(), **added})
            topt.add_param_group({"params": twin[2].parameters(), **added})
            assert {k: opt.param_groups[1][k] for k in opt.param_groups[1] if k != "params"} == \
                {k: v for k, v in topt.param_groups[1].items() if k != "params"}
        step(model, opt, *data[i % len(data)], 1.0)
        _torch_step(twin, topt, *data[i % len(data)])
    assert step.trace_count == 2  # once per optimizer structure
    assert_params_close(model, twin)
    # the state dict has the new group and loads into torch, and torch's into ours
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2, 3]]
    fresh = getattr(torch.optim, name)(twin[0].parameters(), **options)
    fresh.add_param_group({"params": twin[2].parameters(), **added})
    fresh.load_state_dict({"state": {i: {k: torch.tensor(np.asarray(v)) for k, v in s.items()}
                                     for i, s in sd["state"].items()},
                           "param_groups": sd["param_groups"]})
    opt.load_state_dict(topt.state_dict())
    for i in range(10):
        step(model, opt, *data[i % len(data)], 1.0)
        _torch_step(twin, topt, *data[i % len(data)])
    assert_params_close(model, twin)


def test_group_of_a_module_outside_the_store_joins_it():
    model, twin = make_pair()
    dl.manual_seed(5)
    head = nn.Linear(3, 2)
    thead = torch.nn.Linear(3, 2)
    thead.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in head.state_dict().items()})
    opt = optim.Adam(model.parameters(), lr=1e-2)
    topt = torch.optim.Adam(twin.parameters(), lr=1e-2)
    opt.add_param_group({"params": head.parameters(), "lr": 5e-3})
    topt.add_param_group({"params": thead.parameters(), "lr": 5e-3})
    assert head._store is opt._store is model._store

    @dl.jit
    def step(model, head, opt, x):
        loss, (g_model, g_head) = dl.value_and_grad(
            lambda m, h: jnp.mean(h(m(x)) ** 2), argnums=(0, 1))(model, head)
        opt.step(g_model)
        opt.step(g_head)
        return loss

    for x, _ in batches(5):
        step(model, head, opt, x)
        topt.zero_grad()
        torch.mean(thead(twin(torch.tensor(x))) ** 2).backward()
        topt.step()
    assert_params_close(model, twin)
    assert_params_close(head, thead)


def test_add_param_group_refuses_what_torch_refuses():
    model, twin = make_pair()
    opt = optim.SGD(model[0].parameters(), lr=0.1)
    topt = torch.optim.SGD(twin[0].parameters(), lr=0.1)
    message = "some parameters appear in more than one parameter group"
    with pytest.raises(ValueError, match=message):
        topt.add_param_group({"params": twin[0].parameters()})
    with pytest.raises(ValueError, match=message):
        opt.add_param_group({"params": model[0].parameters()})
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group(model[2].parameters())
    with pytest.raises(ValueError, match="momentun"):
        opt.add_param_group({"params": model[2].parameters(), "momentun": 0.9})
    with pytest.raises(ValueError, match="lr="):
        opt.add_param_group({"params": model[2].parameters(), "lr": -1.0})
    assert len(opt.param_groups) == 1  # nothing half-added
    opt.add_param_group({"params": model[2].parameters()})
    assert opt.param_groups[1]["lr"] == 0.1


@pytest.mark.parametrize("name,options", [
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True)),
    ("AdamW", dict(lr=1e-2, amsgrad=True)),
])
def test_conv_weight_state_is_stored_flat_on_request_and_matches_torch(name, options,
                                                                     monkeypatch):
    """With `Optimizer._flat_state` set, SGD's and Adam's state of a weight with two or more
    dimensions is kept flat (XLA's CPU loops over (O, C, 3, 3) run scalar code); trajectories
    and state dicts are torch's. By default the state keeps the weight's shape."""
    dl.manual_seed(0)
    conv = nn.Conv2d(2, 4, 3)
    default = optim.SGD(conv.parameters(), lr=0.1, momentum=0.9)
    weight_state = default._state[conv._slots["weight"]]
    assert {default._store.values[i].shape for i in weight_state.values()} == {(4, 2, 3, 3)}
    monkeypatch.setattr(optim.Optimizer, "_flat_state", True)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.Flatten(), nn.Linear(64, 3))
    twin = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.Flatten(), torch.nn.Linear(64, 3))
    twin.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    opt = getattr(optim, name)(model.parameters(), **options)
    topt = getattr(torch.optim, name)(twin.parameters(), **options)
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((8, 2, 6, 6)).astype(np.float32),
             rng.standard_normal((8, 3)).astype(np.float32)) for _ in range(4)]
    for i in range(20):
        train_step(model, opt, *data[i % 4])
        _torch_step(twin, topt, *data[i % 4])
    assert_params_close(model, twin)
    weight_state = opt._state[model[0]._slots["weight"]]
    assert {opt._store.values[i].shape for i in weight_state.values()} == {(4 * 2 * 3 * 3,)}
    ours, theirs = opt.state_dict()["state"], topt.state_dict()["state"]
    for index, entry in theirs.items():
        for key, value in entry.items():
            np.testing.assert_allclose(np.asarray(ours[index][key]), value.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=f"{index} {key}")
    # torch's state dict loads back into the flat store, and both go on alike
    opt.load_state_dict(topt.state_dict())
    for i in range(5):
        train_step(model, opt, *data[i % 4])
        _torch_step(twin, topt, *data[i % 4])
    assert_params_close(model, twin)


def test_an_update_written_whole_keeps_its_state_in_the_parameters_shape(monkeypatch):
    """Only an update written as `_new_state` and `_param_update` runs on flat state."""
    monkeypatch.setattr(optim.Optimizer, "_flat_state", True)
    model = nn.Conv2d(2, 4, 3)
    opt = optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9)
    shapes = {opt._store.values[i].shape for i in opt._state[model._slots["weight"]].values()}
    assert shapes == {(4, 2, 3, 3)}
