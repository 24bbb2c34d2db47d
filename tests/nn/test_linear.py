"""Linear, Bilinear, Flatten/Unflatten, and torch's grouped and scaled (fp8) matrix products
against PyTorch."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from jax.test_util import check_grads
from torch_twin import check_twin, pair, rand

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn
from jaxdl.nn import _linear


def test_linear_bilinear_shape_layers(rng):
    check_twin(*pair("Linear", 5, 3), [rand(rng, 1, 5)])
    check_twin(*pair("Linear", 3, 7), [rand(rng, 2, 4, 3)])  # out > in: dW as (x^T dy)^T
    check_twin(*pair("Bilinear", 4, 3, 2), [rand(rng, 5, 4), rand(rng, 5, 3)])
    check_twin(*pair("Bilinear", 4, 3, 2, bias=False), [rand(rng, 4), rand(rng, 3)])
    check_twin(*pair("Flatten"), [rand(rng, 2, 3, 4)], modes=("train",))
    check_twin(*pair("Flatten", 0, 1), [rand(rng, 2, 3, 4)], modes=("train",))
    check_twin(*pair("Unflatten", 1, (2, -1)), [rand(rng, 3, 6, 2)], modes=("train",))
    bound = 1 / math.sqrt(4)
    w = np.asarray(nn.Bilinear(4, 3, 7).weight)
    assert w.shape == (7, 4, 3) and np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound


# Row counts that take each form of F.linear's products (_linear._times_transposed,
# _rows_tangent and _weight_tangent): one row (the forward a product), two and eight rows
# (the input gradient as (W^T dy^T)^T, the weight gradient as a sum of outer products, and
# against a large weight the forward as a multiply-and-sum), many rows (autodiff's forms).
ROWS = [1, 2, 8, 100]


@pytest.fixture(params=["product", "summed"])
def weight_bound(request, monkeypatch):
    """Each test twice: as is, and with every weight counted as large, so that the small
    weights here take the forward's multiply-and-sum (_linear._SUMMED_WEIGHT)."""
    if request.param == "summed":
        monkeypatch.setattr(_linear, "_SUMMED_WEIGHT", 0)
    return request.param


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("in_features, out_features", [(6, 4), (3, 7)])
def test_linear_every_row_count_matches_torch(rows, in_features, out_features, rng, weight_bound):
    check_twin(*pair("Linear", in_features, out_features), [rand(rng, rows, in_features)],
               modes=("train",), jit=True)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("out_features", [2, 9])  # the weight gradient's two orientations
def test_linear_forward_mode_and_second_derivatives(rows, out_features, rng, weight_bound):
    # F.linear's tangent is written out (_linear._rows_times_weight): forward and reverse
    # mode and their second derivatives against finite differences, and a weight that is
    # not differentiated (a symbolic zero tangent). Small inputs keep tanh off its flat
    # tails, where float32 finite differences of second order are too coarse.
    x = 0.5 * jnp.asarray(rand(rng, rows, 1, 5))
    w = 0.5 * jnp.asarray(rand(rng, out_features, 5))
    b = jnp.asarray(rand(rng, out_features))
    check_grads(lambda x, w, b: jnp.tanh(F.linear(x, w, b)), (x, w, b), order=2,
                modes=["fwd", "rev"], atol=1e-2, rtol=1e-2, eps=1e-2)
    check_grads(lambda x: jnp.tanh(F.linear(x, w)), (x,), order=2, modes=["fwd", "rev"],
                atol=1e-2, rtol=1e-2, eps=1e-2)


