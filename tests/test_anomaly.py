"""Out-of-range indices raise IndexError eagerly as in torch; under dl.detect_anomaly compiled
steps raise too, and at the first NaN/inf, naming the layer (issue 13, case 4)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import rand

import jaxdl as dl
from jaxdl import nn, optim
from jaxdl.nn import functional as F


def _torch_error(fn):
    with pytest.raises(IndexError) as info:
        fn()
    return str(info.value)


def test_embedding_index_out_of_range_raises_like_torch():
    message = _torch_error(lambda: torch.nn.Embedding(10, 3)(torch.tensor([1, 12])))
    emb = nn.Embedding(10, 3)
    with pytest.raises(IndexError, match=message):
        emb(jnp.array([1, 12]))
    with pytest.raises(IndexError, match=message):
        emb(jnp.array([-1, 2]))
    with pytest.raises(IndexError, match=message):
        F.embedding_bag(jnp.array([[0, 10]]), emb.weight)


def test_embedding_index_out_of_range_under_jit_with_detect_anomaly_names_the_layer():
    model = nn.Sequential(nn.Embedding(10, 3), nn.Linear(3, 2))
    forward = dl.jit(lambda m, i: m(i))
    forward(model, jnp.array([1, 2]))
    with dl.detect_anomaly(), pytest.raises(IndexError, match=r"0 \(Embedding\): index out of range"):
        forward(model, jnp.array([1, 12]))
    dl.set_detect_anomaly(True)
    try:
        with pytest.raises(IndexError):
            forward(model, jnp.array([1, 12]))
    finally:
        dl.set_detect_anomaly(False)
    assert not np.isnan(np.asarray(forward(model, jnp.array([1, 9])))).any()


class _Sqrt(nn.Module):
    def forward(self, x):
        return jnp.sqrt(x)


def test_first_nan_in_a_compiled_step_names_the_layer_and_changes_nothing():
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(3, 4), _Sqrt(), nn.Linear(4, 1))
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = rand(rng, 8, 3)

    @dl.jit
    def step(model, opt, x):
        loss, grads = dl.value_and_grad(lambda m: m(x).mean())(model)
        opt.step(grads)
        return loss

    assert np.isnan(dl.jit(lambda m, x: m(x).mean())(model, x))  # unchecked: NaN, as torch
    before = {k: np.array(v) for k, v in model.state_dict().items()}
    with dl.detect_anomaly(), pytest.raises(RuntimeError, match=r"^1 \(_Sqrt\): output contains NaN"):
        step(model, opt, x)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(value), before[key])


def test_nan_gradient_names_the_parameter():
    model = nn.Linear(2, 1)
    model.weight, model.bias = jnp.zeros((1, 2)), jnp.zeros((1,))
    grad = dl.jit(lambda m, x: dl.grad(lambda m: jnp.sqrt(jnp.abs(m(x))).sum())(m))
    x = jnp.zeros((1, 2))
    assert np.isnan(np.asarray(grad(model, x)["weight"])).all()  # unchecked: NaN, as torch
    with dl.detect_anomaly(), pytest.raises(RuntimeError, match="gradient of 'weight'"):
        grad(model, x)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("target", [[1, 7, 0], [1, -3, 0]])
def test_class_label_out_of_range_raises_like_torch(loss, target):
    logits = rand(np.random.default_rng(2), 3, 5)
    message = _torch_error(lambda: getattr(torch.nn.functional, loss)(
        torch.from_numpy(logits), torch.tensor(target)))
    with pytest.raises(IndexError, match=message):
        getattr(F, loss)(jnp.asarray(logits), jnp.array(target))
    compute = dl.jit(lambda x, y: getattr(F, loss)(x, y))
    with dl.detect_anomaly(), pytest.raises(IndexError, match=message):
        compute(jnp.asarray(logits), jnp.array(target))
    target = np.array(target)
    ignored = np.where((target >= 0) & (target < 5), target, -100)  # ignore_index is allowed
    np.testing.assert_allclose(
        compute(jnp.asarray(logits), jnp.asarray(ignored)),
        getattr(torch.nn.functional, loss)(torch.from_numpy(logits), torch.from_numpy(ignored)),
        rtol=1e-5)


def test_cross_entropy_label_out_of_range_in_a_module_names_it():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 5)
            self.loss = nn.CrossEntropyLoss()

        def forward(self, x, y):
            return self.loss(self.fc(x), y)

    net = Net()
    x = rand(np.random.default_rng(3), 2, 4)
    compute = dl.jit(lambda m, x, y: m(x, y))
    with dl.detect_anomaly(), pytest.raises(IndexError, match=r"^loss \(CrossEntropyLoss\): Target 7"):
        compute(net, x, jnp.array([1, 7]))
