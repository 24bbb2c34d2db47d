"""dl.jit / dl.grad / dl.vmap / dl.checkpoint / dl.no_grad on stateful modules."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxdl as dl
from jaxdl import nn, optim


class Counter(nn.Module):
    """A layer that mutates a buffer in forward, like BatchNorm's statistics."""

    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.register_buffer("calls", jnp.zeros((), jnp.int32))
        self.register_buffer("running", jnp.zeros(features))

    def forward(self, x):
        if self.training:
            self.calls = self.calls + 1
            self.running = 0.9 * self.running + 0.1 * jnp.mean(x, axis=0)
        return self.fc(x)


def _mlp():
    dl.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), Counter(12), nn.ReLU(), nn.Linear(12, 3))


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal((10, 6)), jnp.float32), jnp.asarray(rng.integers(0, 3, 10))


def _step(model, opt, x, y):
    loss, grads = dl.value_and_grad(lambda m: nn.CrossEntropyLoss()(m(x), y))(model)
    opt.step(grads)
    return loss


def _snapshot(model):
    return {k: np.asarray(v) for k, v in model.state_dict().items()}


def test_jit_step_equals_eager_step_and_does_not_recompile():
    eager_model, jit_model = _mlp(), _mlp()
    eager_opt = optim.AdamW(eager_model.parameters(), lr=1e-2)
    jit_opt = optim.AdamW(jit_model.parameters(), lr=1e-2)
    step = dl.jit(_step)
    for i in range(4):
        x, y = _data(i)
        eager_loss = _step(eager_model, eager_opt, x, y)
        jit_loss = step(jit_model, jit_opt, x, y)
        np.testing.assert_allclose(np.asarray(jit_loss), np.asarray(eager_loss), rtol=1e-5)
    for k, v in _snapshot(eager_model).items():
        np.testing.assert_allclose(_snapshot(jit_model)[k], v, rtol=1e-5, atol=1e-6)
    assert step.trace_count == 1
    assert int(jit_model[2].calls) == 4  # buffer mutated inside dl.jit persisted


def test_a_call_with_more_positional_arguments_compiles_again():
    """The compiled step of f(a, b) must not serve f(a, b, c) (it dropped c)."""
    count = dl.jit(lambda *xs: len(xs))
    assert (count(jnp.ones(2)), count(jnp.ones(2), jnp.ones(3))) == (1, 2)


def test_recompiles_only_on_structure_shape_or_mode_change():
    model = _mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = dl.jit(_step)
    x, y = _data()
    step(model, opt, x, y)
    step(model, opt, x + 1, y)
    assert step.trace_count == 1
    step(model, opt, x[:4], y[:4])  # new shapes
    assert step.trace_count == 2
    model.eval()  # mode is part of the structure
    step(model, opt, x, y)
    assert step.trace_count == 3


