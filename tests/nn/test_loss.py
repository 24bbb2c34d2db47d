"""Losses (functional forms and modules) against PyTorch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import assert_close, check_twin, rand

import jaxdl.nn.functional as F
from jaxdl import nn


def check_loss(name, args, kwargs, inputs, diff=(0,)):
    """Build torch.nn.<name> and nn.<name>, compare the loss and its grads wrt `diff` inputs."""
    t_inputs = [torch.tensor(x, requires_grad=i in diff) for i, x in enumerate(inputs)]
    t_loss = getattr(torch.nn, name)(*args, **kwargs)(*t_inputs)
    j_module = getattr(nn, name)(*args, **kwargs)

    def f(*diff_values):
        values = list(inputs)
        for i, v in zip(diff, diff_values):
            values[i] = v
        return j_module(*values)

    j_loss = f(*[inputs[i] for i in diff])
    assert_close(j_loss, t_loss, f"{name} {kwargs} value")
    cot = rand(np.random.default_rng(7), *t_loss.shape)
    (t_loss * torch.tensor(cot)).sum().backward()
    grads = jax.grad(lambda *v: (f(*v) * cot).sum(), argnums=tuple(range(len(diff))))(
        *[inputs[i] for i in diff])
    for i, g in zip(diff, grads):
        assert_close(g, t_inputs[i].grad, f"{name} {kwargs} grad of input {i}", 1e-4)


REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_options(reduction, rng):
    logits = rand(rng, 6, 5, 3)
    target = rng.integers(0, 5, (6, 3))
    target[0, 0] = target[3, 2] = -100
    weight = np.abs(rand(rng, 5)) + 0.1
    for kwargs in [{}, {"weight": torch.tensor(weight)}, {"label_smoothing": 0.2},
                   {"weight": torch.tensor(weight), "label_smoothing": 0.3, "ignore_index": 1}]:
        ignored = kwargs.get("ignore_index", -100)
        kwargs = dict(kwargs, reduction=reduction)
        check_loss("CrossEntropyLoss", (), kwargs,
                   [logits, np.where(target == -100, ignored, target)])
    probs = np.asarray(jax.nn.softmax(rand(rng, 6, 5, 3), axis=1))
    for kwargs in [{}, {"weight": torch.tensor(weight), "label_smoothing": 0.1}]:
        check_loss("CrossEntropyLoss", (), dict(kwargs, reduction=reduction), [logits, probs],
                   diff=(0, 1))


def test_cross_entropy_unbatched_and_nll(rng):
    check_loss("CrossEntropyLoss", (), {"label_smoothing": 0.1},
               [rand(rng, 4), np.array(2)])
    logp = np.asarray(jax.nn.log_softmax(rand(rng, 5, 4), axis=1))
    target = np.array([0, 3, -100, 1, 1])
    weight = torch.tensor(np.abs(rand(rng, 4)) + 0.1)
    for reduction in REDUCTIONS:
        check_loss("NLLLoss", (), {"weight": weight, "reduction": reduction}, [logp, target])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses(reduction, rng):
    x, y = rand(rng, 4, 5, scale=2.0), rand(rng, 4, 5)
    for name, kwargs in [("MSELoss", {}), ("L1Loss", {}), ("SmoothL1Loss", {}),
                         ("SmoothL1Loss", {"beta": 0.5}), ("SmoothL1Loss", {"beta": 0.0}),
                         ("HuberLoss", {}), ("HuberLoss", {"delta": 2.5})]:
        check_loss(name, (), dict(kwargs, reduction=reduction), [x, y], diff=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_losses(reduction, rng):
    logits = rand(rng, 4, 3, scale=3.0)
    probs = np.asarray(jax.nn.sigmoid(logits))
    target = rng.uniform(size=(4, 3)).astype(np.float32)
    weight = torch.tensor(np.abs(rand(rng, 3)) + 0.1)
    check_loss("BCELoss", (), {"reduction": reduction}, [probs, target])
    check_loss("BCELoss", (weight,), {"reduction": reduction}, [probs, target])
    check_loss("BCEWithLogitsLoss", (), {"reduction": reduction}, [logits, target], (0, 1))
    check_loss("BCEWithLogitsLoss", (), {"reduction": reduction, "weight": weight,
                                         "pos_weight": torch.tensor([0.5, 2.0, 3.0])},
               [logits, target], (0, 1))


@pytest.mark.parametrize("reduction", [*REDUCTIONS, "batchmean"])
def test_kl_div(reduction, rng):
    logp = np.asarray(jax.nn.log_softmax(rand(rng, 4, 5), axis=1))
    q = np.array(jax.nn.softmax(rand(rng, 4, 5), axis=1))
    q[0, 0] = 0.0  # 0 * log 0 = 0
    check_loss("KLDivLoss", (), {"reduction": reduction}, [logp, q])  # d/dq log 0 = -inf
    check_loss("KLDivLoss", (), {"reduction": reduction, "log_target": True},
               [logp, np.log(q + 1e-3)], (0, 1))


def test_loss_errors(rng):
    with pytest.raises(nn.ShapeError, match=r"MSELoss.*target of shape \(2, 3\)"):
        nn.MSELoss()(rand(rng, 2, 3), rand(rng, 3, 2))
    with pytest.raises(ValueError, match="reduction"):
        nn.L1Loss(reduction="avg")
    assert F.huber_loss(rand(rng, 2), rand(rng, 2)).shape == ()


def test_loss_modules_match_torch():
    rng = np.random.default_rng(6)
    x, target = rand(rng, 2, 7), np.array([[6, 0, 3, -1, 1, 1, 1], [2, -1, 0, 0, 0, 0, 0]])
    check_twin(torch.nn.MultiLabelMarginLoss(reduction="sum"), nn.MultiLabelMarginLoss(reduction="sum"),
               [x, target], modes=("train",))
    check_twin(torch.nn.TripletMarginWithDistanceLoss(margin=0.5),
               nn.TripletMarginWithDistanceLoss(margin=0.5), [rand(rng, 3, 4) for _ in range(3)],
               modes=("train",))
    with pytest.raises(nn.ShapeError, match=r"MultiLabelMarginLoss\): expected target of shape"):
        nn.MultiLabelMarginLoss()(x, target[0])
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        nn.TripletMarginWithDistanceLoss(margin=0.0)
    with pytest.raises(nn.ShapeError, match=r"expected negative of the anchor's rank 2"):
        nn.TripletMarginWithDistanceLoss()(x, x, x[0])


@pytest.mark.parametrize("case", ["indices", "unbatched", "probabilities", "k_dim"])
def test_linear_cross_entropy(case, rng):
    x, w, b = rand(rng, 5, 4), rand(rng, 3, 4), rand(rng, 3)
    target = np.array([0, 2, 1, -100, 2])
    kwargs = dict(label_smoothing=0.1, weight=jnp.asarray([1.0, 2.0, 0.5]))
    if case == "unbatched":
        x, target, kwargs = x[0], np.array(1), dict(reduction="sum")
    elif case == "probabilities":
        target, kwargs = np.asarray(jax.nn.softmax(rand(rng, 5, 3))), dict(reduction="none")
    elif case == "k_dim":
        w, b = rand(rng, 3, 2, 4), rand(rng, 3, 2)
        target, kwargs = np.array([[0, 1], [2, 2], [1, 0], [0, 0], [2, 1]]), dict(ignore_index=0)
    t_kwargs = {k: torch.tensor(np.asarray(v)) if k == "weight" else v for k, v in kwargs.items()}
    check_functional(lambda x, w, b, t, **kw: F.linear_cross_entropy(x, w, t, linear_bias=b, **kw),
                     lambda x, w, b, t, **kw: TF.linear_cross_entropy(x, w, t, linear_bias=b, **kw),
                     [x, w, b], [target], kwargs, torch_kwargs=t_kwargs)


@pytest.mark.parametrize("with_target_grad", [False, True])
def test_binary_cross_entropy_gradient_at_saturated_inputs_matches_torch(with_target_grad):
    """Inputs of exactly 0 and 1 (a saturated sigmoid): torch's gradient is finite, (x - t)
    / max(x (1 - x), 1e-12), and 0 where the target equals the input; autodiff of the
    clamped logs gave NaN there."""
    x = np.asarray([0.0, 1.0, 0.0, 1.0, 0.5, 1e-30], np.float32)
    t = np.asarray([0.0, 1.0, 1.0, 0.0, 1.0, 1.0], np.float32)
    w = np.arange(1, 7, dtype=np.float32)
    tx = torch.tensor(x, requires_grad=True)
    tt = torch.tensor(t, requires_grad=with_target_grad)
    torch.nn.functional.binary_cross_entropy(tx, tt, weight=torch.tensor(w)).backward()
    argnums = (0, 1) if with_target_grad else (0,)
    grads = jax.grad(lambda a, b: F.binary_cross_entropy(a, b, weight=jnp.asarray(w)),
                     argnums)(jnp.asarray(x), jnp.asarray(t))
    np.testing.assert_allclose(np.asarray(grads[0]), tx.grad.numpy(), rtol=1e-6)
    if with_target_grad:  # log(1 - x) - log(x): infinite at 0 and 1, as torch's
        np.testing.assert_allclose(np.asarray(grads[1]), tt.grad.numpy(), rtol=1e-6)
