"""The CPU convolution lowerings (jaxdl/nn/_conv_cpu.py) against XLA's convolution: values
and both gradients, each lowering forced, on odd geometries; the per-shape rule; the switch."""

import dataclasses
import functools
import itertools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxdl as dl
from jaxdl import nn
from jaxdl.nn import _conv_cpu, _winograd
from jaxdl.nn._conv_cpu import Plan

# (x shape channels-last, kernel, stride, padding pairs, dilation, groups, multiplier)
GEOMETRIES = [
    ((2, 9, 7, 6), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, 1),
    ((1, 9, 7, 6), (3, 2), (2, 3), ((0, 1), (2, 0)), (1, 1), 1, 1),    # strides, asymmetric pads
    ((2, 11, 10, 4), (3, 3), (1, 2), ((2, 2), (1, 1)), (2, 3), 1, 2),  # dilation
    ((1, 1, 1, 8), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, 3),    # batch 1, 1x1 map
    ((2, 2, 2, 16), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, 1),   # 2x2 map
    ((2, 8, 9, 6), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 6, 1),    # depthwise, stride 2
    ((1, 7, 6, 4), (5, 3), (1, 1), ((2, 2), (0, 3)), (2, 1), 4, 2),    # depthwise x2, dilated
    # depthwise x2, strides 2 and 3 with dilation 2: an input-gradient phase no tap reaches
    ((1, 9, 8, 4), (3, 3), (2, 3), ((1, 0), (2, 1)), (2, 1), 4, 2),
    ((2, 6, 6, 6), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 3, 1),    # grouped (2 per group)
    ((1, 4, 12, 3), (2, 9), (1, 1), ((0, 0), (1, 1)), (1, 1), 1, 1),  # a kernel axis over 8
    ((2, 13, 5), (4,), (3,), ((2, 1),), (2,), 1, 1),                   # 1-d
    ((2, 9, 5), (3,), (1,), ((1, 1),), (1,), 5, 1),                    # 1-d depthwise
    ((1, 5, 6, 4, 3), (3, 2, 3), (2, 1, 1), ((1, 1), (0, 1), (1, 1)), (1, 2, 1), 1, 1),  # 3-d
    ((2, 4, 5, 3, 4), (3, 3, 3), (1, 1, 2), ((1, 1), (1, 1), (1, 1)), (1, 1, 1), 4, 1),  # 3-d dw
    ((2, 9, 8, 3), (5, 5), (1, 1), ((2, 2), (1, 3)), (1, 1), 1, 1),    # 5x5, asymmetric pads
]
FIVE = GEOMETRIES[-1]


def _lowerings(plan, channels, channels_last=True, kernel=None):
    """The lowerings that apply to a geometry, in one layout."""
    groups = plan.groups
    if channels_last:
        return ["xla"] + ["patches"] * (groups == 1) + ["shifts"] * (groups == channels)
    unit = set(plan.stride) | set(plan.dilation) == {1}  # what "whole_map" takes
    winograd = groups == 1 and unit and tuple(kernel) in ((3, 3), (5, 5))  # 2-d, stride 1
    return (["image_matmul", "matmul"] * (groups == 1) + ["whole_map"] * (groups == 1 and unit)
            + ["shifts"] * (groups == channels) + ["winograd"] * winograd
            + ["winograd4"] * (winograd and tuple(kernel) == (3, 3)))


