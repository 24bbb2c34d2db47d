"""jaxdl.memory: vDNN offload / remat policies, residual accounting, the "dyn" planner."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import assert_close, rand

import jaxdl as dl
from jaxdl import models, nn, optim
from jaxdl.memory._residuals import trace

POLICIES = ("none", "conv", "all", "remat")


def _bn_convnet(lib):
    """Conv-BN-ReLU-pool twice, then a linear head; `lib` is torch.nn or jaxdl.nn."""
    return lib.Sequential(
        lib.Conv2d(3, 8, 3, padding=1), lib.BatchNorm2d(8), lib.ReLU(), lib.MaxPool2d(2),
        lib.Conv2d(8, 16, 3, padding=1), lib.BatchNorm2d(16), lib.ReLU(),
        lib.AdaptiveAvgPool2d(2), lib.Flatten(), lib.Linear(64, 5))


def _ce(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def _jit_grads(model, *inputs, loss=_ce):
    grads = dl.jit(lambda m, *a: dl.value_and_grad(loss)(m, *a), donate=False)(model, *inputs)
    return grads[0], dict(grads[1])


def _assert_same_grads(actual, expected, what, tol=1e-6):
    assert set(actual) == set(expected)
    for name in expected:
        err = float(jnp.max(jnp.abs(actual[name] - expected[name])))
        assert err <= tol, f"{what}: gradient of {name} differs by {err:.3g}"


# Small versions of the paper's networks: (builder, kwargs, input size).
SMALL = [("alexnet", dict(width=0.125), 64), ("overfeat", dict(width=0.0625), 79),
         ("vgg11", dict(width=0.0625), 32),
         pytest.param("googlenet", dict(width=0.125), 32, marks=pytest.mark.slow)]


def _conv_input_bytes(name, size, batch):
    """Bytes of every distinct conv input in the torch twin (meta tensors: nothing computed)."""
    with torch.device("meta"):
        twin = models.model_entry(name).torch_twin()
        inputs = {}

        def record(name, args):
            inputs.setdefault(id(args[0]), (name, args[0]))

        for module_name, module in twin.named_modules():
            if isinstance(module, torch.nn.Conv2d):
                module.register_forward_pre_hook(lambda m, args, n=module_name: record(n, args))
        twin(torch.empty(batch, 3, size, size))
    return {n: t.numel() * t.element_size() for n, t in inputs.values()}


def test_unknown_policy_lists_valid_ones():
    with pytest.raises(ValueError, match="'fast'.*'none', 'all', 'conv', 'remat', 'dyn'"):
        dl.memory.offload(_bn_convnet(nn), "fast")
    with pytest.raises(ValueError, match="budget_bytes= and example_inputs="):
        dl.memory.offload(_bn_convnet(nn), "dyn")


def test_offload_returns_the_model_with_its_names_and_state():
    model = _bn_convnet(nn)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    assert dl.memory.offload(model, "all") is model
    assert dl.memory.policy_of(model) == "all"
    after = model.state_dict()
    assert list(after) == list(before)
    for key, value in before.items():
        np.testing.assert_array_equal(np.asarray(after[key]), value)
    dl.memory.offload(model, "none")
    assert dl.memory.policy_of(model) == "none"


def test_bn_convnet_gradients_under_every_policy_match_torch_and_each_other(rng):
    torch.manual_seed(0)
    twin, model = _bn_convnet(torch.nn), _bn_convnet(nn)
    initial = {k: v.clone() for k, v in twin.state_dict().items()}
    x, y = rand(rng, 4, 3, 8, 8), rng.integers(0, 5, 4)
    loss = torch.nn.functional.cross_entropy(twin(torch.tensor(x)), torch.tensor(y))
    loss.backward()
    expected = {n: p.grad.numpy() for n, p in twin.named_parameters()}
    results = {}
    for policy in POLICIES:
        model.load_state_dict(initial)  # BatchNorm running statistics as before torch's step
        dl.memory.offload(model, policy)
        value, grads = _jit_grads(model, jnp.asarray(x), jnp.asarray(y))
        results[policy] = grads
        assert_close(value, loss.item(), f"{policy}: loss", 1e-5)
        for name, g in expected.items():
            assert_close(grads[name], g, f"{policy}: grad of {name}", 1e-4, floor=1e-2)
        # The forward under the policy still updates BatchNorm statistics like torch.
        assert_close(model.state_dict()["1.running_var"], twin.state_dict()["1.running_var"],
                     f"{policy}: running_var", 1e-5)
        if policy != "none":
            _assert_same_grads(grads, results["none"], policy)
    # Eager (no dl.jit) follows the policy as well.
    dl.memory.offload(model, "all")
    eager = dict(dl.grad(_ce)(model, jnp.asarray(x), jnp.asarray(y)))
    _assert_same_grads(eager, results["none"], "eager 'all'", tol=1e-5)


@pytest.mark.parametrize("name,kwargs,size", SMALL)
def test_reference_models_gradients_equal_under_every_policy(name, kwargs, size, rng):
    """Eval mode: train-mode BatchNorm over 4 samples at GoogLeNet's 1x1 last blocks amplifies
    float32 rounding differences between differently fused programs ~1e4-fold (the BN net
    above checks train mode)."""
    twin = models.model_entry(name).torch_twin(num_classes=5, dropout=0.0, **kwargs)
    model = dl.memory.abstract_model(models.get_model, name, num_classes=5, dropout=0.0, **kwargs)
    model.load_state_dict(twin.state_dict())
    model.eval()
    x, y = jnp.asarray(rand(rng, 4, 3, size, size)), jnp.asarray(rng.integers(0, 5, 4))
    results = {}
    # GoogLeNet's backward costs ~40 s of compile per policy on 2 cores even at level 0: it
    # checks "all" (every residual to host) against "none"; "conv" (a subset of "all") and
    # "remat" are checked on the three smaller networks.
    for policy in (("none", "all") if name == "googlenet" else POLICIES):
        # The step as a pure function of arrays (what dl.grad traces), compiled at the suite's
        # XLA level (tests/conftest.py).
        traced = trace(_ce, (dl.memory.offload(model, policy), x, y))
        train, other = ([s.values[i] for s, i in ((traced.stores[s], i) for s, i in slots)]
                        for slots in (traced.train_slots, traced.other_slots))
        step = jax.jit(jax.grad(traced.loss))
        results[policy] = dict(enumerate(step(train, other, [x, y])))
        _assert_same_grads(results[policy], results["none"], f"{name} {policy}")


@pytest.mark.parametrize("name,size,cut", [("alexnet", 227, 0.89), ("overfeat", 231, 0.91),
                                           ("googlenet", 224, 0.95)])
def test_paper_networks_all_offloads_device_residuals(name, size, cut):
    """Batch 128 at the paper's input sizes, on abstract inputs (nothing runs)."""
    model = dl.memory.abstract_model(models.get_model, name)
    x, y = jax.ShapeDtypeStruct((128, 3, size, size), jnp.float32), \
        jax.ShapeDtypeStruct((128,), jnp.int32)
    reports = {p: dl.memory.report(_ce, dl.memory.offload(model, p), x, y, compiled=False)
               for p in ("none", "conv", "all")}
    none, conv, every = reports["none"], reports["conv"], reports["all"]
    assert none.host_bytes == 0 and none.device_bytes > 0
    assert 1 - every.device_bytes / none.device_bytes >= cut
    # What "conv" moves to the host is exactly each distinct conv input, as torch sees them.
    conv_inputs = _conv_input_bytes(name, size, 128)
    assert conv.host_bytes == sum(conv_inputs.values())
    for layer, size_bytes in conv_inputs.items():
        assert conv.by_layer[layer]["host"] == size_bytes, layer
        assert every.by_layer[layer]["host"] == size_bytes, layer
    assert every.host_bytes > conv.host_bytes  # pooling, ReLU, linear inputs too
    assert every.planned_peak_bytes < conv.planned_peak_bytes < none.planned_peak_bytes


