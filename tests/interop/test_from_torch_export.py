"""from_torch on modules with their own forward (torch.export capture), torch as the oracle.

The models are written as a researcher would write them; each converts, matches
torch's outputs and every gradient in train and eval mode, and trains 20 SGD steps
in step with torch on the same batches.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from interop_oracle import check_against_torch, train_in_step
from torch import nn
from torch_twin import assert_close, rand

import jaxdl as dl


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, widths=(8, 16), num_classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(widths[0])
        blocks, cin = [], widths[0]
        for i, width in enumerate(widths):
            blocks.append(BasicBlock(cin, width, 1 if i == 0 else 2))
            cin = width
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.layers(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class InvertedResidual(nn.Module):
    """MobileNetV2/V3-style block: expand, depthwise, squeeze-excite, project, residual."""

    def __init__(self, cin=8, cout=8, expand=4, stride=1):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False),
                                    nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True))
        self.dw = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.bn = nn.BatchNorm2d(hidden)
        self.se_reduce = nn.Conv2d(hidden, hidden // 4, 1)
        self.se_expand = nn.Conv2d(hidden // 4, hidden, 1)
        self.project = nn.Conv2d(hidden, cout, 1, bias=False)
        self.bn_out = nn.BatchNorm2d(cout)

    def forward(self, x):
        y = self.expand(x)
        y = F.hardswish(self.bn(self.dw(y)))
        s = y.mean((2, 3), keepdim=True)
        y = y * torch.sigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        y = self.bn_out(self.project(y))
        return x + y if self.use_res else y


class ViTBlock(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image=16, patch=4, dim=32, depth=2, heads=4, classes=10, dropout=0.0):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.dropout = dropout
        self.blocks = nn.ModuleList([ViTBlock(dim, heads, dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, cin=3, base=4, classes=2):
        super().__init__()
        self.down1 = _double_conv(cin, base)
        self.down2 = _double_conv(base, 2 * base)
        self.bottom = _double_conv(2 * base, 4 * base)
        self.up2 = nn.ConvTranspose2d(4 * base, 2 * base, 2, stride=2)
        self.dec2 = _double_conv(4 * base, 2 * base)
        self.dec1 = _double_conv(3 * base, base)
        self.out = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = F.interpolate(u2, scale_factor=2, mode="bilinear", align_corners=False)
        return self.out(self.dec1(torch.cat([u1, d1], dim=1)))


class GPTBlock(nn.Module):
    def __init__(self, vocab=50, dim=32, heads=4, block=16, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_out = nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, idx):
        b, t = idx.shape
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        q, k, v = self.attn(self.ln1(x)).split(x.size(-1), dim=2)
        hd = x.size(-1) // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, -1)
        x = x + self.drop(self.proj(y))
        x = x + self.drop(self.fc_out(F.gelu(self.fc(self.ln2(x)))))
        return self.lm_head(self.ln_f(x))


class Seq2Seq(nn.Module):
    """LSTM encoder, LSTMCell decoder unrolled by a Python loop (teacher forcing)."""

    def __init__(self, vocab=20, emb=8, hidden=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.encoder = nn.LSTM(emb, hidden, batch_first=True)
        self.decoder = nn.LSTMCell(emb, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, tgt):
        _, (h, c) = self.encoder(self.embed(src))
        h, c = h[0], c[0]
        logits = []
        for t in range(tgt.size(1)):
            h, c = self.decoder(self.embed(tgt[:, t]), (h, c))
            logits.append(self.out(h))
        return torch.stack(logits, 1)


def _images(rng, batch=2, channels=3, size=16):
    return (rand(rng, batch, channels, size, size),)


def _tokens(rng, vocab, *shape):
    return rng.integers(0, vocab, shape).astype(np.int64)


CASES = {
    "cifar_resnet": (CifarResNet, _images),
    "mobilenet_block": (InvertedResidual, lambda rng: _images(rng, channels=8, size=8)),
    "vit": (ViT, _images),
    "unet": (UNet, _images),
    "gpt_block": (GPTBlock, lambda rng: (_tokens(rng, 50, 2, 8),)),
    "seq2seq": (Seq2Seq, lambda rng: (_tokens(rng, 20, 2, 6), _tokens(rng, 20, 2, 4))),
}


def _convert(name, rng):
    cls, make_inputs = CASES[name]
    torch.manual_seed(0)
    torch_model = cls()
    inputs = make_inputs(rng)
    model = dl.interop.from_torch(torch_model, tuple(torch.as_tensor(x) for x in inputs))
    return torch_model, model, inputs


@pytest.mark.parametrize("name", sorted(CASES))
def test_researcher_model_converts_matches_and_trains_in_step(name, rng):
    torch_model, model, inputs = _convert(name, rng)
    assert list(model.state_dict()) == list(torch_model.state_dict())
    check_against_torch(torch_model, model, inputs, rng)
    train_in_step(torch_model, model, inputs, CASES[name][1], rng)


class _Counting(nn.Module):
    """Own parameter and buffer, a buffer updated in place, F.dropout following the mode."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.scale = nn.Parameter(torch.full((3,), 2.0))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return F.dropout(self.lin(x) * self.scale, 0.5, self.training)


