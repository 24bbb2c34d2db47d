"""autocast dtypes (vs torch's CPU autocast where its CPU and CUDA lists agree), GradScaler
against torch.amp.GradScaler inside dl.jit, and bf16 training accuracy on digits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as tF  # noqa: N812

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn, optim

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 8)).astype(np.float32)
W = rng.standard_normal((5, 8)).astype(np.float32)
IMG = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
KERNEL = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
LABELS = np.array([0, 3, 1, 4])

# Ops whose autocast dtype is the same in torch's CPU and CUDA lists: (ours, torch's).
AGREEING = {
    "linear": (lambda f: f.linear(X, W), lambda: tF.linear(torch.tensor(X), torch.tensor(W))),
    "conv2d": (lambda f: f.conv2d(IMG, KERNEL),
               lambda: tF.conv2d(torch.tensor(IMG), torch.tensor(KERNEL))),
    "cross_entropy": (lambda f: f.cross_entropy(f.linear(X, W), LABELS),
                      lambda: tF.cross_entropy(tF.linear(torch.tensor(X), torch.tensor(W)),
                                               torch.tensor(LABELS))),
    "nll_loss": (lambda f: f.nll_loss(f.linear(X, W), LABELS),
                 lambda: tF.nll_loss(tF.linear(torch.tensor(X), torch.tensor(W)),
                                     torch.tensor(LABELS))),
    "mse_loss": (lambda f: f.mse_loss(f.linear(X, W), jnp.zeros((4, 5))),
                 lambda: tF.mse_loss(tF.linear(torch.tensor(X), torch.tensor(W)),
                                     torch.zeros(4, 5))),
    "l1_loss": (lambda f: f.l1_loss(f.linear(X, W), jnp.zeros((4, 5))),
                lambda: tF.l1_loss(tF.linear(torch.tensor(X), torch.tensor(W)), torch.zeros(4, 5))),
    "bce_with_logits": (
        lambda f: f.binary_cross_entropy_with_logits(f.linear(X, W), jnp.zeros((4, 5))),
        lambda: tF.binary_cross_entropy_with_logits(tF.linear(torch.tensor(X), torch.tensor(W)),
                                                    torch.zeros(4, 5))),
}


@pytest.mark.parametrize("op", sorted(AGREEING))
def test_autocast_dtype_matches_torch_cpu(op):
    ours, theirs = AGREEING[op]
    with dl.amp.autocast(dtype=jnp.bfloat16):
        got = ours(F)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = theirs()
    assert str(got.dtype) == str(want.dtype).removeprefix("torch.")
    assert ours(F).dtype == jnp.float32  # outside autocast nothing changes


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm"])
def test_cuda_list_ops_run_in_float32(op):
    """torch's CPU autocast keeps these bfloat16; its CUDA list (followed here) says float32."""
    fn = {"softmax": lambda h: F.softmax(h, dim=1), "log_softmax": lambda h: F.log_softmax(h, dim=1),
          "layer_norm": lambda h: F.layer_norm(h, (5,))}[op]
    with dl.amp.autocast(dtype=jnp.bfloat16):
        h = F.linear(X, W)
        assert h.dtype == jnp.bfloat16 and fn(h).dtype == jnp.float32


def test_float16_enabled_flag_and_nesting():
    with dl.amp.autocast(dtype=jnp.float16):
        assert F.linear(X, W).dtype == jnp.float16
        with dl.amp.autocast(enabled=False):
            assert F.linear(X, W).dtype == jnp.float32
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        dl.amp.autocast(dtype=jnp.float32)


def test_jit_recompiles_when_autocast_state_differs():
    dl.manual_seed(0)
    model = nn.Linear(8, 5)
    forward = dl.jit(lambda m, x: m(x))
    assert forward(model, X).dtype == jnp.float32
    with dl.amp.autocast(dtype=jnp.bfloat16):
        assert forward(model, X).dtype == jnp.bfloat16
        assert forward(model, X).dtype == jnp.bfloat16
    assert forward(model, X).dtype == jnp.float32
    assert forward.trace_count == 2
    assert model.weight.dtype == jnp.float32  # parameters stay float32


