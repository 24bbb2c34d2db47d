"""Learning-rate schedulers against torch.optim.lr_scheduler, eagerly and inside dl.jit."""

import numpy as np
import pytest
import torch
from torch.optim import lr_scheduler as tsched

import jaxdl as dl
from jaxdl import nn, optim
from jaxdl.optim import lr_scheduler as sched

STEPS = 120


# torch warns that these schedules step without an optimizer step; they only check lrs.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")


def _sequential(m, opt):
    return m.SequentialLR(opt, [m.LinearLR(opt, start_factor=0.1, total_iters=10),
                                m.ExponentialLR(opt, gamma=0.97),
                                m.CosineAnnealingLR(opt, T_max=20)], milestones=[10, 60])


# (id, optimizer name, optimizer options, scheduler factory taking (module, optimizer)).
CASES = [
    ("step", "SGD", {}, lambda m, o: m.StepLR(o, step_size=7, gamma=0.5)),
    ("multistep", "SGD", {}, lambda m, o: m.MultiStepLR(o, milestones=[30, 10, 30, 80], gamma=0.3)),
    ("exponential", "SGD", {}, lambda m, o: m.ExponentialLR(o, gamma=0.95)),
    ("cosine-periodic", "SGD", {}, lambda m, o: m.CosineAnnealingLR(o, T_max=30, eta_min=1e-4)),
    ("cosine", "SGD", {}, lambda m, o: m.CosineAnnealingLR(o, T_max=119)),
    ("warm-restarts-mult", "SGD", {},
     lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=2, eta_min=1e-5)),
    ("warm-restarts", "SGD", {}, lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=7)),
    ("linear", "SGD", {}, lambda m, o: m.LinearLR(o, start_factor=0.1, total_iters=20)),
    ("constant", "SGD", {}, lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=10)),
    ("lambda", "SGD", {}, lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + 0.05 * e))),
    ("sequential", "SGD", {}, _sequential),
    ("onecycle-momentum", "SGD", {"momentum": 0.9},
     lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=STEPS + 1)),
    ("onecycle-betas-3phase", "Adam", {},
     lambda m, o: m.OneCycleLR(o, max_lr=[0.1, 0.05], epochs=11, steps_per_epoch=11,
                               three_phase=True, anneal_strategy="linear")),
]


def make_optimizers(name, options):
    dl.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    groups = [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 0.05}]
    tgroups = [{"params": twin[0].parameters()}, {"params": twin[1].parameters(), "lr": 0.05}]
    return (model, getattr(optim, name)(groups, lr=0.1, **options),
            getattr(torch.optim, name)(tgroups, lr=0.1, **options))


def history(scheduler, opt, step):
    """lr (and momentum / beta1) of every group after construction and after each step."""
    def snapshot():
        out = list(scheduler.get_last_lr())
        for group in opt.param_groups:
            if "betas" in group:
                out.append(group["betas"][0])
            elif "momentum" in group:
                out.append(group["momentum"])
        return [float(v) for v in out]

    rows = [snapshot()]
    for _ in range(STEPS):
        step()
        rows.append(snapshot())
    return np.array(rows)


def torch_history(factory, name, options):
    _, _, topt = make_optimizers(name, options)
    scheduler = factory(tsched, topt)
    return history(scheduler, topt, scheduler.step)


PLATEAU = [dict(patience=3, factor=0.5, cooldown=2, threshold=0.01),
           dict(mode="max", threshold_mode="abs", threshold=0.05, patience=2, factor=0.7,
                min_lr=[0.01, 0.002])]


def metrics():
    rng = np.random.default_rng(0)
    return [float(v) for v in np.maximum(1.0 - 0.02 * np.arange(STEPS), 0.3)
            + 0.05 * rng.standard_normal(STEPS)]


# After these epochs the lr of every group is scaled by hand (on both sides); 29/30 and 89/90 sit
# around cosine-periodic's minima, 119 at cosine's, where torch's chain restarts additively.
EDITS = {5: 0.5, 29: 3.0, 30: 0.5, 47: 2.0, 89: 0.25, 90: 1.5, 119: 0.5}


EDITED = [c for c in CASES if not c[0].startswith("onecycle")]