def _case(geometry, dtype=jnp.float32):
    shape, kernel, stride, padding, dilation, groups, mult = geometry
    rng = np.random.default_rng(sum(shape) + len(kernel))
    c = shape[-1]
    out = c * mult if groups == c else 5 * groups
    x = jnp.asarray(rng.standard_normal(shape), dtype)
    w = jnp.asarray(rng.standard_normal((out, c // groups, *kernel)) / 3, dtype)
    return x, w, Plan(stride, padding, dilation, groups)


def _conv_channels_last(plan, a, b):
    """The convolution of channels-last a, whatever the plan's layout."""
    if plan.channels_last:
        return _conv_cpu.conv(a, b, plan)
    return jnp.moveaxis(_conv_cpu.conv(jnp.moveaxis(a, -1, 1), b, plan), 1, -1)


def _value_and_grads(plan, x, w):
    """Value and both gradients of the convolution of channels-last x, whatever the plan's
    layout."""
    y, vjp = jax.vjp(functools.partial(_conv_channels_last, plan), x, w)
    cot = jnp.asarray(np.random.default_rng(1).standard_normal(y.shape), y.dtype)
    return (y, *vjp(cot))


@pytest.mark.parametrize("channels_last", [True, False], ids=["last", "first"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[0]}-k{g[1]}-s{g[2]}-g{g[5]}")
def test_every_lowering_and_split_matches_xla_values_and_gradients(geometry, channels_last):
    x, w, base = _case(geometry)
    expected = _value_and_grads(base, x, w)
    names = _lowerings(base, x.shape[-1], channels_last, w.shape[2:])
    # Each lowering alone (plain autodiff), then rotations so that, under the custom VJP,
    # every lowering serves as the input gradient and as the weight gradient.
    rotations = [names[k:] + names[:k] for k in range(len(names))] if len(names) > 1 else []
    for forward, input_grad, weight_grad in [(n, n, n) for n in names] + [
            (r[0], r[1 % len(r)], r[2 % len(r)]) for r in rotations]:
        plan = Plan(base.stride, base.padding, base.dilation, base.groups, forward, input_grad,
                    weight_grad, channels_last)
        got = jax.jit(_value_and_grads, static_argnums=0)(plan, x, w)
        for what, a, e in zip(("value", "input grad", "weight grad"), got, expected):
            np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5 * float(jnp.abs(e).max()),
                                       err_msg=f"{plan}: {what}")


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[4], GEOMETRIES[6]])
def test_bfloat16_lowerings_match_xla_within_bfloat16_rounding(geometry):
    x, w, base = _case(geometry, jnp.bfloat16)
    expected = [e.astype(jnp.float32) for e in _value_and_grads(base, x, w)]
    for name, last in [(n, True) for n in _lowerings(base, x.shape[-1])[1:]] + [
            (n, False) for n in _lowerings(base, x.shape[-1], False, w.shape[2:])]:
        plan = Plan(base.stride, base.padding, base.dilation, base.groups, name, name, name,
                    last)
        got = _value_and_grads(plan, x, w)
        for a, e in zip(got, expected):
            assert a.dtype == jnp.bfloat16
            np.testing.assert_allclose(a.astype(jnp.float32), e, rtol=0.05,
                                       atol=0.02 * float(jnp.abs(e).max()))


@pytest.mark.parametrize("geometry, lowerings", [(GEOMETRIES[1], ("xla", "patches", "xla")),
                                                  (GEOMETRIES[5], ("shifts",) * 3)])
def test_custom_vjp_lowerings_support_grad_of_grad(geometry, lowerings):
    x, w, base = _case(geometry)
    split = Plan(base.stride, base.padding, base.dilation, base.groups, *lowerings)

    def second(plan):
        inner = jax.grad(lambda a: jnp.sum(_conv_cpu.conv(a, w, plan) ** 2))
        return jax.grad(lambda a: jnp.sum(inner(a) ** 2))(x)

    np.testing.assert_allclose(second(split), second(base), rtol=1e-4, atol=1e-4)


def test_rule_depthwise_pointwise_stems_tiny_maps_and_strided_input_gradients(monkeypatch):
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: 1)

    def lowerings(x_shape, w_shape, stride=(1, 1), groups=1):
        pad = (w_shape[2] // 2,) * 2
        p = _conv_cpu.plan(x_shape, w_shape, stride, (pad, pad), (1, 1), groups)
        return p.forward, p.input_grad, p.weight_grad, p.channels_last

    assert lowerings((16, 16, 16, 144), (144, 1, 3, 3), groups=144) == ("shifts",) * 3 + (False,)
    # 1x1: per-image products from 14x14 maps, one product below 28x28 with many weights
    assert lowerings((2, 56, 56, 64), (256, 64, 1, 1)) == ("image_matmul",) * 3 + (False,)
    assert lowerings((2, 14, 14, 64), (64, 64, 1, 1)) == ("image_matmul",) * 3 + (False,)
    assert lowerings((2, 14, 14, 1024), (256, 1024, 1, 1)) == ("matmul",) * 3 + (False,)
    assert lowerings((2, 28, 28, 512), (1024, 512, 1, 1), stride=(2, 2))[0] == "matmul"
    assert lowerings((2, 28, 28, 1024), (256, 1024, 1, 1))[0] == "image_matmul"
    assert lowerings((2, 7, 7, 2048), (512, 2048, 1, 1)) == ("matmul",) * 3 + (False,)
    assert lowerings((8, 8, 8, 32), (192, 32, 1, 1)) == ("xla",) * 3 + (True,)
    # 3x3 with few input channels on a large map (a stem); not with a large patch matrix
    assert lowerings((16, 32, 32, 3), (64, 3, 3, 3)) == ("image_matmul",) * 3 + (False,)
    # 3x3 stride 1 with 64 channels or more and 96 output blocks (2x2) or more (256 channels: 64),
    # F(4x4, 3x3) with 96 4x4 blocks or more
    assert lowerings((8, 64, 64, 64), (64, 64, 3, 3)) == ("winograd4",) * 3 + (False,)
    assert lowerings((8, 14, 14, 256), (256, 256, 3, 3))[0] == "winograd4"  # 128, cropped
    assert lowerings((2, 28, 28, 512), (512, 512, 3, 3))[0] == "winograd4"  # 98
    assert lowerings((16, 8, 8, 128), (256, 128, 3, 3))[0] == "winograd"  # 64 (256 2x2)
    assert lowerings((2, 14, 14, 256), (256, 256, 3, 3))[0] == "winograd"  # 98 (32 4x4)
    # 128 2x2 blocks, but over 8x8 for 7x7 pixels (77%): XLA's (Winograd 2.12 ms, XLA's 2.15)
    assert lowerings((8, 7, 7, 64), (192, 64, 3, 3))[0] == "xla"
    assert lowerings((2, 14, 14, 32), (64, 32, 3, 3))[0] == "image_matmul"  # 32 channels
    assert lowerings((16, 4, 4, 256), (256, 256, 3, 3))[0] == "winograd"  # 64 blocks, wide
    # not Winograd (64 blocks with 128 channels; 48 blocks): patches, for their wide patch rows
    assert lowerings((16, 4, 4, 128), (256, 128, 3, 3))[0] == "patches"
    assert lowerings((12, 4, 4, 512), (512, 512, 3, 3))[0] == "patches"
    assert lowerings((2, 224, 224, 3), (64, 3, 7, 7), stride=(2, 2))[0] == "image_matmul"
    assert lowerings((2, 224, 224, 3), (64, 3, 11, 11), stride=(4, 4))[0] == "xla"
    assert lowerings((16, 2, 2, 512), (512, 512, 3, 3)) == ("patches",) * 3 + (True,)
    # a map with fewer pixels than the kernel has offsets: the map matrix, unless it is large
    # (above) or the batch small
    assert lowerings((16, 2, 2, 256), (256, 256, 3, 3)) == ("whole_map",) * 3 + (False,)
    assert lowerings((16, 1, 2, 64), (64, 64, 3, 3))[0] == "whole_map"
    assert lowerings((8, 2, 2, 128), (128, 128, 3, 3))[0] == "patches"
    assert lowerings((16, 2, 2, 256), (256, 256, 3, 3), stride=(2, 2))[0] == "patches"
    assert lowerings((16, 3, 3, 256), (256, 256, 3, 3))[:3] == ("patches",) * 3
    # few output rows (batch x pixels): patches, which use the weight untransposed
    assert lowerings((2, 7, 7, 512), (512, 512, 3, 3))[:3] == ("patches",) * 3
    assert lowerings((8, 7, 7, 32), (192, 32, 3, 3))[:3] == ("xla",) * 3
    # a strided layer's input gradient: patches for a 1x1 kernel, XLA's for larger ones
    assert lowerings((16, 16, 16, 64), (128, 64, 1, 1), stride=(2, 2))[:3] == (
        "xla", "patches", "xla")
    assert lowerings((8, 32, 32, 64), (128, 64, 3, 3), stride=(2, 2))[:3] == ("xla",) * 3
    assert lowerings((2, 28, 28, 256), (256, 256, 3, 3), stride=(2, 2))[:3] == ("patches",) * 3
    assert lowerings((16, 32, 32, 32), (32, 32, 3, 3))[:3] == ("xla",) * 3
    assert lowerings((8, 8, 8, 32), (32, 8, 3, 3), groups=4)[:3] == ("xla",) * 3
    off = _conv_cpu.plan((16, 2, 2, 512), (512, 512, 3, 3), (1, 1), ((1, 1),) * 2, (1, 1), 1,
                         choose=False)
    assert (off.forward, off.input_grad, off.weight_grad) == ("xla",) * 3


@pytest.mark.parametrize("cores", [1, 2])
def test_rule_takes_patches_for_few_output_rows_on_more_than_one_core(cores, monkeypatch):
    """XLA's convolution scales poorly to two cores; there 1x1 and 3x3 layers with at most
    _FEW_ROWS_MULTICORE (400) output rows (images x pixels) take patches. One core keeps XLA's
    unless a patch row (C*k*k) has _WIDE_PATCH_ROW (1152) values or more."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)

    def forward(x_shape, w_shape, stride=(1, 1)):
        pad = (w_shape[2] // 2,) * 2
        return _conv_cpu.plan(x_shape, w_shape, stride, (pad, pad), (1, 1), 1).forward

    two = "patches" if cores > 1 else "xla"
    assert forward((2, 14, 14, 192), (256, 192, 3, 3)) == (two if cores > 1 else "winograd")
    assert forward((2, 12, 12, 96), (256, 96, 3, 3)) == two  # 288 rows, 72 2x2 blocks
    wide = two if cores > 1 else "winograd"  # 64 blocks, 256 channels or more: Winograd on one
    assert forward((2, 12, 12, 256), (256, 256, 3, 3)) == wide
    assert forward((16, 4, 4, 512), (512, 512, 3, 3)) == wide  # 256 rows
    assert forward((8, 8, 8, 32), (128, 32, 3, 3)) == "xla"  # 512 rows
    assert forward((2, 28, 28, 128), (256, 128, 3, 3), stride=(2, 2)) == "patches"  # 1152 wide
    assert forward((2, 28, 28, 64), (128, 64, 3, 3), stride=(2, 2)) == two  # 576 wide
    assert forward((2, 7, 7, 832), (256, 832, 1, 1)) == two
    assert forward((8, 7, 7, 64), (192, 64, 5, 5)) == "xla"  # 392 rows, but a 5x5 kernel
    assert forward((2, 14, 14, 32), (64, 32, 3, 3)) == "image_matmul"  # ahead of the rule


@pytest.mark.parametrize("cores", [1, 2])
def test_rule_takes_winograd_on_more_than_one_core_only_for_large_layers(cores, monkeypatch):
    """On one core every 3x3 stride-1 layer with 64 channels and 96 output blocks (2x2), or 256
    channels and 64 blocks, takes Winograd; on more, only those with channels x blocks of
    20000 (128 channels or more) or 2^16 (fewer): its small loops and products scale worse
    than one convolution. F(4x4, 3x3) runs on any number of cores, from 96 4x4 blocks."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)

    def forward(x_shape, w_shape):
        return _conv_cpu.plan(x_shape, w_shape, (1, 1), ((1, 1),) * 2, (1, 1), 1).forward

    one = cores == 1
    assert forward((2, 56, 56, 64), (64, 64, 3, 3)) == "winograd4"  # 1568 x 64
    assert forward((2, 14, 14, 256), (256, 256, 3, 3)) == "winograd"  # 98 x 256
    assert forward((8, 16, 16, 64), (64, 64, 3, 3)) == "winograd4"  # 512 x 64 (128 4x4)
    assert forward((16, 8, 8, 64), (64, 64, 3, 3)) == ("winograd" if one else "xla")  # 256
    assert forward((8, 8, 8, 128), (128, 128, 3, 3)) == ("winograd" if one else "xla")  # 128
    assert forward((8, 8, 8, 64), (64, 64, 3, 3)) == ("winograd" if one else "xla")  # 128
    assert forward((2, 28, 28, 128), (128, 128, 3, 3)) == "winograd4"  # 392 x 128
    assert forward((8, 8, 8, 512), (512, 512, 3, 3)) == "winograd"  # 128 x 512
    assert forward((2, 224, 224, 64), (64, 64, 3, 3)) == "winograd4"  # 25088 blocks
    assert forward((4, 224, 224, 64), (64, 64, 3, 3)) == "xla"  # tiles over 2^25 elements
    assert forward((2, 7, 7, 512), (512, 512, 3, 3)) == "patches"  # 32 blocks
    assert forward((16, 4, 4, 512), (512, 512, 3, 3)) == ("winograd" if one else "patches")  # 64
    assert _conv_cpu.plan((2, 28, 28, 128), (128, 128, 3, 3), (1, 1), ((0, 0),) * 2, (1, 1),
                          1).forward == "winograd4"  # no padding: 26x26, 98 4x4 blocks
    # 13x13: 7x7 blocks of 2x2 hold 86% output pixels (AlexNet's 3x3 layers at 224 px)
    assert forward((2, 13, 13, 384), (256, 384, 3, 3)) == "patches"
    assert forward((2, 13, 13, 256), (256, 256, 3, 3)) == "patches"
    assert _conv_cpu.plan((2, 28, 28, 128), (128, 128, 3, 3), (1, 1), ((1, 1),) * 2, (2, 2),
                          1).forward not in ("winograd", "winograd4")  # dilated


@pytest.mark.parametrize("cores", [1, 2])
def test_rule_takes_winograd_for_5x5_layers_with_256_blocks(cores, monkeypatch):
    """A 5x5 stride-1 layer with 64 channels or more takes F(2x2, 5x5) from 256 2x2 output
    blocks (AlexNet's second layer at 224 px, not at 64 px), on any number of cores."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)

    def forward(x_shape, w_shape, stride=(1, 1)):
        return _conv_cpu.plan(x_shape, w_shape, stride, ((2, 2),) * 2, (1, 1), 1).forward

    assert forward((2, 27, 27, 64), (192, 64, 5, 5)) == "winograd"  # 392 blocks
    assert forward((8, 7, 7, 64), (192, 64, 5, 5)) == "xla"  # 128 blocks
    assert forward((2, 27, 27, 32), (192, 32, 5, 5)) != "winograd"  # 32 input channels
    assert forward((2, 27, 27, 64), (192, 64, 5, 5), (2, 2)) != "winograd"  # strided


@pytest.mark.parametrize("geometry, lowering", [
    (GEOMETRIES[0], "winograd"), (GEOMETRIES[0], "winograd4"), (GEOMETRIES[4], "winograd"),
    (GEOMETRIES[4], "winograd4"), (FIVE, "winograd")])
def test_winograd_keeps_forward_mode_second_derivatives_and_vmap(geometry, lowering):
    """Plain autodiff of transforms and products: forward mode, forward-over-reverse and the
    per-example gradients of vmap match XLA's convolution."""
    x, w, base = _case(geometry)
    _assert_forward_mode_matches_xla(lowering, base, x, w)
    plan = dataclasses.replace(base, forward=lowering, input_grad=lowering,
                               weight_grad=lowering, channels_last=False)

    def per_example(p):
        return jax.vmap(jax.grad(lambda b, a: jnp.sum(jnp.tanh(
            _conv_channels_last(p, a[None], b))), (0, 1)), (None, 0))(w, x)

    for got, expected in zip(per_example(plan), per_example(base)):
        np.testing.assert_allclose(got, expected, rtol=1e-4,
                                   atol=1e-4 * float(jnp.abs(expected).max()))


@pytest.mark.parametrize("m, geometry", [(2, GEOMETRIES[0]), (4, GEOMETRIES[0]), (2, FIVE)],
                         ids=["F(2x2, 3x3)", "F(4x4, 3x3)", "F(2x2, 5x5)"])
@pytest.mark.parametrize("groups", [2, 3])
def test_winograd_tile_positions_in_independent_chains_change_nothing(m, geometry, groups):
    """Tile positions split into chains (two cores) give XLA's values and both gradients."""
    x, w, base = _case(geometry)
    x = jnp.moveaxis(x, -1, 1)
    padding = base.padding

    def value_and_grads(conv):
        y, vjp = jax.vjp(conv, x, w)
        return (y, *vjp(jnp.cos(y)))

    got = value_and_grads(lambda a, b: _winograd.conv(a, b, padding, m, groups))
    expected = value_and_grads(lambda a, b: jax.lax.conv_general_dilated(
        a, b, (1, 1), padding, precision="highest"))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * float(jnp.abs(e).max()))