def test_alternating_train_and_eval_reuses_each_modes_compiled_step():
    """The usual epoch loop (train, evaluate, train again) compiles each step once."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    train_step, evaluate = dl.jit(_step), dl.jit(lambda m, x: m(x))
    x, y = _data()
    x = x[:, :4]
    for _ in range(3):
        model.train()
        train_step(model, opt, x, y)
        model.eval()
        first, second = evaluate(model, x), evaluate(model, x)
        np.testing.assert_array_equal(np.asarray(first), np.asarray(second))  # no dropout
    assert train_step.trace_count == 1 and evaluate.trace_count == 1
    model.train()
    a, b = evaluate(model, x), evaluate(model, x)  # train mode: its own trace, dropout on
    assert evaluate.trace_count == 2 and not np.array_equal(np.asarray(a), np.asarray(b))
    model[1].eval()  # a mixed mode is a mode of its own
    evaluate(model, x)
    assert evaluate.trace_count == 3


def test_frozen_parameters_get_no_gradient_and_no_update():
    model = _mlp()
    model[0].requires_grad_(False)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    frozen = np.asarray(model[0].weight)
    x, y = _data()
    grads = dl.grad(lambda m: nn.CrossEntropyLoss()(m(x), y))(model)
    assert "0.weight" not in grads and "4.weight" in grads
    step = dl.jit(_step)
    for _ in range(3):
        step(model, opt, x, y)
    np.testing.assert_array_equal(np.asarray(model[0].weight), frozen)


def test_dropout_masks_differ_between_steps_and_vanish_in_eval():
    drop = nn.Dropout(0.5)
    forward = dl.jit(lambda m, x: m(x))
    x = jnp.ones((64,))
    a, b = np.asarray(forward(drop, x)), np.asarray(forward(drop, x))
    assert not np.array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 2.0}
    drop.eval()
    np.testing.assert_array_equal(np.asarray(forward(drop, x)), 1.0)
    drop.train()
    c = np.asarray(forward(drop, x))
    assert not np.array_equal(c, a) and not np.array_equal(c, b)


def test_dropout_matches_torch_statistics():
    x = jnp.ones((200, 200))
    out = np.asarray(nn.Dropout(0.3)(x))
    torch_out = torch.nn.Dropout(0.3)(torch.ones(200, 200)).numpy()
    assert abs((out == 0).mean() - (torch_out == 0).mean()) < 0.01
    assert np.allclose(out[out != 0], 1 / 0.7) and np.allclose(torch_out[torch_out != 0], 1 / 0.7)


def test_module_captured_by_closure_is_threaded_not_frozen():
    model = nn.Linear(3, 1)
    forward = dl.jit(lambda x: model(x))
    x = jnp.ones((2, 3))
    first = np.asarray(forward(x))
    model.weight = model.weight + 1.0
    np.testing.assert_allclose(np.asarray(forward(x)), first + 3.0, rtol=1e-6)
    assert forward.trace_count == 1  # a complete trace, with the closure's store threaded


def test_grad_argnums_tuple_and_matches_torch():
    dl.manual_seed(3)
    model = nn.Linear(4, 2)
    torch_model = torch.nn.Linear(4, 2)
    torch_model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_(True)
    (torch_model(tx) ** 2).sum().backward()
    grads_model, grads_x = dl.grad(lambda m, x: jnp.sum(m(x) ** 2), argnums=(0, 1))(model, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(grads_model["weight"]), torch_model.weight.grad.numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(grads_model["bias"]), torch_model.bias.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grads_x), tx.grad.numpy(), rtol=1e-5)


def test_value_and_grad_has_aux_and_buffer_side_effects_persist():
    model = _mlp()
    x, y = _data()
    (loss, logits), grads = dl.value_and_grad(
        lambda m: (nn.CrossEntropyLoss()(m(x), y), m(x)), has_aux=True
    )(model)
    assert logits.shape == (10, 3) and np.isfinite(float(loss))
    assert int(model[2].calls) == 2  # two forward passes inside the loss


def test_no_grad_blocks_gradients():
    model = nn.Linear(3, 3)

    def loss(m):
        with dl.no_grad():
            hidden = m(jnp.ones((1, 3)))
        return jnp.sum(hidden * 2)

    grads = dl.grad(loss)(model)
    assert all(float(jnp.abs(g).sum()) == 0.0 for g in grads.values())


def test_checkpoint_gives_same_gradients_and_keeps_side_effects():
    model = _mlp()
    x, y = _data()
    plain = dl.grad(lambda m: nn.CrossEntropyLoss()(m(x), y))(model)
    remat = dl.grad(lambda m: nn.CrossEntropyLoss()(dl.checkpoint(lambda mm, xx: mm(xx))(m, x), y))(model)
    for k in plain:
        np.testing.assert_allclose(np.asarray(remat[k]), np.asarray(plain[k]), rtol=1e-6)
    assert int(model[2].calls) == 2


def test_vmap_over_examples_equals_batched_call():
    model = _mlp().eval()
    x, _ = _data()
    per_example = dl.vmap(lambda m, xi: m(xi), in_axes=(None, 0))(model, x)
    np.testing.assert_allclose(np.asarray(per_example), np.asarray(model(x)), rtol=1e-5, atol=1e-6)


def test_vmap_refuses_batched_state_writes():
    model = _mlp()  # training mode: Counter writes its buffer
    x, _ = _data()
    with pytest.raises(ValueError, match="model.eval"):
        dl.vmap(lambda m, xi: m(xi[None]), in_axes=(None, 0))(model, x)


def test_per_step_python_work_uses_one_list_per_store():
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(50)])
    opt = optim.SGD(model.parameters(), lr=0.1)
    assert len({m._store for m in model.modules()} | {opt._store}) == 1
    x = jnp.ones((2, 4))
    step = dl.jit(lambda m, o, x: _step(m, o, x, jnp.zeros(2, jnp.int32)))
    step(model, opt, x)
    assert step.trace_count == 1


def test_optimizer_params_from_subset_and_groups():
    model = _mlp()
    opt = optim.SGD([{"params": model[0].parameters(), "lr": 0.0}, {"params": model[4].parameters()}], lr=0.5)
    assert opt.param_groups[0]["lr"] == 0.0 and opt.param_groups[1]["lr"] == 0.5
    before0, before4 = np.asarray(model[0].weight), np.asarray(model[4].weight)
    x, y = _data()
    dl.jit(_step)(model, opt, x, y)
    np.testing.assert_array_equal(np.asarray(model[0].weight), before0)
    assert not np.array_equal(np.asarray(model[4].weight), before4)