def test_state_names_modes_buffer_updates_and_dynamic_batch(rng):
    torch.manual_seed(0)
    t = _Counting().eval()
    x = rand(rng, 5, 4)
    model = dl.interop.from_torch(t, (torch.as_tensor(x),))
    assert list(model.state_dict()) == ["scale", "calls", "lin.weight", "lin.bias"]
    assert type(model.lin) is dl.nn.Linear and not model.training
    with torch.no_grad():
        expected = t(torch.as_tensor(x))
    assert_close(model(jnp.asarray(x)), expected, "eval output")
    assert float(model.calls) == float(t.calls) == 1.0  # the in-place update persists
    bigger = rand(rng, 7, 4)  # batch 5 at conversion: axis 0 is dynamic by default
    with torch.no_grad():
        assert_close(model(jnp.asarray(bigger)), t(torch.as_tensor(bigger)), "batch of 7")
    with pytest.raises(ValueError, match=r"input 'x' has shape \(5, 5\).*captured for shape"):
        model(jnp.ones((5, 5)))
    model.train()  # the training-mode graph: F.dropout now drops about half, scaled by 2
    out = np.asarray(dl.jit(lambda m, x: m(x))(model, jnp.ones((64, 4))))
    kept = out != 0
    assert 0.3 < kept.mean() < 0.7
    with torch.no_grad():
        full = (t.lin(torch.ones(64, 4)) * t.scale).numpy() * 2
    np.testing.assert_allclose(out[kept], full[kept], rtol=1e-5, atol=1e-6)


def test_compare_reports_stock_layers_inside_a_custom_module(rng):
    torch_model, model, inputs = _convert("cifar_resnet", rng)
    torch_model.eval()
    model.eval()
    report = dl.interop.compare(torch_model, model, inputs, loss_fn=lambda o: (o ** 2).sum())
    paths = [row.path for row in report.rows]
    assert report.ok, str(report)
    assert {"stem", "bn", "layers.0.conv1", "layers.1.shortcut.0", "fc", "<root>"} <= set(paths)
    assert "layers.1.conv2.weight" in paths  # gradient rows


def test_tied_parameters_stay_one_array(rng):
    torch.manual_seed(0)
    t = GPTBlock()
    t.lm_head.weight = t.tok.weight  # weight tying, as GPT-2 does
    idx = _tokens(rng, 50, 2, 8)
    model = dl.interop.from_torch(t, (torch.as_tensor(idx),))
    assert list(model.state_dict()) == list(t.state_dict())  # both keys, as torch
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in t.named_parameters()]
    check_against_torch(t, model, (idx,), rng)  # the shared gradient sums both uses


def test_converted_model_saves_loads_and_follows_autocast(tmp_path, rng):
    torch_model, model, (idx,) = _convert("gpt_block", rng)
    model.eval()
    full = model(jnp.asarray(idx))
    with dl.amp.autocast(dtype=jnp.bfloat16):  # matrix products in bfloat16, as torch's
        half = model(jnp.asarray(idx))
    assert full.dtype == jnp.float32 and half.dtype == jnp.bfloat16
    assert_close(half.astype(jnp.float32), full, "bfloat16 logits", 5e-2)
    dl.save({"model": model}, tmp_path / "ckpt")
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    model.load_state_dict({k: np.zeros_like(v) for k, v in before.items()})
    dl.load(tmp_path / "ckpt", target={"model": model})
    for name, value in before.items():
        np.testing.assert_array_equal(np.asarray(model.state_dict()[name]), value)


class _Bessel(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x) + 1  # an operator jaxdl's table lacks


class _DataDependentShape(nn.Module):
    def forward(self, x):
        return x[x > 0].sum()


class _DataDependentBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


class _FunctionalBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(3))
        self.register_buffer("var", torch.ones(3))

    def forward(self, x):
        return F.batch_norm(x, self.mean, self.var, training=self.training)


def test_what_cannot_convert_is_refused_at_conversion():
    x = (torch.randn(4, 3),)
    with pytest.raises(NotImplementedError, match=r"bessel_j0.*test_from_torch_export\.py\", "
                       r"line \d+, in forward: return torch\.special\.bessel_j0\(x\) \+ 1"):
        dl.interop.from_torch(_Bessel(), x)
    with pytest.raises(NotImplementedError, match=r"depends on the values.*x\[x > 0\]"):
        dl.interop.from_torch(_DataDependentShape(), x)
    with pytest.raises(NotImplementedError, match="neither torch.export nor torch.fx"):
        dl.interop.from_torch(_DataDependentBranch(), x)
    with pytest.raises(NotImplementedError, match="F.batch_norm in training mode"):
        dl.interop.from_torch(_FunctionalBatchNorm(), x)
    with pytest.raises(NotImplementedError, match="pass example_inputs"):
        dl.interop.from_torch(_Bessel())