# (input, kernel, lowering, cores): 100 2x2 output blocks, 25 4x4 ones; 110 4x4 blocks (399
# 2x2); on two cores F(2x2, 3x3) needs 128 channels (169 2x2 blocks, 49 4x4 ones); a 5x5 layer
# with 288 2x2 blocks. No map divides into whole blocks, so the last blocks are cropped.
@pytest.mark.parametrize("shape, kernel, lowering, cores", [
    ((1, 64, 19, 20), 3, "winograd", 1), ((1, 64, 38, 41), 3, "winograd4", 1),
    ((1, 128, 25, 26), 3, "winograd", 2), ((1, 64, 38, 41), 3, "winograd4", 2),
    ((2, 64, 23, 24), 5, "winograd", 1), ((2, 64, 23, 24), 5, "winograd", 2)])
def test_winograd_layer_matches_torch_values_and_gradients_under_dl_jit(shape, kernel, lowering,
                                                                        cores, monkeypatch):
    """A 3x3 or 5x5 layer runs Winograd (on two cores with its tile positions in two chains)
    and equals torch's Conv2d in value and in the gradients of input, weight and bias."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)
    torch.manual_seed(0)
    channels = shape[1]
    torch_model = torch.nn.Conv2d(channels, channels, kernel, padding=kernel // 2)
    model = nn.Conv2d(channels, channels, kernel, padding=kernel // 2)
    model.load_state_dict(torch_model.state_dict())
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    cot = rng.standard_normal(shape).astype(np.float32)

    def loss(m, x):
        return jnp.sum(m(x) * jnp.asarray(cot))

    y = dl.jit(lambda m, x: m(x))(model, jnp.asarray(x))
    grads, dx = dl.jit(dl.grad(loss, (0, 1)))(model, jnp.asarray(x))
    tx = torch.tensor(x, requires_grad=True)
    ty = torch_model(tx)
    (ty * torch.tensor(cot)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    for name, param in torch_model.named_parameters():
        np.testing.assert_allclose(grads[name], param.grad.numpy(), rtol=1e-5,
                                   atol=1e-5 * float(param.grad.abs().max()), err_msg=name)
    (entry,) = [c for c in dl.backends.cpu.choices() if c["input"] == shape]
    assert entry["forward"] == lowering


def test_the_benchmark_switch_retraces_and_takes_xla_convolution(monkeypatch):
    """`dl.backends.cpu.benchmark = False` takes XLA's convolution where the rule takes
    another lowering, and a compiled step retraces when the switch changes."""
    torch_model = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
    model = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    model.load_state_dict(torch_model.state_dict())
    x = np.random.default_rng(0).standard_normal((2, 8, 5, 5)).astype(np.float32)
    expected = torch_model(torch.tensor(x)).detach().numpy()
    step = dl.jit(lambda m, x: m(x))

    def run(benchmark):
        monkeypatch.setattr(dl.backends.cpu, "benchmark", benchmark)
        np.testing.assert_allclose(step(model, jnp.asarray(x)), expected, rtol=1e-5, atol=1e-5)
        (entry,) = [c for c in dl.backends.cpu.choices() if c["input"] == (2, 8, 5, 5)]
        return entry["forward"], entry["input_grad"], entry["weight_grad"]

    assert run(True) == ("shifts",) * 3
    assert run(False) == ("xla",) * 3
    assert step.trace_count == 2


@pytest.mark.parametrize("shape, groups", [((2, 8, 6, 6), 8), ((2, 8, 2, 2), 1)])
def test_autocast_bfloat16_runs_the_chosen_lowering_in_bfloat16_close_to_torch(shape, groups):
    torch_model = torch.nn.Conv2d(8, 8, 3, padding=1, groups=groups)
    model = nn.Conv2d(8, 8, 3, padding=1, groups=groups)
    model.load_state_dict(torch_model.state_dict())
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with dl.amp.autocast(dtype=jnp.bfloat16):
        out = dl.jit(lambda m, x: m(x))(model, jnp.asarray(x))
    (entry,) = [c for c in dl.backends.cpu.choices()
                if c["input"] == shape and c["groups"] == groups and c["dtype"] == "bfloat16"]
    assert entry["forward"] == ("shifts" if groups > 1 else "patches")
    assert out.dtype == jnp.bfloat16
    expected = torch_model(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(np.asarray(out, np.float32), expected, rtol=0.03,
                               atol=0.03 * np.abs(expected).max())


def test_forward_mode_through_depthwise_needs_the_switch_off(monkeypatch):
    rng = np.random.default_rng(0)
    x, tangent = rng.standard_normal((2, 2, 6, 5, 5)).astype(np.float32)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)

    def conv(a):
        return nn.functional.conv2d(a, jnp.asarray(w), stride=2, padding=1, groups=6)

    monkeypatch.setattr(dl.backends.cpu, "benchmark", True)
    with pytest.raises(TypeError, match="custom_vjp"):  # the written-out gradients: reverse only
        jax.jvp(conv, (jnp.asarray(x),), (jnp.asarray(tangent),))
    monkeypatch.setattr(dl.backends.cpu, "benchmark", False)
    y, dy = jax.jvp(conv, (jnp.asarray(x),), (jnp.asarray(tangent),))
    t_y, t_dy = torch.func.jvp(
        lambda a: torch.nn.functional.conv2d(a, torch.tensor(w), stride=2, padding=1, groups=6),
        (torch.tensor(x),), (torch.tensor(tangent),))
    np.testing.assert_allclose(y, t_y.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dy, t_dy.numpy(), rtol=1e-5, atol=1e-5)


# A 1x1 expanding layer (3 -> 5 channels): image_matmul's plain product form throughout
EXPANDING = ((2, 5, 4, 3), (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, 1)


# _TRANSPOSED_PIXELS as 1 makes the small test maps take the transposed product form (K >= O)
FORMS = pytest.mark.parametrize("transposed_pixels", [1, _conv_cpu._TRANSPOSED_PIXELS],
                                ids=["large-map form", "small-map form"])


@FORMS
@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[2], GEOMETRIES[10], EXPANDING])
def test_image_matmul_keeps_forward_mode_and_second_derivatives(geometry, cores,
                                                                transposed_pixels, monkeypatch):
    """Its product has a custom JVP (each pass in its faster product form): forward mode,
    with a tangent on either operand or both, and forward-over-reverse match XLA's, with
    the weight gradient summed over images either way (every weight counted as large)."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)
    monkeypatch.setattr(_conv_cpu, "_SLICED_SUM_WEIGHTS", 1)
    monkeypatch.setattr(_conv_cpu, "_TRANSPOSED_PIXELS", transposed_pixels)
    x, w, base = _case(geometry)
    if geometry is EXPANDING:
        w = jnp.concatenate([w, w[:3] * 2])  # 10 outputs from 3 channels: K < O
    _assert_forward_mode_matches_xla("image_matmul", base, x, w)


