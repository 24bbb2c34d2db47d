"""from_torch's torch.fx fallback: forwards torch.export refuses, traced and replayed.

torch.export refuses outputs whose container type its pytree does not know (a
`@dataclass` a researcher returns, any plain class); torch.fx symbolic tracing
records them. Torch is the oracle: outputs, every gradient in train and eval
mode, BatchNorm statistics and 20 SGD steps in step.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from interop_oracle import check_against_torch, train_in_step
from torch import nn
from torch_twin import assert_close, rand

import jaxdl as dl


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    embedding: torch.Tensor


class AttentionPoolNet(nn.Module):
    """A residual conv stem, attention pooling over pixels, and a dataclass output."""

    def __init__(self, width=8, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.act = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(width, width, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)  # a stock layer jaxdl lacks: traced through
        self.query = nn.Parameter(torch.randn(width // 4))
        self.norm = nn.LayerNorm(width)
        self.drop = nn.Dropout(0.0)
        self.head = nn.Linear(width // 4 + width, classes)

    def forward(self, x):
        x = self.act(self.bn(self.stem(x)))
        out = self.conv(x)
        out += x
        b, c = out.shape[:2]
        fine = self.shuffle(out)
        tokens = fine.flatten(2).transpose(1, 2)
        weights = torch.softmax(tokens @ self.query / (c // 4) ** 0.5, dim=-1)
        pooled = (tokens * weights.unsqueeze(-1)).sum(1)
        mean = out.mean(dim=(2, 3))
        embedding = self.norm(mean)
        features = torch.cat([F.gelu(pooled), embedding], dim=1).view(b, -1)
        features = F.dropout(features, 0.0, self.training)
        logits = self.head(self.drop(features))
        if not self.training:
            logits = logits - logits.max(dim=-1, keepdim=True).values
        return Output(logits, F.normalize(embedding, dim=-1))


def _images(rng):
    return (rand(rng, 4, 3, 8, 8),)


def _convert(rng):
    torch.manual_seed(0)
    torch_model = AttentionPoolNet()
    inputs = _images(rng)
    with pytest.raises(Exception, match="not a known type"):  # why this model needs fx
        torch.export.export(torch_model, (torch.as_tensor(inputs[0]),), strict=False)
    return torch_model, dl.interop.from_torch(torch_model, (torch.as_tensor(inputs[0]),)), inputs


def test_fx_fallback_converts_matches_and_trains_in_step(rng, tmp_path):
    torch_model, model, inputs = _convert(rng)
    assert list(model.state_dict()) == list(torch_model.state_dict())
    assert type(model.conv) is dl.nn.Conv2d and type(model.bn) is dl.nn.BatchNorm2d
    assert not [n for n in vars(torch_model) if n.startswith("_tensor_constant")]
    out = model(jnp.asarray(inputs[0]))
    assert type(out) is Output  # the dataclass, holding jax arrays
    check_against_torch(torch_model, model, inputs, rng)
    train_in_step(torch_model, model, inputs, _images, rng)
    dl.save({"model": model}, tmp_path / "ckpt")  # saves and loads like any jaxdl module
    trained = {k: np.asarray(v) for k, v in model.state_dict().items()}
    model.load_state_dict({k: np.zeros_like(v) for k, v in trained.items()})
    dl.load(tmp_path / "ckpt", target={"model": model})
    for name, value in trained.items():
        np.testing.assert_array_equal(np.asarray(model.state_dict()[name]), value)


def test_fx_fallback_compare_reports_stock_layers(rng):
    torch_model, model, inputs = _convert(rng)
    torch_model.eval()
    model.eval()
    report = dl.interop.compare(torch_model, model, inputs,
                                loss_fn=lambda o: (o.logits ** 2).sum())
    assert report.ok, str(report)
    assert {"stem", "bn", "act", "conv", "norm", "head"} <= {row.path for row in report.rows}


def test_fx_fallback_shapes_and_buffer_updates(rng):
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            y = self.lin(x)
            return {"y": y, "half": y[:, : y.size(1) // 2]}, slice(0, 1)  # export refuses slice

    t = Counting()
    x = rand(rng, 5, 4)
    model = dl.interop.from_torch(t, (torch.as_tensor(x),))
    assert float(t.calls) == 0  # tracing did not touch the torch module's buffer
    for batch in (5, 7):  # axis 0 is dynamic, as for an exported graph
        x = rand(rng, batch, 4)
        with torch.no_grad():
            (expected, _) = t(torch.as_tensor(x))
        (out, where) = model(jnp.asarray(x))
        assert where == slice(0, 1)
        for key in ("y", "half"):
            assert_close(out[key], expected[key], key)
    assert float(model.calls) == float(t.calls) == 2.0
    with pytest.raises(ValueError, match=r"input 'x' has shape \(5, 5\)"):
        model(jnp.ones((5, 5)))
    fixed = dl.interop.from_torch(t, (torch.as_tensor(x),), dynamic_shapes=None)
    with pytest.raises(ValueError, match=r"captured for shape \(7, 4\)"):
        fixed(jnp.ones((5, 4)))


class _Methods(nn.Module):
    """Tensor methods and torch functions in their Python spellings (varargs sizes, overloads
    picked by arguments, (values, indices) results) and an argument left at its default."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None, scale=2.0):
        y = self.lin(x) * scale
        if mask is not None:  # fx traces this with the default (None), as export would
            y = y * mask
        q = y.view(2, 1, 2, 2).transpose(1, 2)
        attended = F.scaled_dot_product_attention(q, q, q).flatten(1)
        z = torch.zeros(2, 4, dtype=torch.long).float() + y.new_ones(2, 4)
        values, indices = y.max(-1)
        first, _ = torch.split(y, 2, 1)
        out = attended + z + values.unsqueeze(1) * indices.float().unsqueeze(1)
        return Output(out + first.repeat(1, 2) + x.sum() - y.mean(1, keepdim=True), y.max())