def test_vgg16_batch_256_dyn_fits_12_gib():
    model = dl.memory.abstract_model(models.vgg16)
    x = jax.ShapeDtypeStruct((256, 3, 224, 224), jnp.float32)
    budget = 12 * 2**30
    dl.memory.offload(model, "dyn", budget_bytes=budget, example_inputs=(x,))
    plan = dl.memory.plan_of(model)
    chosen = next(c for c in plan.candidates if c.configuration == plan.configuration)
    assert chosen.planned_peak_bytes <= budget
    assert dl.memory.policy_of(model) == plan.configuration != "none"
    by_name = {c.configuration: c for c in plan.candidates}
    assert not by_name["none"].fits  # VGG-16 at batch 256 needs ~25 GiB without offload
    assert by_name["none"].planned_peak_bytes > 2 * budget
    assert plan.configuration in str(plan) and "fits" in plan.reason


def test_budget_nothing_can_meet_names_minimum_and_what_dominates():
    model = dl.memory.abstract_model(models.vgg16)
    x = jax.ShapeDtypeStruct((256, 3, 224, 224), jnp.float32)
    with pytest.raises(dl.memory.BudgetError,
                       match=r"minimum achievable is \d+ bytes .* dominated by largest layer"):
        dl.memory.plan(model, (x,), budget_bytes=4 * 2**30)
    assert dl.memory.policy_of(model) == "none"  # planning leaves the model as it was