@pytest.mark.parametrize("pixels, transposed", [(14 * 14, False), (16 * 16, True)])
def test_image_matmul_takes_the_transposed_product_form_only_on_large_maps(pixels, transposed,
                                                                           monkeypatch):
    """Per-image products with at least as many patch rows as outputs take the transposed
    form from _TRANSPOSED_PIXELS output pixels on (16x16 maps), the plain one below; an
    expanding layer (rows < outputs) keeps the plain form on any map."""
    seen = []
    real = _conv_cpu._per_image_product
    monkeypatch.setattr(_conv_cpu, "_per_image_product",
                        lambda w, columns, form: seen.append(form) or real(w, columns, form))
    side = math.isqrt(pixels)
    plan = Plan((1, 1), ((0, 0), (0, 0)), (1, 1), 1, *["image_matmul"] * 3, channels_last=False)
    for channels, outputs, expected in [(8, 4, transposed), (4, 8, False)]:
        x = jnp.ones((1, channels, side, side))
        jax.eval_shape(lambda x, w: _conv_cpu.conv(x, w, plan), x, jnp.ones((outputs, channels, 1, 1)))
        assert seen.pop() is expected, (pixels, channels, outputs)


@pytest.mark.parametrize("weight_grad_pixels", [1, 10 ** 9])
@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[2], EXPANDING])
def test_matmul_per_image_passes_keep_forward_mode(geometry, cores, weight_grad_pixels,
                                                   monkeypatch):
    """On large maps "matmul" runs its forward pass one product per image on one core
    (_IMAGE_FORWARD_PIXELS) and its weight gradient one product per image summed over the
    images on any core count (_IMAGE_WEIGHT_GRAD_PIXELS), under a custom JVP; the thresholds
    are set here so that the small test maps take them, or not. Each combination: forward
    mode, with a tangent on either operand or both, and forward-over-reverse (whose primal is
    the gradient) match XLA's convolution."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)
    monkeypatch.setattr(_conv_cpu, "_IMAGE_FORWARD_PIXELS", 1)
    monkeypatch.setattr(_conv_cpu, "_IMAGE_WEIGHT_GRAD_PIXELS", weight_grad_pixels)
    calls = []
    real = _conv_cpu._matmul_product
    monkeypatch.setattr(_conv_cpu, "_matmul_product",
                        lambda w, columns, *forms: calls.append(forms) or real(w, columns, *forms))
    x, w, base = _case(geometry)
    _assert_forward_mode_matches_xla("matmul", base, x, w)
    assert set(calls) == {(cores == 1, weight_grad_pixels == 1)}


@pytest.mark.parametrize("cores", [1, 2])
def test_matmul_per_image_passes_in_bfloat16_match_xla(cores, monkeypatch):
    """The per-image passes of "matmul" (thresholds at 1, so that a small map takes them) keep
    bfloat16 values and gradients within bfloat16 rounding of XLA's convolution."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)
    monkeypatch.setattr(_conv_cpu, "_IMAGE_FORWARD_PIXELS", 1)
    monkeypatch.setattr(_conv_cpu, "_IMAGE_WEIGHT_GRAD_PIXELS", 1)
    x, w, base = _case(GEOMETRIES[0], jnp.bfloat16)
    expected = [e.astype(jnp.float32) for e in _value_and_grads(base, x, w)]
    plan = Plan(base.stride, base.padding, base.dilation, base.groups, *["matmul"] * 3,
                channels_last=False)
    for a, e in zip(_value_and_grads(plan, x, w), expected):
        assert a.dtype == jnp.bfloat16
        np.testing.assert_allclose(a.astype(jnp.float32), e, rtol=0.05,
                                   atol=0.02 * float(jnp.abs(e).max()))


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[4], GEOMETRIES[9]])
def test_whole_map_keeps_forward_mode_and_second_derivatives(geometry):
    """Plain autodiff of a product with a matrix built from the kernel: forward mode and
    forward-over-reverse match XLA's (a 2x2 map, a 9x7 one, a kernel axis over 8)."""
    x, w, base = _case(geometry)
    _assert_forward_mode_matches_xla("whole_map", base, x, w)