def edited_history(opt, step, schedulers, edits=EDITS):
    """lr of every group after each step, scaling the lrs by hand after the epochs in `edits`."""
    rows = [[float(lr) for lr in schedulers[-1].get_last_lr()]]
    for epoch in range(1, STEPS + 1):
        step()
        rows.append([float(g["lr"]) for g in opt.param_groups])
        if epoch in edits:
            for group in opt.param_groups:
                group["lr"] = float(group["lr"]) * edits[epoch]
    return np.array(rows)


CHAINS = [
    ("step+exponential", lambda m, o: [m.StepLR(o, step_size=9, gamma=0.5), m.ExponentialLR(o, 0.98)]),
    ("warmup+cosine", lambda m, o: [m.LinearLR(o, start_factor=0.1, total_iters=10),
                                    m.CosineAnnealingLR(o, T_max=40, eta_min=1e-3)]),
    ("multistep+constant", lambda m, o: [m.MultiStepLR(o, [20, 50, 50]), m.ConstantLR(o, 0.5, 30)]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_torch(case):
    _, name, options, factory = case
    _, opt, _ = make_optimizers(name, options)
    scheduler = factory(sched, opt)
    ours = history(scheduler, opt, scheduler.step)
    np.testing.assert_allclose(ours, torch_history(factory, name, options), rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_inside_jit_matches_torch_without_recompiling(case):
    _, name, options, factory = case
    _, opt, _ = make_optimizers(name, options)
    scheduler = factory(sched, opt)
    step = dl.jit(lambda s: s.step())
    ours = history(scheduler, opt, lambda: step(scheduler))
    assert step.trace_count == 1
    # float32 inside the trace: lr slots round to 6e-8, the formulas add a few ulps.
    np.testing.assert_allclose(ours, torch_history(factory, name, options), rtol=2e-6, atol=1e-12)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kwargs", PLATEAU, ids=["min-rel", "max-abs"])
def test_reduce_on_plateau_matches_torch(kwargs, jit):
    _, opt, topt = make_optimizers("SGD", {})
    ours, theirs = sched.ReduceLROnPlateau(opt, **kwargs), tsched.ReduceLROnPlateau(topt, **kwargs)
    step = dl.jit(lambda s, v: s.step(v)) if jit else (lambda s, v: s.step(v))
    values = [-v for v in metrics()] if kwargs.get("mode") == "max" else metrics()
    got, want = [], []
    for v in values:
        step(ours, np.float32(v))
        theirs.step(float(np.float32(v)))
        got.append([float(x) for x in ours.get_last_lr()])
        want.append(theirs.get_last_lr())
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(set(map(tuple, want))) > 2  # the schedule did reduce, more than once
    if jit:
        assert step.trace_count == 1


def test_scheduler_inside_training_step_does_not_recompile():
    model, opt, _ = make_optimizers("SGD", {"momentum": 0.9})
    scheduler = sched.OneCycleLR(opt, max_lr=0.1, total_steps=50)

    @dl.jit
    def train_step(model, opt, scheduler, x):
        loss, grads = dl.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
        opt.step(grads)
        scheduler.step()
        return loss

    x = np.ones((2, 3), np.float32)
    for _ in range(10):
        train_step(model, opt, scheduler, x)
    assert train_step.trace_count == 1
    assert scheduler.last_epoch == 10


def test_state_dict_round_trip_resumes_the_schedule():
    _, opt, _ = make_optimizers("SGD", {})
    first = _sequential(sched, opt)
    for _ in range(15):
        first.step()
    saved, saved_opt = first.state_dict(), opt.state_dict()
    _, opt2, _ = make_optimizers("SGD", {})
    second = _sequential(sched, opt2)
    second.load_state_dict(saved)
    opt2.load_state_dict(saved_opt)
    for _ in range(10):
        first.step()
        second.step()
    assert first.get_last_lr() == second.get_last_lr()
    with pytest.raises(ValueError, match="sub-scheduler states"):
        second.load_state_dict({"last_epoch": 3})
    with pytest.raises(ValueError, match="expected keys"):
        sched.StepLR(opt2, 3).load_state_dict({"last_epoch": 3})


def test_bad_arguments():
    _, opt, _ = make_optimizers("SGD", {})
    with pytest.raises(ValueError, match="total_steps"):
        sched.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ValueError, match="T_0"):
        sched.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="milestones"):
        sched.SequentialLR(opt, [sched.StepLR(opt, 3)], milestones=[2])
    one = sched.OneCycleLR(opt, max_lr=0.1, total_steps=3, cycle_momentum=False)
    for _ in range(3):
        one.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        one.step()


def test_one_cycle_turns_on_momentum_of_sgd_built_without_it():
    """torch's SGD starts using momentum once OneCycleLR sets it; so must ours."""
    model, opt, _ = make_optimizers("SGD", {})
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    twin.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    topt = torch.optim.SGD([{"params": twin[0].parameters()},
                            {"params": twin[1].parameters(), "lr": 0.05}], lr=0.1)
    ours, theirs = sched.OneCycleLR(opt, max_lr=0.1, total_steps=30), \
        tsched.OneCycleLR(topt, max_lr=0.1, total_steps=30)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)

    @dl.jit
    def train_step(model, opt, scheduler):
        grads = dl.grad(lambda m: (m(x) ** 2).mean())(model)
        opt.step(grads)
        scheduler.step()

    for _ in range(20):
        train_step(model, opt, ours)
        topt.zero_grad()
        (twin(torch.tensor(x)) ** 2).mean().backward()
        topt.step()
        theirs.step()
    for name, value in twin.state_dict().items():
        np.testing.assert_allclose(np.asarray(model.state_dict()[name]), value.numpy(), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case", EDITED, ids=[c[0] for c in EDITED])
def test_hand_edited_lr_carries_forward_as_in_torch(case, jit):
    _, name, options, factory = case
    _, opt, topt = make_optimizers(name, options)
    ours, theirs = factory(sched, opt), factory(tsched, topt)
    step = dl.jit(lambda s: s.step()) if jit else (lambda s: s.step())
    got = edited_history(opt, lambda: step(ours), [ours])
    want = edited_history(topt, theirs.step, [theirs])
    np.testing.assert_allclose(got, want, rtol=2e-6 if jit else 1e-6, atol=1e-12)
    if jit:
        assert step.trace_count == 1


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["both-stepped", "ChainedScheduler"])
@pytest.mark.parametrize("chain", CHAINS, ids=[c[0] for c in CHAINS])
def test_two_schedulers_on_one_optimizer_chain_as_in_torch(chain, wrapped, jit):
    _, factory = chain
    _, opt, topt = make_optimizers("SGD", {})
    ours, theirs = factory(sched, opt), factory(tsched, topt)
    if wrapped:
        ours, theirs = [sched.ChainedScheduler(ours)], [tsched.ChainedScheduler(theirs)]

    def step_all(schedulers):
        for scheduler in schedulers:
            scheduler.step()

    step = dl.jit(lambda *schedulers: step_all(schedulers)) if jit else (lambda *s: step_all(s))
    got = edited_history(opt, lambda: step(*ours), ours, edits={60: 2.0})
    want = edited_history(topt, lambda: step_all(theirs), theirs, edits={60: 2.0})
    np.testing.assert_allclose(got, want, rtol=2e-6 if jit else 1e-6, atol=1e-12)
    if jit:
        assert step.trace_count == 1