def test_fx_fallback_methods_and_default_arguments(rng):
    torch.manual_seed(0)
    t = _Methods()
    x = rand(rng, 2, 4)
    model = dl.interop.from_torch(t, (torch.as_tensor(x),))
    expected = t(torch.as_tensor(x))
    out = model(jnp.asarray(x))
    assert_close(out.logits, expected.logits, "output")
    assert_close(out.embedding, expected.embedding, "y.max()")
    expected.logits.sum().backward()
    grads = dl.grad(lambda m: jnp.sum(m(jnp.asarray(x)).logits))(model)
    assert_close(grads["lin.weight"], t.lin.weight.grad, "grad of lin.weight", 1e-4)


class _UnknownFunction(nn.Module):
    def forward(self, x):
        return Output(torch.special.bessel_j0(x), x)  # a function the table lacks


class _UnknownMethod(nn.Module):
    def forward(self, x):
        return Output(x.cummax(1).values, x)


class _InPlaceInput(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return Output(x, x)


class _DataDependentShape(nn.Module):
    def forward(self, x):
        return Output(x[x > 0].sum() * x, x)


class _TypeCheck(nn.Module):
    def forward(self, x):
        if isinstance(x, torch.Tensor):  # False for fx's proxy: the trace takes the other way
            return Output(x * 2, x)
        return Output(x * 3, x)


class _DataDependentBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # neither export nor fx can capture this with a dataclass output
            return Output(x * 2, x)
        return Output(x, x)


def test_fx_fallback_refuses_at_conversion_naming_the_line():
    x = (torch.randn(4, 3),)
    with pytest.raises(NotImplementedError, match=(
            r"special_bessel_j0 \(File .*test_from_torch_fx\.py\", line \d+, in forward: "
            r"return Output\(torch\.special\.bessel_j0\(x\), x\).*(?s:.*)torch\.export could "
            r"not capture this forward: RuntimeError: Found <class")):
        dl.interop.from_torch(_UnknownFunction(), x)
    with pytest.raises(NotImplementedError, match=r"Tensor\.cummax \(File .*line \d+"):
        dl.interop.from_torch(_UnknownMethod(), x)
    with pytest.raises(NotImplementedError, match=r"depends on the values.*x\[x > 0\]"):
        dl.interop.from_torch(_DataDependentShape(), x)
    with pytest.raises(NotImplementedError, match=r"fx graph of _TypeCheck.forward computes "
                       r"something other than forward"):
        dl.interop.from_torch(_TypeCheck(), x)
    with pytest.raises(NotImplementedError, match=r"Tensor\.mul_ .* updates x in place"):
        dl.interop.from_torch(_InPlaceInput(), x)
    with pytest.raises(NotImplementedError) as err:
        dl.interop.from_torch(_DataDependentBranch(), x)
    message = str(err.value)
    assert "neither torch.export nor torch.fx" in message
    assert "torch.export: GuardOnDataDependentSymNode" in message
    assert "torch.fx: TraceError: symbolically traced variables" in message
    assert "torch.where" in message
    np.testing.assert_equal(np.asarray(x[0]).shape, (4, 3))  # inputs untouched


class _Distill(nn.Module):
    """A frozen-in-forward teacher (torch.no_grad(): export records a sub-graph, so this
    converts through fx) and a detached feature: no gradient flows back through either."""

    def __init__(self):
        super().__init__()
        self.teacher = nn.Linear(4, 4)
        self.student = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        with torch.no_grad():
            target = self.teacher(x).softmax(-1)
        h = self.student(x)
        return self.head(h.detach()) + (h * target).sum(-1, keepdim=True)


class _DistillDetached(_Distill):
    """The same with .detach() only: torch.export captures it (the exported path)."""

    def forward(self, x):
        target = self.teacher(x).softmax(-1).detach()
        h = self.student(x)
        return self.head(h.detach()) + (h * target).sum(-1, keepdim=True)


@pytest.mark.parametrize("cls", [_Distill, _DistillDetached])
def test_no_grad_and_detach_stop_gradients_as_in_torch(cls, rng):
    torch.manual_seed(0)
    t = cls()
    x = rand(rng, 3, 4)
    model = dl.interop.from_torch(t, (torch.as_tensor(x),))
    cotangent = rand(rng, 3, 2)
    (t(torch.as_tensor(x)) * torch.as_tensor(cotangent)).sum().backward()
    grads = dl.grad(lambda m: jnp.sum(m(jnp.asarray(x)) * cotangent))(model)
    for name, p in t.named_parameters():
        expected = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
        assert_close(grads[name], expected, f"grad of {name}")
    assert t.head.weight.grad is not None
    assert t.teacher.weight.grad is None or not t.teacher.weight.grad.any()