def _assert_forward_mode_matches_xla(lowering, base, x, w):
    """Forward mode, with a tangent on either operand or both, and forward-over-reverse of a
    channels-first lowering against XLA's convolution."""
    first = Plan(base.stride, base.padding, base.dilation, base.groups, *[lowering] * 3,
                 channels_last=False)
    rng = np.random.default_rng(2)
    dx, dw = (jnp.asarray(rng.standard_normal(a.shape), a.dtype) for a in (x, w))
    conv = _conv_channels_last

    def checks(plan):
        def loss(a, b):
            return jnp.sum(jnp.tanh(conv(plan, a, b)))
        return (jax.jvp(lambda a, b: conv(plan, a, b), (x, w), (dx, dw)),
                jax.jvp(lambda b: conv(plan, x, b), (w,), (dw,)),
                jax.jvp(lambda a: conv(plan, a, w), (x,), (dx,)),
                jax.jvp(jax.grad(loss, (0, 1)), (x, w), (dx, dw)))

    for got, expected in zip(jax.tree.leaves(checks(first)), jax.tree.leaves(checks(base))):
        np.testing.assert_allclose(got, expected, rtol=1e-4,
                                   atol=1e-4 * float(jnp.abs(expected).max()))


@FORMS
@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("images", [2, 3])
def test_weight_gradient_sums_images_by_slices_or_by_a_reduce(cores, transposed_pixels, images,
                                                              monkeypatch):
    """The per-image weight gradients are summed over the images either by a reduce over the
    image axis (XLA hands it to YNNPACK with the product) or by adds of slices: the plain
    product form takes slices on one core, and on more with weights of _SLICED_SUM_WEIGHTS
    elements or more or with _SLICED_SUM_IMAGES images or fewer; the transposed form takes
    them only on more than one core for large weights. Both match XLA's."""
    monkeypatch.setattr(_conv_cpu, "_cores", lambda: cores)
    monkeypatch.setattr(_conv_cpu, "_TRANSPOSED_PIXELS", transposed_pixels)
    x, w, base = _case(GEOMETRIES[0])  # (2, 9, 7, 6) -> 5 channels, 3x3: a (5, 54) weight
    x = jnp.concatenate([x, x[:1] * 0.5])[:images]
    transposed = transposed_pixels == 1  # 54 patch rows >= 5 outputs
    first = Plan(base.stride, base.padding, base.dilation, base.groups, *["image_matmul"] * 3,
                 channels_last=False)
    for threshold, large in [(w.size, True), (w.size + 1, False)]:
        if transposed:
            sliced = cores > 1 and large
        else:
            sliced = cores == 1 or large or images <= _conv_cpu._SLICED_SUM_IMAGES
        monkeypatch.setattr(_conv_cpu, "_SLICED_SUM_WEIGHTS", threshold)
        jaxpr = str(jax.make_jaxpr(lambda b: jax.grad(
            lambda b: jnp.sum(_conv_channels_last(first, x, b) ** 2))(b))(w))
        assert bool(re.search(r"reduce_sum\[axes=\(0,\)", jaxpr)) != sliced, jaxpr
        got = jax.jit(_value_and_grads, static_argnums=0)(first, x, w)
        for a, e in zip(got, _value_and_grads(base, x, w)):
            np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5 * float(jnp.abs(e).max()))