@pytest.mark.parametrize("factory", [lambda m, o: m.StepLR(o, step_size=4, gamma=0.7),
                                     lambda m, o: m.ExponentialLR(o, gamma=0.9),
                                     lambda m, o: m.ReduceLROnPlateau(o, patience=1)],
                         ids=["step", "exponential", "plateau"])
def test_group_added_after_the_scheduler_is_scheduled_as_in_torch(factory):
    model, opt, topt = make_optimizers("SGD", {})
    twin = torch.nn.Linear(2, 2)
    dl.manual_seed(1)
    extra = nn.Linear(2, 2)
    ours, theirs = factory(sched, opt), factory(tsched, topt)
    plateau = isinstance(ours, sched.ReduceLROnPlateau)
    step = dl.jit(lambda s, v: s.step(v) if plateau else s.step())
    got, want = [], []
    for epoch in range(30):
        if epoch == 10:
            opt.add_param_group({"params": extra.parameters(), "lr": 0.3})
            topt.add_param_group({"params": twin.parameters(), "lr": 0.3})
        step(ours, np.float32(1.0))  # a metric that never improves: the plateau reduces
        theirs.step(1.0) if plateau else theirs.step()
        got.append([float(g["lr"]) for g in opt.param_groups])
        want.append([g["lr"] for g in topt.param_groups])
    assert [len(r) for r in got] == [len(r) for r in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6)
    assert want[-1][2] < 0.3  # the added group was scheduled