# ---- GradScaler ---------------------------------------------------------------------------------

PATTERN = [0, 0, 1, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]  # 1 inf, 2 nan
POISON = [0.0, np.inf, np.nan]


def test_grad_scaler_matches_torch_inside_jit():
    dl.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 2))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    twin.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    options = dict(init_scale=2.0**10, growth_interval=3, growth_factor=4.0, backoff_factor=0.25)
    scaler = dl.amp.GradScaler(**options)
    tscaler = torch.amp.GradScaler("cpu", **options)
    y = rng.standard_normal((4, 2)).astype(np.float32)

    @dl.jit
    def step(model, opt, scaler, x, poison):
        def loss_fn(m):
            return scaler.scale(jnp.mean((m(x) - y) ** 2))
        grads = dl.grad(loss_fn)(model)
        grads["0.weight"] = grads["0.weight"].at[0, 0].add(poison)
        scaler.step(opt, grads)
        scaler.update()

    ours, theirs = [], []
    for flag in PATTERN:
        step(model, opt, scaler, X, np.float32(POISON[flag]))
        topt.zero_grad()
        tscaler.scale(torch.mean((twin(torch.tensor(X)) - torch.tensor(y)) ** 2)).backward()
        with torch.no_grad():
            twin[0].weight.grad[0, 0] += POISON[flag]
        tscaler.step(topt)
        tscaler.update()
        ours.append(scaler.get_scale())
        theirs.append(tscaler.get_scale())
    assert ours == theirs
    assert step.trace_count == 1
    for name, value in twin.state_dict().items():
        np.testing.assert_allclose(np.asarray(model.state_dict()[name]), value.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    assert scaler.state_dict() == tscaler.state_dict()


def test_grad_scaler_eager_skips_and_state_dict_round_trip():
    dl.manual_seed(0)
    model = nn.Linear(8, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = dl.amp.GradScaler(init_scale=8.0)
    before = np.asarray(model.weight)
    grads = dl.grad(lambda m: scaler.scale(m(X).sum()))(model)
    grads = scaler.unscale_(opt, jax.tree.map(lambda g: g.at[0].set(jnp.nan), grads))
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt, grads)
    scaler.step(opt, grads)
    scaler.update()
    np.testing.assert_array_equal(np.asarray(model.weight), before)
    assert scaler.get_scale() == 4.0
    other = dl.amp.GradScaler()
    other.load_state_dict(scaler.state_dict())
    assert other.state_dict() == scaler.state_dict()
    with pytest.raises(ValueError, match="expected keys"):
        other.load_state_dict({"scale": 1.0})
    assert dl.amp.GradScaler(enabled=False).scale(3.0) == 3.0


# ---- bf16 training on digits ------------------------------------------------------------------

def test_bf16_autocast_digits_accuracy_within_one_point_of_float32():
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(x))
    train, test = order[:1400], order[1400:]

    def run(autocast: bool):
        dl.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        opt = optim.Adam(model.parameters(), lr=3e-3)
        loss_fn = nn.CrossEntropyLoss()

        @dl.jit
        def train_step(model, opt, xb, yb):
            loss, grads = dl.value_and_grad(lambda m: loss_fn(m(xb), yb))(model)
            opt.step(grads)
            return loss

        batches = np.random.default_rng(1)
        with dl.amp.autocast(dtype=jnp.bfloat16, enabled=autocast):
            for _ in range(15):
                perm = batches.permutation(train)
                for i in range(0, len(perm), 100):
                    train_step(model, opt, x[perm[i:i + 100]], y[perm[i:i + 100]])
            logits = model(x[test])
        assert model[0].weight.dtype == jnp.float32
        return float(np.mean(np.argmax(np.asarray(logits, np.float32), 1) == y[test]))

    full, mixed = run(False), run(True)
    assert full > 0.95
    assert abs(full - mixed) <= 0.01, (full, mixed)
