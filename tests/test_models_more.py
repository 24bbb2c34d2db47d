"""ResNet-18/50, MobileNetV2, GPT, NCF and GNMT (jaxdl.models) against their PyTorch twins."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import check_forward, check_twin, rand

import jaxdl as dl
from jaxdl import models
from jaxdl.models import _gnmt, _resnet

# torchvision's published parameter counts (1000 classes).
TORCHVISION_PARAMS = {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenet_v2": 3_504_872}


@pytest.fixture(autouse=True, scope="module")
def _fast_compiles():
    """Each compiled step here runs once, so XLA's optimisation passes cost more than they save
    (ResNet-18's forward and backward compile in half the time without them)."""
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


def _count(module):
    return sum(int(np.prod(p.shape)) for _, p in module.named_parameters())


def _twin_pair(name, **kwargs):
    """(torch twin seeded 0, weightless jaxdl model): check_twin copies the twin's weights."""
    torch.manual_seed(0)
    twin = models.model_entry(name).torch_twin(**kwargs)
    model = dl.memory.abstract_model(models.get_model, name, **kwargs)
    assert list(model.state_dict()) == list(twin.state_dict())
    return twin, model


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_parameter_counts_match_torchvision(name):
    model = dl.memory.abstract_model(models.get_model, name)
    twin = models.model_entry(name).torch_twin()
    assert _count(model) == _count(twin) == TORCHVISION_PARAMS[name]
    assert list(model.state_dict()) == list(twin.state_dict())


def test_resnet_state_dict_names_are_torchvisions():
    r18 = dl.memory.abstract_model(models.resnet18).state_dict()
    r50 = dl.memory.abstract_model(models.resnet50).state_dict()
    assert {"conv1.weight", "bn1.running_var", "layer1.1.conv2.weight", "layer2.0.downsample.0.weight",
            "layer4.1.bn2.num_batches_tracked", "fc.weight", "fc.bias"} <= set(r18)
    assert "layer1.0.downsample.0.weight" not in r18  # 64 -> 64 channels at stride 1: no shortcut conv
    assert {"layer1.0.downsample.1.running_mean", "layer3.5.conv3.weight",
            "layer4.2.bn3.bias"} <= set(r50)
    assert r50["layer4.0.conv2.weight"].shape == (512, 512, 3, 3)
    assert r50["fc.weight"].shape == (1000, 2048)


def test_resnet18_matches_torch_twin(rng):
    """Train mode (batch statistics, running updates, gradients of every parameter), then eval.

    64x64 keeps 2x2 maps in layer4: at 1x1 with batch 2, train-mode BatchNorm amplifies float32
    rounding past 1e-4 (torch in float32 itself is that far from float64 there)."""
    twin, model = _twin_pair("resnet18", num_classes=5, width=0.25)
    x = rand(rng, 2, 3, 64, 64)
    check_twin(twin, model, [x], modes=("train",), jit=True, fwd_tol=1e-4, grad_tol=1e-3)
    assert check_forward(twin, model, [x], tol=1e-4)[0].shape == (2, 5)


def test_resnet50_matches_torch_twin(rng):
    """The full-depth network forward in eval mode; gradients through every Bottleneck variant
    (channel-changing shortcut at stride 1 and 2, identity shortcut) on a 1-2-1-1 block stack."""
    twin, model = _twin_pair("resnet50", num_classes=5, width=0.125)
    assert check_forward(twin, model, [rand(rng, 2, 3, 64, 64)], tol=1e-4)[0].shape == (2, 5)
    torch.manual_seed(0)
    twin = _resnet.TORCH().ResNet("bottleneck", (1, 2, 1, 1), num_classes=5, width=0.125)
    model = dl.memory.abstract_model(_resnet.JAXDL.ResNet, "bottleneck", (1, 2, 1, 1), num_classes=5,
                                     width=0.125)
    check_twin(twin, model, [rand(rng, 2, 3, 64, 64)], modes=("train",), jit=True, fwd_tol=1e-4,
               grad_tol=1e-3)


def test_mobilenet_v2_state_dict_names_are_torchvisions():
    sd = dl.memory.abstract_model(models.mobilenet_v2).state_dict()
    assert {"features.0.0.weight", "features.0.1.running_mean", "features.1.conv.0.0.weight",
            "features.1.conv.1.weight", "features.1.conv.2.bias", "features.2.conv.0.0.weight",
            "features.2.conv.1.0.weight", "features.2.conv.2.weight", "features.17.conv.3.bias",
            "features.18.0.weight", "features.18.1.num_batches_tracked", "classifier.1.weight"} <= set(sd)
    assert sd["features.2.conv.1.0.weight"].shape == (96, 1, 3, 3)  # depthwise over 16 * 6 channels
    assert sd["features.18.0.weight"].shape == (1280, 320, 1, 1)


def test_mobilenet_v2_matches_torch_twin(rng):
    """Train-mode forward (batch statistics, running updates), eval mode with gradients: depthwise
    convs, ReLU6, inverted residuals with and without the skip. (In train mode the projection
    BatchNorms' bias gradients are zero up to rounding: the next block's BatchNorm removes them.)"""
    twin, model = _twin_pair("mobilenet_v2", num_classes=5, width_mult=0.25, dropout=0.0)
    x = rand(rng, 2, 3, 64, 64)
    check_forward(twin, model, [x], mode="train", tol=1e-4)
    out = check_twin(twin, model, [x], modes=("eval",), jit=True, fwd_tol=1e-4, grad_tol=1e-3)
    assert out[0].shape == (2, 5)


@pytest.mark.parametrize("tie_weights", [True, False])
def test_gpt_matches_torch_twin(tie_weights, rng):
    """Forward logits and gradients of every parameter (dropout 0: train equals eval)."""
    config = dict(vocab_size=50, context=16, d_model=32, num_layers=2, num_heads=4, dropout=0.0,
                  tie_weights=tie_weights)
    twin, model = _twin_pair("gpt", **config)
    tokens = rng.integers(0, 50, (2, 12))
    out = check_twin(twin, model, [tokens], modes=("train",), jit=True, fwd_tol=1e-5, grad_tol=1e-4)
    assert out[0].shape == (2, 12, 50)


def test_gpt_is_causal_and_bounded_by_its_context():
    model = models.gpt(vocab_size=20, context=8, d_model=16, num_layers=1, num_heads=2).eval()
    tokens = jnp.arange(8)[None] % 20
    changed = tokens.at[0, 5].set(7)
    run = dl.jit(lambda m, t: m(t))  # one compile for both calls (eager runs op by op)
    a, b = run(model, tokens), run(model, changed)
    np.testing.assert_array_equal(np.asarray(a[0, :5]), np.asarray(b[0, :5]))  # the past ignores t=5
    assert not np.allclose(np.asarray(a[0, 5:]), np.asarray(b[0, 5:]))
    with pytest.raises(ValueError, match="exceeds the context 8"):
        model(jnp.zeros((1, 9), jnp.int32))


def test_gpt_default_config_size_and_full_context(rng):
    """The documented size; eval mode over the whole context (torch under no_grad: its
    inference path for TransformerEncoderLayer)."""
    assert _count(dl.memory.abstract_model(models.gpt, tie_weights=False)) == 842_496 + 256 * 128
    twin, model = _twin_pair("gpt")
    assert _count(model) == _count(twin) == 842_496  # documented in _gpt.py
    check_forward(twin, model, [rng.integers(0, 256, (2, 128))], tol=1e-4)


@pytest.mark.parametrize("dropout,mode", [(0.0, "train"), (0.5, "eval")])
def test_ncf_matches_torch_twin(dropout, mode, rng):
    """One logit per (user, item) pair; gradients reach both towers' embeddings and layers."""
    twin, model = _twin_pair("ncf", num_users=30, num_items=40, mf_dim=4, mlp_layers=(16, 8, 4),
                             dropout=dropout)
    users, items = rng.integers(0, 30, 12), rng.integers(0, 40, 12)
    out = check_twin(twin, model, [users, items], modes=(mode,), jit=True)
    assert out[0].shape == (12,)


def test_ncf_default_size_is_the_papers_movielens_setting():
    users, items, mf, mlp = 6040, 3706, 8, (64, 32, 16, 8)
    expected = ((users + items) * (mf + mlp[0] // 2) + sum(a * b + b for a, b in zip(mlp, mlp[1:]))
                + mf + mlp[-1] + 1)
    assert expected == 392_601
    twin = models.model_entry("ncf").torch_twin()
    assert _count(dl.memory.abstract_model(models.ncf)) == _count(twin) == expected


@pytest.mark.parametrize("dropout,mode", [(0.0, "train"), (0.3, "eval")])
def test_gnmt_matches_torch_twin(dropout, mode, rng):
    """3 layers a side: the bidirectional layer, the merging layer and one residual layer in the
    encoder, the attention LSTM and two decoder layers (the second residual); padded sources."""
    twin, model = _twin_pair("gnmt", src_vocab=30, tgt_vocab=25, hidden=16, num_layers=3,
                             dropout=dropout)
    src, tgt = rng.integers(1, 30, (2, 7)), rng.integers(0, 25, (2, 5))
    padding = np.zeros((2, 7), bool)
    padding[1, 5:] = True
    src[padding] = 0
    out = check_twin(twin, model, [src, tgt, padding], modes=(mode,), jit=True)
    assert out[0].shape == (2, 5, 25)


def test_gnmt_attention_ignores_padded_keys(rng):
    attention = _gnmt.JAXDL.AdditiveAttention(8)
    query, keys = jnp.asarray(rand(rng, 2, 3, 8)), jnp.asarray(rand(rng, 2, 6, 8))
    padding = jnp.zeros((2, 6), bool).at[:, 4:].set(True)
    out = attention(query, keys, padding)
    np.testing.assert_allclose(out, attention(query, keys.at[:, 4:].set(9.0), padding), atol=1e-6)
    assert not np.allclose(out, attention(query, keys.at[:, 4:].set(9.0)))


def test_gnmt_default_size_and_layer_count():
    # encoder: embedding, bidirectional LSTM, LSTM(2H, H), 2 x LSTM(H, H); decoder: embedding,
    # attention LSTM, attention (W_q with bias, W_k, v), 3 x LSTM(2H, H), classifier.
    h, v = 128, 256

    def lstm(i):
        return 4 * h * (i + h) + 8 * h

    encoder = v * h + 2 * lstm(h) + lstm(2 * h) + 2 * lstm(h)
    decoder = v * h + lstm(h) + (h * h + h + h * h + h) + 3 * lstm(2 * h) + h * v + v
    assert encoder + decoder == 1_582_592  # documented in _gnmt.py
    twin = models.model_entry("gnmt").torch_twin()
    assert _count(dl.memory.abstract_model(models.gnmt)) == _count(twin) == 1_582_592
    with pytest.raises(ValueError, match="num_layers >= 2"):
        models.gnmt(num_layers=1)