def test_live_taps_crops_offsets_that_read_only_padding():
    """A kernel offset is live when some output reads a real input element through it."""
    one = ((1, 1),)
    assert _conv_cpu.live_taps((1,), (3,), (1,), one, (1,)) == [(1, 2)]  # 1x1 map: the centre
    assert _conv_cpu.live_taps((2,), (3,), (2,), one, (1,)) == [(1, 3)]  # 2 -> 1, stride 2
    assert _conv_cpu.live_taps((2,), (5,), (1,), ((2, 2),), (1,)) == [(1, 4)]
    assert _conv_cpu.live_taps((2,), (3,), (1,), one, (1,)) is None  # every offset reads data
    assert _conv_cpu.live_taps((1,), (3,), (1,), ((2, 2),), (2,)) == [(1, 2)]  # dilated
    assert _conv_cpu.live_taps((1, 4), (3, 3), (1, 1), (one[0], one[0]), (1, 1)) == [(1, 2), (0, 3)]
    # no offset reads data along an axis (the output is zeros): that axis is left whole
    assert _conv_cpu.live_taps((1,), (1,), (1,), ((2, 2),), (1,)) is None


def test_live_taps_agrees_with_every_output_read_on_a_grid():
    """The closed form (first output at or past index 0) against reading every output's index."""
    for size, k, s, d, lo, hi in itertools.product(range(1, 6), range(1, 6), range(1, 4),
                                                   range(1, 3), range(4), range(4)):
        if size + lo + hi < d * (k - 1) + 1:
            continue
        out = (size + lo + hi - d * (k - 1) - 1) // s + 1
        live = [i for i in range(k) if any(0 <= o * s + i * d - lo < size for o in range(out))]
        expected = (live[0], live[-1] + 1) if live else (0, k)
        got = _conv_cpu.live_taps((size,), (k,), (s,), ((lo, hi),), (d,))
        assert got == (None if expected == (0, k) else [expected]), (size, k, s, d, lo, hi)