class _Kinks(nn.Module):
    """Ops on values that land on their kinks: clamp, clamp_min, clamp_max, hardtanh and elu
    at their bounds, elu of inputs whose exp overflows, abs at 0, max/min over a tie."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(6))
        self.low = nn.Parameter(torch.full((6,), 0.5))

    def forward(self, x):
        y = x * self.scale
        tied = torch.stack([y, self.low])  # y[2] == low[2] == 0.5
        return torch.cat([
            y.clamp(0, 1), y.clamp_min(0), y.clamp_max(1), F.hardtanh(y, 0, 1),
            torch.clamp(y, min=self.low), F.elu(y), F.elu(100 * y) / 100, (y - 0.5).abs(),
            tied.max(dim=0).values, tied.min(dim=0).values])


def test_ops_take_torchs_gradient_at_their_kinks(rng):
    """torch.clamp passes the gradient at a bound, hardtanh does not, elu's negative side
    takes it at 0, abs'(0) is 0, max.dim gives a tie's gradient to the first entry; autodiff
    of abs, clip, max or min differs at each. The scale's gradient sums x * cotangent where
    each passes; elu(200) must not make it NaN."""
    torch_model = _Kinks()
    x = np.asarray([-1.0, 0.0, 0.5, 1.0, 2.0, 0.25], np.float32)
    model = dl.interop.from_torch(torch_model, (torch.as_tensor(x),))
    check_against_torch(torch_model, model, (x,), rng)


ATEN_KINK_CASES = {
    "abs": ((), [0.0, 1.0, -2.0, 0.0]),
    "max.dim": ((1,), [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, 2.0]]),
    "min.dim": ((1,), [[1.0, 0.0, 0.0, 3.0], [2.0, 2.0, 5.0, 2.0]]),
    "linalg_vector_norm": ((2.0, [1]), [[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]]),
}


@pytest.mark.parametrize("key", ATEN_KINK_CASES)
def test_aten_entry_gradient_at_a_kink_matches_torch(key):
    """The ATen table's entry against the torch op itself, on ties and zeros: abs'(0) = 0,
    max.dim / min.dim give a tie's gradient to the index they return, a zero vector's norm
    has gradient 0 (not NaN)."""
    from jaxdl.interop._aten import ATEN

    args, values = ATEN_KINK_CASES[key]
    x = np.asarray(values, np.float32)
    packet, _, overload = key.partition(".")
    op = getattr(torch.ops.aten, packet)
    op = getattr(op, overload) if overload else op
    t = torch.tensor(x, requires_grad=True)
    t_out = op(t, *args)
    t_out = t_out[0] if isinstance(t_out, tuple) else t_out
    weights = torch.arange(1, t_out.numel() + 1, dtype=torch.float32).reshape(t_out.shape)
    (t_out * weights).sum().backward()

    def loss(v):
        out = ATEN[key](v, *args)
        out = out[0] if isinstance(out, tuple) else out
        return jnp.sum(out * jnp.asarray(weights.numpy()))

    np.testing.assert_allclose(np.asarray(jax.grad(loss)(jnp.asarray(x))), t.grad.numpy(),
                               rtol=1e-6, atol=1e-7)


class _Losses(nn.Module):
    """A forward that computes losses itself (an auxiliary loss inside the model): each is an
    ATen operator of its own in the export (smooth_l1 at its beta among them)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(6))
        self.weight = nn.Parameter(torch.tensor([0.25]))
        self.register_buffer("target", torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 0.0]))
        self.register_buffer("signs", torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0]))

    def forward(self, x):
        y = x * self.scale
        p = torch.sigmoid(y)
        target, signs = self.target, self.signs
        return torch.stack([
            F.smooth_l1_loss(y, target, beta=0.5), F.huber_loss(y, target, delta=0.5),
            F.binary_cross_entropy(p, target), F.soft_margin_loss(y, signs),
            F.kl_div(F.log_softmax(y, 0), F.softmax(target, 0), reduction="sum"),
            F.margin_ranking_loss(y, target, signs, margin=0.5),
            F.hinge_embedding_loss(y, signs, margin=1.0), F.prelu(y, self.weight).sum()])


def test_losses_inside_a_forward_convert_and_match_torch(rng):
    torch_model = _Losses()
    x = np.asarray([-1.0, 0.0, 0.5, 1.0, 2.0, 0.25], np.float32)
    model = dl.interop.from_torch(torch_model, (torch.as_tensor(x),))
    check_against_torch(torch_model, model, (x,), rng)