@pytest.mark.parametrize("rows", ROWS)
def test_linear_gradients_under_vmap_and_jit(rows, rng, weight_bound):
    # the written-out tangent's transposed weight term, batched: an ensemble of weights
    # and per-example gradients, compiled, against autodiff of x @ w.T
    x = jnp.asarray(rand(rng, 4, rows, 2))
    ws = jnp.asarray(rand(rng, 3, 9, 2))
    loss = lambda w, x, lin: jnp.sum(jnp.tanh(lin(x, w)))  # noqa: E731
    for axes, args in (((0, None), (ws, x)), ((None, 0), (ws[0], x))):
        ours = jax.jit(jax.vmap(jax.grad(lambda w, x: loss(w, x, F.linear)), axes))(*args)
        plain = jax.vmap(jax.grad(lambda w, x: loss(w, x, lambda x, w: x @ w.T)), axes)(*args)
        np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-5)



@pytest.mark.parametrize("rows", ROWS)
def test_few_rows_weight_gradient_is_fused_into_the_update(rows, rng):
    # Up to _OUTER_ROWS rows the weight gradient is a sum of outer products, which XLA
    # computes inside the update's loop: no matrix product writes the (64, 32) gradient out.
    w, x = jnp.asarray(rand(rng, 64, 32)), jnp.asarray(rand(rng, rows, 32))

    def sgd(w, x):
        return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(F.linear(x, w))))(w)

    text = jax.jit(sgd, compiler_options=dl.xla_compiler_options()).lower(w, x).compile().as_text()
    weight_sized = [line for line in text.splitlines() if re.search(r"= f32\[(64,32|32,64)\]", line)]
    products = [line for line in weight_sized if " dot(" in line or "kind=kCustom" in line]
    assert (products == []) == (rows <= _linear._OUTER_ROWS), products
    np.testing.assert_allclose(jax.jit(sgd)(w, x), w - 0.1 * jax.grad(
        lambda w: jnp.sum(jnp.tanh(x @ w.T)))(w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [2, 8])
def test_few_rows_weight_gradient_loop_reads_dropout_from_memory(rows, rng):
    # The outer products' loop runs over the whole weight; the dropout before the layer (a
    # hash of the element index) must be computed once, not fused into that loop and run
    # again for every weight row (_linear._materialised). The weight here is (64, 32).
    w, p = jnp.asarray(rand(rng, 64, 32)), jnp.asarray(rand(rng, rows, 32))

    def sgd(w, p, key):
        x = F.dropout(p, 0.5, key=key)
        return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(F.linear(x, w))))(w)

    key = jax.random.key(3)
    text = jax.jit(sgd, compiler_options=dl.xla_compiler_options()).lower(w, p, key).compile().as_text()
    fused = re.findall(r"^%fused.*?^}", text, re.M | re.S)
    weight_loops = [body for body in fused if "f32[64,32]" in body]
    assert weight_loops and not [body for body in weight_loops if " xor(" in body]
    x = F.dropout(p, 0.5, key=key)
    np.testing.assert_allclose(jax.jit(sgd)(w, p, key), w - 0.1 * jax.grad(
        lambda w: jnp.sum(jnp.tanh(x @ w.T)))(w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows, features, summed", [
    (1, 2048, False), (2, 2048, True), (32, 2048, True), (33, 2048, False), (8, 128, False)])
def test_few_rows_against_a_large_weight_are_summed(rows, features, summed, rng):
    # From 2 to 32 rows against a weight of 2^16 elements or more, the forward on CPU is a
    # multiply-and-sum (a reduce, which XLA hands to YNNPACK with the multiply fused in),
    # not a matrix product; torch's Linear is the oracle for values and gradients.
    t_lin, j_lin = pair("Linear", features, features, bias=False)
    check_twin(t_lin, j_lin, [rand(rng, rows, features)], modes=("train",), jit=True)
    w, x = jnp.asarray(rand(rng, features, features)), jnp.asarray(rand(rng, rows, features))
    text = jax.jit(F.linear, compiler_options=dl.xla_compiler_options()).lower(x, w).compile().as_text()
    products = [line for line in text.splitlines() if " dot(" in line]
    assert (products == []) == summed, products
    # bfloat16 in, bfloat16 out, summed in float32 as the product accumulates
    half = F.linear(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16))
    assert half.dtype == jnp.bfloat16
    exact = np.asarray(x.astype(jnp.bfloat16), np.float64) @ np.asarray(w.astype(jnp.bfloat16), np.float64).T
    np.testing.assert_allclose(np.asarray(half, np.float64), exact, rtol=2e-2, atol=0.1)