# (input (N, C, *S), kernel, stride, padding, dilation, groups): maps smaller than the kernel's
# reach, where offsets at the ends read only padding
DEAD_TAPS = [
    ((2, 6, 1, 1), (3, 3), 1, 1, 1, 1),            # ResNet's last stage at 32x32 input
    ((2, 6, 2, 2), (3, 3), 2, 1, 1, 1),            # its strided entry: 2x2 -> 1x1
    ((1, 4, 3, 5), (3, 5), (1, 3), 1, (2, 1), 1),  # input rows no offset reads: sliced off
    ((2, 4, 3, 2), (3, 3), (1, 2), 2, 2, 1),       # dilated
    ((2, 6, 1, 1), (3, 3), 1, 1, 1, 6),            # depthwise ("shifts") on a 1x1 map
    ((2, 6, 1, 2), (3, 3), 1, 1, 1, 2),            # grouped
    ((2, 3, 1), (5,), 1, 2, 1, 1),                 # 1-d
    ((1, 3, 1, 2, 1), (3, 3, 3), 1, 1, 1, 1),      # 3-d
]


@pytest.mark.parametrize("geometry", DEAD_TAPS, ids=lambda g: f"{g[0]}-k{g[1]}-g{g[5]}")
def test_cropped_offsets_match_torch_values_and_gradients(geometry):
    """The cropped convolution equals torch's (which reads the padding) in value and both
    gradients; the dead offsets' weight gradients are exact zeros, as torch's are."""
    shape, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(len(shape) + sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((6, shape[1] // groups, *kernel)).astype(np.float32)
    n = len(kernel)
    conv = getattr(dl.nn.functional, f"conv{n}d")
    t_conv = getattr(torch.nn.functional, f"conv{n}d")
    options = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y, vjp = jax.vjp(jax.jit(lambda a, b: conv(a, b, **options)), jnp.asarray(x), jnp.asarray(w))
    cot = rng.standard_normal(y.shape).astype(np.float32)
    dx, dw = vjp(jnp.asarray(cot))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = t_conv(tx, tw, **options)
    ty.backward(torch.tensor(cot))
    for got, expected in [(y, ty.detach()), (dx, tx.grad), (dw, tw.grad)]:
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
    dead = tw.grad.numpy() == 0
    assert dead.any() and (np.asarray(dw)[dead] == 0).all()
    def per_axis(v):
        return tuple(v) if isinstance(v, tuple) else (v,) * n

    (entry,) = [c for c in dl.backends.cpu.choices()
                if (c["input"], c["weight"], c["groups"], c["dtype"]) == (shape, w.shape, groups,
                                                                          "float32")
                and c["stride"] == per_axis(stride) and c["dilation"] == per_axis(dilation)
                and c["padding"] == tuple((p, p) for p in per_axis(padding))]
    assert math.prod(entry["kernel"]) < math.prod(kernel)


@pytest.mark.parametrize("geometry", DEAD_TAPS[:2], ids=["one offset", "two offsets"])
def test_cropped_offsets_keep_forward_mode_and_second_derivatives(geometry, monkeypatch):
    """The crop slices x and w (a kernel axis cropped to one offset takes its tangent as a sum
    against a one-hot mask, so that its gradient is a broadcast): forward mode and
    forward-over-reverse equal those of XLA's uncropped convolution."""
    shape, kernel, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(3)
    x, dx = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    w, dw = (jnp.asarray(rng.standard_normal((6, shape[1], *kernel)), jnp.float32)
             for _ in range(2))

    def conv(a, b):
        return dl.nn.functional.conv2d(a, b, stride=stride, padding=padding)

    def checks():
        loss = jax.grad(lambda a, b: jnp.sum(jnp.tanh(conv(a, b))), (0, 1))
        return jax.jvp(conv, (x, w), (dx, dw)), jax.jvp(loss, (x, w), (dx, dw))

    cropped = checks()
    monkeypatch.setattr(dl.backends.cpu, "benchmark", False)
    whole = checks()
    for got, expected in zip(jax.tree.leaves(cropped), jax.tree.leaves(whole)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