def test_report_fields_and_table(rng):
    model = _bn_convnet(nn)
    opt = optim.Adam(model.parameters())
    x = jnp.asarray(rand(rng, 4, 3, 8, 8))
    y = jnp.zeros(4, jnp.int32)
    dl.memory.offload(model, "conv")
    report = dl.memory.report(_ce, model, x, y)
    params = sum(int(v.size) * 4 for v in model.state_dict().values()
                 if v.dtype == jnp.float32)
    trainable = sum(int(v.size) * 4 for _, v in model.named_parameters())
    assert report.input_bytes == x.nbytes + y.nbytes
    assert report.gradient_bytes == trainable
    assert report.param_bytes >= params
    assert report.optimizer_bytes >= 2 * trainable  # Adam's two moments (+ step, lr)
    # conv inputs on the host, the other layers' inputs on the device
    assert report.by_layer["0"] == {"device": 0, "host": x.nbytes}
    assert report.by_layer["4"]["host"] == 4 * 8 * 4 * 4 * 4 and report.by_layer["4"]["device"] == 0
    assert report.by_layer["1"] == {"device": 4 * 8 * 8 * 8 * 4, "host": 0}
    assert report.device_bytes == sum(v["device"] for v in report.by_layer.values())
    assert report.planned_peak_bytes == sum(report.peak_parts().values())
    assert report.compiled["temporaries"] > 0
    text = str(report)
    assert "TOTAL residuals" in text and "planned peak" in text and "policy 'conv'" in text
    assert "<table>" in report._repr_html_()
    del opt


def test_offloaded_step_moves_residuals_to_host_memory_space():
    """The jaxpr of an "all" step carries device_puts to host memory (lowered to host
    offload on GPU; on CPU, XLA lowers them to nothing and the step still runs)."""
    model = dl.memory.offload(_bn_convnet(nn), "all")
    x = jnp.ones((2, 3, 8, 8))
    jaxpr = str(jax.make_jaxpr(lambda v: dl.grad(lambda m: m(x).sum())(model))(0))
    assert "<host>" in jaxpr and "device_put" in jaxpr


def test_digits_training_with_offload_gives_the_same_losses():
    data = dl.data.datasets.digits()
    images = jnp.asarray(np.stack([data[i][0] for i in range(256)]))
    labels = jnp.asarray(np.array([data[i][1] for i in range(256)]))
    losses = {}
    for policy in ("none", "all", "conv"):
        dl.manual_seed(0)
        model = dl.memory.offload(models.cnn(), policy)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        @dl.jit
        def step(model, opt, x, y):
            loss, grads = dl.value_and_grad(_ce)(model, x, y)
            opt.step(grads)
            return loss

        losses[policy] = [float(step(model, opt, images[i:i + 64], labels[i:i + 64]))
                          for _ in range(3) for i in range(0, 256, 64)]
    assert losses["none"][-1] < losses["none"][0]
    for policy in ("all", "conv"):
        np.testing.assert_allclose(losses[policy], losses["none"], rtol=0, atol=1e-6)


def test_report_bad_input_is_named():
    model = _bn_convnet(nn)
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"must return a scalar loss, got \(2, 5\)"):
        dl.memory.report(lambda m, x: m(x), model, x, compiled=False)
    with pytest.raises(TypeError, match="must include the model"):
        dl.memory.report(lambda x: x.sum(), x, compiled=False)
    with pytest.raises(TypeError, match="expects an nn.Module, got function"):
        dl.memory.offload(lambda x: x, "all")
