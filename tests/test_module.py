"""nn.Module behaviour against torch.nn.Module: names, order, shapes, loading, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxdl as dl
from jaxdl import nn


def _pair(in_features=8, hidden=16, out=4):
    torch_model = torch.nn.Sequential(
        torch.nn.Linear(in_features, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(hidden, out), torch.nn.Tanh(),
    )
    model = nn.Sequential(
        nn.Linear(in_features, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, out), nn.Tanh()
    )
    return torch_model, model


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 5)
        self.register_buffer("counter", torch.zeros(2))
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(5, 2), "b": torch.nn.Linear(5, 1, bias=False)})
        self.layers = torch.nn.ModuleList([torch.nn.Linear(5, 5) for _ in range(2)])
        self.scale = torch.nn.Parameter(torch.ones(1))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 5)
        self.register_buffer("counter", jnp.zeros(2))
        self.heads = nn.ModuleDict({"a": nn.Linear(5, 2), "b": nn.Linear(5, 1, bias=False)})
        self.layers = nn.ModuleList([nn.Linear(5, 5) for _ in range(2)])
        self.scale = nn.Parameter(jnp.ones(1))


def _shapes(state_dict):
    return [(k, tuple(v.shape)) for k, v in state_dict.items()]


@pytest.mark.parametrize("factory", [_pair, lambda: (TorchBlock(), Block())])
def test_state_dict_keys_order_and_shapes_match_torch(factory):
    torch_model, model = factory()
    assert _shapes(model.state_dict()) == _shapes(torch_model.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in torch_model.named_parameters()]
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in torch_model.named_buffers()]
    assert [n for n, _ in model.named_modules()] == [n for n, _ in torch_model.named_modules()]
    assert [n for n, _ in model.named_children()] == [n for n, _ in torch_model.named_children()]


def test_loading_torch_weights_gives_identical_outputs():
    torch_model, model = _pair()
    torch_model.eval()
    model.eval()
    result = model.load_state_dict(torch_model.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = np.random.default_rng(0).standard_normal((7, 8)).astype(np.float32)
    expected = torch_model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(x))), expected, atol=1e-6)


def test_repr_matches_torch():
    torch_model, model = _pair()
    assert repr(model) == repr(torch_model)
    assert repr(Block()) == repr(TorchBlock()).replace("TorchBlock", "Block")


def test_default_linear_init_follows_torch_bounds():
    layer = nn.Linear(50, 400)
    bound = 1 / np.sqrt(50)
    w, b = np.asarray(layer.weight), np.asarray(layer.bias)
    # kaiming_uniform_(a=sqrt(5)) on fan_in 50 gives U(-1/sqrt(50), 1/sqrt(50)), as torch.
    assert w.shape == (400, 50) and np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / np.sqrt(3)) < 0.01 * bound / np.sqrt(3) * 10
    assert np.abs(b).max() <= bound


def test_manual_seed_makes_construction_reproducible():
    dl.manual_seed(123)
    a = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    dl.manual_seed(123)
    b = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    c = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    for (_, x), (_, y), (_, z) in zip(a.state_dict().items(), b.state_dict().items(), c.state_dict().items()):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert not np.array_equal(np.asarray(x), np.asarray(z))


def test_explicit_key_bypasses_global_stream():
    key = jax.random.key(7)
    dl.manual_seed(0)
    a = nn.Linear(3, 3, key=key)
    dl.manual_seed(1)
    b = nn.Linear(3, 3, key=key)
    np.testing.assert_array_equal(np.asarray(a.weight), np.asarray(b.weight))


def test_load_state_dict_reports_every_problem_and_leaves_module_unchanged():
    _, model = _pair()
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    bad = dict(model.state_dict())
    del bad["0.bias"]
    bad["extra.weight"] = np.zeros(3)
    bad["3.weight"] = np.zeros((5, 5), np.float32)
    bad["0.weight"] = np.ones((16, 8), np.float32)  # valid: must not be written either
    with pytest.raises(RuntimeError) as info:
        model.load_state_dict(bad)
    message = str(info.value)
    for fragment in ("0.bias", "extra.weight", "3.weight", "expected shape (4, 16), got (5, 5)"):
        assert fragment in message
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), before[k])


def test_load_state_dict_non_strict_returns_missing_and_unexpected():
    _, model = _pair()
    partial = {"0.weight": np.ones((16, 8), np.float32), "junk": np.zeros(1)}
    missing, unexpected = model.load_state_dict(partial, strict=False)
    assert unexpected == ["junk"]
    assert missing == ["0.bias", "3.weight", "3.bias"]
    np.testing.assert_array_equal(np.asarray(model[0].weight), 1.0)


def test_wrong_input_shape_names_module_path_class_and_shapes():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 4), nn.Linear(5, 2)))
    with pytest.raises(nn.ShapeError, match=r"2\.1 \(Linear\).*size 5.*\(3, 4\)"):
        model(jnp.ones((3, 8)))
    with pytest.raises(nn.ShapeError, match=r"<root>|0 \(Linear\)"):
        model[0](jnp.ones((3, 7)))


def test_assigning_non_array_to_parameter_is_a_type_error():
    layer = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="parameter 'weight'"):
        layer.weight = [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(TypeError):
        nn.Parameter("not an array")


def test_train_eval_requires_grad_to_and_apply():
    torch_model, model = _pair()
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    model[0].requires_grad_(False)
    grads = dl.grad(lambda m: jnp.sum(m(jnp.ones((2, 8)))))(model.eval())
    assert sorted(grads) == ["3.bias", "3.weight"]
    model.to(jnp.bfloat16)
    assert all(v.dtype == jnp.bfloat16 for v in model.state_dict().values())
    visited = []
    model.apply(lambda m: visited.append(type(m).__name__))
    torch_visited = []
    torch_model.apply(lambda m: torch_visited.append(type(m).__name__))
    assert visited == torch_visited


def test_containers_index_like_torch():
    _, model = _pair()
    assert isinstance(model[0], nn.Linear) and isinstance(model[-1], nn.Tanh)
    tail = model[3:]
    assert isinstance(tail, nn.Sequential) and len(tail) == 2
    layers = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    layers.append(nn.Tanh())
    assert [type(m).__name__ for m in layers] == ["Linear", "ReLU", "Tanh"]
    with pytest.raises(IndexError):
        layers[3]
    heads = nn.ModuleDict({"x": nn.ReLU()})
    with pytest.raises(KeyError, match="keys: \\['x'\\]"):
        heads["y"]


def test_shared_submodule_is_one_parameter_set():
    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