OFFS = np.array([2, 5, 8], np.int32)


@pytest.mark.parametrize("shapes, offs", [
    (((8, 8), (3, 8, 4)), OFFS),  # ragged rows of a, one b per group
    (((3, 4, 8), (8, 8)), OFFS),  # ragged columns of b
    (((4, 8), (8, 4)), OFFS),  # ragged contraction: one product per group
    (((3, 4, 8), (3, 8, 4)), None),  # batched
])
def test_grouped_mm_float32_matches_torch(shapes, offs, rng):
    a, b = (rand(rng, *s) for s in shapes)
    if offs is None:
        check_functional(F.grouped_mm, TF.grouped_mm, [a, b])
        return
    check_functional(lambda a, b, o: F.grouped_mm(a, b, offs=o),
                     lambda a, b, o: TF.grouped_mm(a, b, offs=o), [a, b], [offs])


def test_grouped_mm_bfloat16_and_rows_past_the_last_offset(rng):
    a, b = rand(rng, 8, 8), rand(rng, 3, 8, 8)
    offs = np.array([2, 2, 6], np.int32)  # an empty group; rows 6, 7 in no group
    ours = F.grouped_mm(jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16), offs=offs)
    theirs = TF.grouped_mm(torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16(),
                           offs=torch.tensor(offs))
    assert ours.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(ours[:6], np.float32), theirs[:6].float().numpy(),
                               rtol=2e-2, atol=2e-2)
    np.testing.assert_array_equal(np.asarray(ours[6:], np.float32), 0)
    with pytest.raises(NotImplementedError, match="bias"):
        F.grouped_mm(a, b, offs=offs, bias=np.zeros(8, np.float32))


@pytest.mark.parametrize("recipe", ["TensorWise", "RowWise"])
def test_scaled_mm_matches_torch_cpu(recipe, rng):
    a8 = torch.tensor(rand(rng, 16, 32)).to(torch.float8_e4m3fn)
    b8 = torch.tensor(rand(rng, 32, 16)).to(torch.float8_e5m2)
    if recipe == "TensorWise":
        sa, sb = torch.tensor(2.0), torch.tensor(0.25)
    else:
        sa, sb = torch.rand(16, 1) + 0.5, torch.rand(1, 16) + 0.5
    bias = torch.tensor(rand(rng, 16)).bfloat16()
    kind = getattr(TF.ScalingType, recipe)
    theirs = TF.scaled_mm(a8, b8, sa, kind, sb, kind, bias=bias)
    a = jnp.asarray(a8.float().numpy()).astype(jnp.float8_e4m3fn)
    b = jnp.asarray(b8.float().numpy()).astype(jnp.float8_e5m2)
    ours = F.scaled_mm(a, b, sa.numpy(), kind, sb.numpy(), getattr(F.ScalingType, recipe),
                       bias=jnp.asarray(bias.float().numpy(), jnp.bfloat16))
    assert ours.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(ours, np.float32), theirs.float().numpy(), rtol=1e-2, atol=1e-2)


def test_fp8_gpu_only_paths_raise():
    a = jnp.zeros((16, 16), jnp.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="scaled_grouped_mm.*GPU"):
        F.scaled_grouped_mm(a, a[None], 1.0, "TensorWise", 1.0, "TensorWise", offs=np.array([16]))
    with pytest.raises(NotImplementedError, match="BlockWise1x32"):
        F.scaled_mm(a, a, 1.0, F.ScalingType.BlockWise1x32, 1.0, F.ScalingType.BlockWise1x32)
