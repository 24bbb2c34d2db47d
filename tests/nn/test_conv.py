"""Convolutions and F.pad against PyTorch: forward, gradients, init, errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import assert_close, check_twin, pair, rand

import jaxdl.nn.functional as F
from jaxdl import nn
from jaxdl.nn import _conv as conv_module

CONV2D = [  # (in, out, kernel, options), odd sizes and strides that do not divide
    (3, 4, 3, {}),
    (3, 5, (2, 3), {"stride": (2, 3), "padding": (1, 0)}),
    (4, 6, 3, {"groups": 2, "dilation": 2, "padding": 2, "bias": False}),
    (2, 3, 3, {"padding": "same", "dilation": (1, 2)}),
    (2, 3, 4, {"padding": "same"}),
    (2, 3, 3, {"padding": "valid", "stride": 2}),
    (3, 3, 3, {"groups": 3, "padding": 1}),
    (2, 4, 3, {"padding": 1, "padding_mode": "reflect"}),
    (2, 4, 3, {"padding": (2, 1), "padding_mode": "replicate", "stride": 2}),
    (2, 4, 3, {"padding": 1, "padding_mode": "circular"}),
    (2, 4, 4, {"padding": "same", "padding_mode": "reflect"}),
    (8, 4, 3, {"stride": 2, "padding": 1}),
]


@pytest.fixture
def xla_transposed_convolutions(monkeypatch):
    """Transposed convolutions as XLA convolutions of a dilated input, the formulation used
    off CPU (on CPU they are matrix products, `_conv_cpu`)."""
    monkeypatch.setattr(conv_module, "_on_cpu", lambda groups: False)


@pytest.mark.parametrize("cin,cout,k,opts", CONV2D)
def test_conv2d_matches_torch(cin, cout, k, opts, rng):
    t, j = pair("Conv2d", cin, cout, k, **opts)
    check_twin(t, j, [rand(rng, 2, cin, 7, 9)], modes=("train",))


@pytest.mark.parametrize("opts", [{}, {"stride": 3, "padding": 2, "dilation": 2},
                                  {"groups": 2, "padding": "same"},
                                  {"padding": 1, "padding_mode": "circular"}])
def test_conv1d_matches_torch(opts, rng):
    t, j = pair("Conv1d", 4, 6, 3, **opts)
    check_twin(t, j, [rand(rng, 3, 4, 11)], modes=("train",))


def test_conv3d_and_unbatched_and_batch_one(rng):
    t, j = pair("Conv3d", 2, 3, (2, 3, 3), stride=(1, 2, 2), padding=1)
    check_twin(t, j, [rand(rng, 1, 2, 4, 5, 6)], modes=("train",))
    t, j = pair("Conv2d", 2, 3, 3)
    check_twin(t, j, [rand(rng, 2, 5, 5)], modes=("train",))  # unbatched (C, H, W)


@pytest.mark.parametrize("opts", [
    {},
    {"stride": 2, "padding": 1, "output_padding": 1},
    {"stride": 3, "groups": 2, "dilation": 2, "output_padding": 1},
    {"stride": (2, 1), "padding": (0, 1), "bias": False},
])
def test_conv_transpose2d_matches_torch(opts, rng):
    t, j = pair("ConvTranspose2d", 4, 6, 3, **opts)
    check_twin(t, j, [rand(rng, 2, 4, 5, 6)], modes=("train",))


def test_conv_transpose2d_dilated_with_output_padding(rng):
    t, j = pair("ConvTranspose2d", 3, 5, (3, 2), stride=2, padding=2, dilation=2, output_padding=1)
    check_twin(t, j, [rand(rng, 2, 3, 4, 5)], modes=("train",))


def test_conv_transpose3d_matches_torch(rng):
    t, j = pair("ConvTranspose3d", 2, 3, (2, 3, 2), stride=(1, 2, 2), padding=(0, 1, 1),
                output_padding=(0, 1, 0))
    check_twin(t, j, [rand(rng, 1, 2, 3, 4, 3)], modes=("train",))


@pytest.mark.parametrize("args,opts", [
    ((4, 6, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((3, 5, (3, 2)), {"stride": 2, "padding": 2, "dilation": 2, "output_padding": 1}),
])
def test_xla_transposed_formulation_matches_torch(args, opts, rng, xla_transposed_convolutions):
    t, j = pair("ConvTranspose2d", *args, **opts)
    check_twin(t, j, [rand(rng, 2, args[0], 4, 5)], modes=("train",))


def test_conv_transpose1d_matches_torch(rng):
    t, j = pair("ConvTranspose1d", 2, 4, 4, stride=3, padding=1, output_padding=2, groups=2)
    check_twin(t, j, [rand(rng, 2, 2, 7)], modes=("train",))


def test_conv_jit_matches_torch(rng):
    t, j = pair("Conv2d", 3, 4, 3, stride=2, padding=1)
    check_twin(t, j, [rand(rng, 2, 3, 8, 8)], modes=("train",), jit=True)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_matches_torch(mode, rng):
    x = rand(rng, 2, 3, 5, 6)
    pads = (1, 2, 2, 0)
    expected = torch.nn.functional.pad(torch.tensor(x), pads, mode=mode)
    assert_close(F.pad(x, pads, mode=mode), expected, mode)
    # negative padding crops (then the other side is padded from what is left)
    kwargs = {"value": 3.0} if mode == "constant" else {"mode": mode}
    expected = torch.nn.functional.pad(torch.tensor(x), (-1, 2, 1, -2), **kwargs)
    assert_close(F.pad(x, (-1, 2, 1, -2), **kwargs), expected, f"{mode} crop")


@pytest.mark.parametrize("name,args", [("Conv2d", (6, 8, 3)), ("Conv1d", (4, 6, 5)),
                                       ("ConvTranspose2d", (6, 4, 3))])
def test_default_init_follows_torch_formula(name, args):
    module = getattr(nn, name)(*args, groups=2)
    w, b = np.asarray(module.weight), np.asarray(module.bias)
    fan_in = w.shape[1] * math.prod(w.shape[2:])
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound
    torch_w = getattr(torch.nn, name)(*args, groups=2).weight
    assert tuple(torch_w.shape) == w.shape


def test_bad_input_names_module_and_shapes(rng):
    model = nn.Sequential(nn.Conv2d(3, 4, 3))
    with pytest.raises(nn.ShapeError, match=r"0 \(Conv2d\).*size 3 on axis 1.*\(2, 5, 8, 8\)"):
        model(rand(rng, 2, 5, 8, 8))
    with pytest.raises(nn.ShapeError, match="rank 3-d or 4-d"):
        model(rand(rng, 8, 8))
    with pytest.raises(nn.ShapeError, match="floating"):
        model(np.zeros((1, 3, 8, 8), np.int32))
    with pytest.raises(ValueError, match="same"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(NotImplementedError, match="mode='bogus'"):
        F.pad(rand(rng, 2, 3), (1, 1), mode="bogus")
    with pytest.raises(ValueError, match="reflect padding .* smaller than the padded axis"):
        F.pad(rand(rng, 2, 3), (3, 0), mode="reflect")
    # a kernel larger than the padded input: torch refuses it, and so do the layer and F
    with pytest.raises(nn.ShapeError, match=r"0 \(Conv2d\): input of shape \(2, 3, 2, 2\).*"
                                            r"padded input is \(2, 2\).*kernel.*\(3, 3\)"):
        model(rand(rng, 2, 3, 2, 2))
    with pytest.raises(ValueError, match=r"F.conv1d: the padded input is \(6,\).*\(7,\)"):
        F.conv1d(rand(rng, 1, 2, 4), rand(rng, 3, 2, 4), padding=1, dilation=2)
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input"):
        torch.nn.functional.conv1d(torch.zeros(1, 2, 4), torch.zeros(3, 2, 4), padding=1,
                                   dilation=2)
    # a one-element padding tuple is repeated over the spatial axes, as torch does
    x, w = rand(rng, 1, 2, 5, 5), rand(rng, 3, 2, 3, 3)
    expected = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=(1,))
    assert_close(F.conv2d(x, w, padding=(1,)), expected, "padding=(1,)")


@pytest.mark.parametrize("pad", [0, 2])
def test_conv_tbc(pad, rng):
    x, w, b = rand(rng, 9, 2, 3), rand(rng, 3, 3, 4), rand(rng, 4)
    check_functional(F.conv_tbc, TF.conv_tbc, [x, w, b], [pad])


@pytest.mark.parametrize("transposed", [False, True])
def test_bfloat16_bias_gradient_accumulates_in_float32(transposed, rng):
    """The bias gradient sums the cotangent over batch and space: summed in bfloat16 it was 10%
    off; torch's kernels (and now ours) sum in float32. Oracle: torch in float64 on the same
    bfloat16-representable inputs."""
    x, w, b = rand(rng, 2, 4, 24, 24), rand(rng, 4, 4, 3, 3), rand(rng, 4)
    x, w, b = (np.asarray(jnp.asarray(a, jnp.bfloat16), np.float32) for a in (x, w, b))
    ours_fn, torch_fn = (F.conv_transpose2d, TF.conv_transpose2d) if transposed else (F.conv2d, TF.conv2d)
    cotangent = np.asarray(jnp.asarray(rand(rng, *torch_fn(torch.tensor(x), torch.tensor(w)).shape),
                                       jnp.bfloat16), np.float32)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    torch_fn(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), tb).backward(
        torch.tensor(cotangent, dtype=torch.float64))
    bf16 = [jnp.asarray(a, jnp.bfloat16) for a in (x, w, b)]
    _, pullback = jax.vjp(lambda bias: ours_fn(bf16[0], bf16[1], bias), bf16[2])
    grad = np.asarray(pullback(jnp.asarray(cotangent, jnp.bfloat16))[0], np.float32)
    np.testing.assert_allclose(grad, tb.grad.numpy(), rtol=1e-2)
