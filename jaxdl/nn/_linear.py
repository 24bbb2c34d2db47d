"""Linear, Bilinear, Identity; `F.linear`, `F.bilinear` and torch's grouped and scaled (fp8)
matrix products."""

import enum
import functools
import math

import jax
import jax.numpy as jnp

from jaxdl import _random, amp
from jaxdl._convert import as_dtype
from jaxdl._cpu_features import has_avx512
from jaxdl._dtypes import accumulation_dtype
from jaxdl._module import Module, Parameter
from jaxdl._random import KeyStream
from jaxdl.nn.init import bias_uniform, default_weight


def linear(input, weight, bias=None):
    """y = x W^T + b, W of shape (out_features, in_features)."""
    if weight.ndim not in (1, 2) or input.shape[-1:] != weight.shape[-1:]:
        raise ValueError(f"F.linear: input of shape {tuple(input.shape)} does not fit weight of "
                         f"shape {tuple(weight.shape)} (out_features, in_features)")
    input, weight, bias = amp.lower(input, weight, bias)
    if input.ndim >= 2 and weight.ndim == 2:
        return _linear_rows(input, weight, bias)
    out = jnp.matmul(input, weight.T)
    return out if bias is None else out + bias


def _linear_rows(input, weight, bias):
    """(..., in) inputs as one (rows, in) x (out, in)^T product. XLA on CPU then needs
    fewer layout copies in the backward than for the batched matmul of the (..., in)
    array: a GPT training step ran 8% faster (2026-11-30, one core)."""
    rows = input.reshape(-1, input.shape[-1])
    out = _rows_times_weight(rows, weight)
    out = out if bias is None else out + bias
    return out.reshape(input.shape[:-1] + (weight.shape[0],))


# Products with this few rows are bound by reading the weight, and YNNPACK's (XLA's CPU
# matrix library) speed there depends on the operands' form (measured 2026-12-01, one core,
# an AMD EPYC without AVX-512; docs/design.md, "Small-batch linear layers").
_FEW_ROWS = 64


def _materialised(rows):
    """rows, computed once and written out, for loops over a weight that read them.

    XLA fuses a cheap producer into each loop that consumes it, and a loop over a weight
    then runs it again for every weight row: AlexNet's dropout (a hash of the element
    index) was evaluated 4096 times per input element inside the classifier's update
    loop, which took 28 ms against 20 for the next, larger loop over that weight (2 rows,
    224 px, one core). An optimization barrier did not stop it (XLA's CPU pipeline removes
    barriers before it fuses). A sum does: XLA hands sums to YNNPACK, which reads its
    inputs from memory. And x + (-0.0) is x for every x, signed zeros and NaNs included.
    The pair is stacked on a middle axis: YNNPACK's sum over a leading axis of 2 ran 10x
    slower on two cores than on one ((8, 25088) rows, VGG's classifier at 64 px: 0.25 ms on
    one core, 2.9 ms on two; over the middle axis 0.25 and 0.31 ms; docs/design.md, "The
    sum over images")."""
    return jnp.sum(jnp.stack([rows, jnp.full_like(rows, -0.0)], axis=1), axis=1)


# From 2 to `_SUMMED_ROWS` rows against a weight of at least `_SUMMED_WEIGHT` elements, the
# forward is a multiply-and-sum over (rows, out, in) on CPU, which XLA hands to YNNPACK as a
# reduction: it reads the weight once for all rows, where YNNPACK's matrix product first
# copies the weight into its own layout (one core, 2026-12-08, Intel Xeon with AVX-512, ms,
# product -> sum): (4096, 9216) with 2 rows 35 -> 12 (two matrix-vector products, the form
# used before, 19), 8 rows 45 -> 13, 32 rows 58 -> 21, 64 rows 62 -> 38, 128 rows 84 -> 76,
# 256 rows 149 -> 153; (4096, 25088) with 16 rows 100 -> 53; (512, 512) with 32 rows 0.19 ->
# 0.15 and with 128 rows 0.50 -> 0.53. The same sum with the output as (out, rows), the form
# used before for 3 to 32 rows, took 1.7-2x as long as this one; with one row (a leading
# axis of extent 1, "Two XLA CPU pitfalls in the GPT step" in docs/design.md) it took 187
# ms, so one row stays a product.
_SUMMED_ROWS = 32
_SUMMED_WEIGHT = 1 << 16


def _times_transposed(rows, weight):
    """rows W^T: with few rows (`_SUMMED_ROWS`) on CPU a multiply-and-sum, otherwise the
    product."""
    if (2 <= rows.shape[0] <= _SUMMED_ROWS and weight.size >= _SUMMED_WEIGHT
            and jax.default_backend() == "cpu"):
        acc = accumulation_dtype(rows.dtype)
        wide = _materialised(rows.astype(acc))
        return jnp.sum(weight.astype(acc)[None] * wide[:, None], axis=2).astype(rows.dtype)
    return jax.lax.dot_general(rows, weight, (((1,), (1,)), ((), ())))


def _rows_tangent(d_rows, weight):
    """d_rows W^T, written so that its transpose (the input gradient dy W) runs fast.

    Autodiff's dy W contracts the weight's major axis with dy on the left; with few rows
    YNNPACK ran it 2-3x slower than (W^T dy^T)^T with dy^T materialised, which the barrier
    makes this tangent's transpose: (8, 4096) x (4096, 9216) 108 -> 38 ms, 32 rows 231 ->
    96 ms; from 128 rows on the two are even and then autodiff's form wins."""
    if d_rows.shape[0] > _FEW_ROWS:
        return jax.lax.dot_general(d_rows, weight, (((1,), (1,)), ((), ())))
    return jax.lax.optimization_barrier(
        jax.lax.dot_general(weight, d_rows, (((1,), (1,)), ((), ())))).T


@jax.custom_jvp
def _rows_times_weight(rows, weight):
    """rows W^T, with a tangent written so that the backward's products take fast forms:
    the input gradient's (`_rows_tangent`) and the weight gradient's (`_weight_tangent`):
    with few rows a sum of outer products, otherwise a product that takes the narrower of
    (dy, x) as its left operand.

    The weight gradient dy^T x contracts the rows, the major axis of both operands, so
    XLA on CPU runs it in Eigen, whose speed depends on the operands' order: for
    (2048, 512)^T (2048, 128) it took 3.0 ms against 1.9 ms for (2048, 128)^T
    (2048, 512) and a transpose of the (128, 512) result (2026-12-01, one core).
    Autodiff puts dy on the left. Where out_features > in_features the tangent's weight
    term is x (dW^T) instead, whose transpose is x^T dy, transposed back; the barrier
    keeps XLA from folding that transpose into the product, which would swap its
    operands back."""
    return _times_transposed(rows, weight)


@functools.partial(_rows_times_weight.defjvp, symbolic_zeros=True)
def _rows_times_weight_jvp(primals, tangents):
    rows, weight = primals
    d_rows, d_weight = tangents
    out = _times_transposed(rows, weight)
    terms = []
    if not isinstance(d_rows, jax.custom_derivatives.SymbolicZero):
        terms.append(_rows_tangent(d_rows, weight))
    if not isinstance(d_weight, jax.custom_derivatives.SymbolicZero):
        terms.append(_weight_tangent(rows, d_weight))
    return out, functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out)


# With this few rows the weight gradient is a sum of outer products (`_weight_tangent`).
# A (4096, 25088) linear layer's SGD-with-momentum step, one core, product -> outer products
# (2026-12-04, Intel Xeon with AVX-512): 2 rows 222 -> 150 ms, 8 rows 272 -> 214 ms, 16 rows
# 304 -> 290 ms, 24 rows 311 -> 523 ms: the loop's 2 flops per row and element catch up with
# the memory traffic saved at about 16 rows with 512-bit vectors, at half that with 256-bit
# ones. VGG-16's step at 32 px (16 rows, the same Xeon, `ab.py` both orders, 2026-12-07):
# 16 instead of 8 was 2.1-4.2% faster on one core, 2.1-3.4% on two.
_OUTER_ROWS = 16 if has_avx512() else 8


def _weight_tangent(rows, d_weight):
    """x dW^T, written so that its transpose, the weight gradient dy^T x, runs fast.

    With at most `_OUTER_ROWS` rows it is one reduction per row, whose transpose is a sum
    of outer products dy[n] x[n]^T: an elementwise loop, which XLA fuses into the
    optimizer's update of the weight (read and written there anyway), where a matrix
    product writes the whole gradient out for the update to read back. (Accumulated in
    float32 for half-precision inputs, as the product would be.) x is `_materialised` and dy
    passes a barrier, so that their producers (dropout, the ReLU gradient) are not evaluated
    again for every element of the weight: without the barriers VGG-16's step at 32 px (16
    rows) took 1182 ms instead of 904. Otherwise the product,
    with the narrower of (dy, x) as its left operand, as described in
    `_rows_times_weight`."""
    if 0 < rows.shape[0] <= _OUTER_ROWS:  # (no rows: the product, an empty one)
        acc = accumulation_dtype(rows.dtype)
        wide = _materialised(rows.astype(acc))
        per_row = [jnp.sum(d_weight.astype(acc) * row, axis=1) for row in wide]
        return jax.lax.optimization_barrier(jnp.stack(per_row)).astype(rows.dtype)
    if d_weight.shape[0] > d_weight.shape[1]:
        return rows @ jax.lax.optimization_barrier(d_weight.T)
    return jax.lax.dot_general(rows, d_weight, (((1,), (1,)), ((), ())))


def bilinear(input1, input2, weight, bias=None):
    """y_o = x1^T W_o x2 + b_o, W of shape (out_features, in1_features, in2_features)."""
    input1, input2, weight, bias = amp.lower(input1, input2, weight, bias)
    out = jnp.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else out + bias


def _group_sizes(offs):
    """Group sizes from torch's end offsets; rows (or columns) past offs[-1] belong to no group."""
    offs = jnp.asarray(offs).astype(jnp.int32)
    if offs.ndim != 1:
        raise ValueError(f"grouped_mm: offs must be 1-d, got shape {tuple(offs.shape)}")
    return jnp.diff(offs, prepend=0)


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """torch's grouped matrix multiply (Mixture-of-Experts layers), by `jax.lax.ragged_dot`
    (a masked einsum for the ragged contraction, which ragged_dot cannot differentiate):

    - a (M, K), b (G, K, N), offs (G,): rows offs[g-1]:offs[g] of a times b[g] -> (M, N);
    - a (G, M, K), b (K, N), offs (G,): a[g] times columns offs[g-1]:offs[g] of b -> (M, N);
    - a (M, K), b (K, N), offs (G,): the K slices offs[g-1]:offs[g], one product each -> (G, M, N);
    - a (G, M, K), b (G, K, N), no offs: a batched product -> (G, M, N).

    Rows/columns past offs[-1] are zeros here (torch leaves them unspecified). `out_dtype`
    sets the accumulation and output dtype (default: the inputs'). torch refuses `bias`, so do we.
    """
    if bias is not None:
        raise NotImplementedError("grouped_mm(bias=...): torch does not support it yet either")
    out_dtype = as_dtype(out_dtype, mat_a.dtype)
    kinds = (mat_a.ndim, mat_b.ndim)
    if kinds == (3, 3):
        if offs is not None:
            raise ValueError("grouped_mm: offs must be None when both operands are 3-d")
        return jnp.matmul(mat_a, mat_b, preferred_element_type=out_dtype)
    if kinds not in ((2, 3), (3, 2), (2, 2)) or offs is None:
        raise ValueError(f"grouped_mm: expected 2-d/3-d operands with offs for any 2-d one, got "
                         f"shapes {tuple(mat_a.shape)}, {tuple(mat_b.shape)}, offs={offs is not None}")
    if kinds == (2, 3):
        return jax.lax.ragged_dot(mat_a, mat_b, _group_sizes(offs),
                                  preferred_element_type=out_dtype)
    if kinds == (3, 2):  # the transposed problem: b's columns are the ragged rows
        out = jax.lax.ragged_dot(mat_b.T, jnp.swapaxes(mat_a, 1, 2),
                                 _group_sizes(offs), preferred_element_type=out_dtype)
        return out.T
    # ragged contraction: a mask per group over K (ragged_dot_general has no gradient for it)
    ends = jnp.asarray(offs).astype(jnp.int32)
    k = jnp.arange(mat_a.shape[1])
    member = (k >= (ends - _group_sizes(offs))[:, None]) & (k < ends[:, None])
    return jnp.einsum("mk,gk,kn->gmn", mat_a, member.astype(mat_a.dtype), mat_b,
                      preferred_element_type=out_dtype)


class ScalingType(enum.Enum):
    """How `scaled_mm` operands were scaled (torch's names; torch's own enum is accepted too)."""
    TensorWise = 0
    RowWise = 1
    BlockWise1x16 = 2
    BlockWise1x32 = 3
    BlockWise1x128 = 4
    BlockWise128x128 = 5


class SwizzleType(enum.Enum):
    """Layouts of block scales (torch's names); only NO_SWIZZLE is meaningful here."""
    NO_SWIZZLE = 0
    SWIZZLE_32_4_4 = 1


def _single(value, what):
    """torch passes one scale/recipe or a list of one; several mean block-scaled MX formats."""
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise NotImplementedError(f"scaled_mm: several {what} (block-scaled formats) are "
                                      "not supported")
        return value[0]
    return value


def scaled_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a=None,
              swizzle_b=None, bias=None, output_dtype=jnp.bfloat16, contraction_dim=(),
              use_fast_accum: bool = False):
    """(a @ b) * scale_a * scale_b + bias for float8 a (M, K) and b (K, N), accumulated in
    float32, as torch's CPU kernel: the recipes torch runs on CPU, TensorWise (scalar scales)
    and RowWise (scale_a (M, 1), scale_b (1, N)). The block-scaled MX recipes and swizzled
    scales are GPU formats (NotImplementedError)."""
    recipes = [getattr(_single(r, "recipes"), "name", r) for r in (scale_recipe_a, scale_recipe_b)]
    swizzles = [getattr(_single(z, "swizzles"), "name", z) for z in (swizzle_a, swizzle_b)]
    if recipes[0] != recipes[1] or recipes[0] not in ("TensorWise", "RowWise"):
        raise NotImplementedError(f"scaled_mm: scaling {recipes} is not supported; TensorWise "
                                  "and RowWise are (the block-scaled recipes need GPU fp8 support)")
    if any(z not in (None, "NO_SWIZZLE") for z in swizzles) or contraction_dim:
        raise NotImplementedError("scaled_mm: swizzled scales and contraction_dim are not supported")
    fp8 = (jnp.float8_e4m3fn, jnp.float8_e5m2)
    if mat_a.ndim != 2 or mat_b.ndim != 2 or mat_a.dtype not in fp8 or mat_b.dtype not in fp8:
        raise ValueError(f"scaled_mm: expected 2-d float8 operands, got {mat_a.dtype} "
                         f"{tuple(mat_a.shape)} and {mat_b.dtype} {tuple(mat_b.shape)}")
    scale_a, scale_b = (jnp.asarray(_single(x, "scales"), jnp.float32) for x in (scale_a, scale_b))
    want = [(), ()] if recipes[0] == "TensorWise" else [(mat_a.shape[0], 1), (1, mat_b.shape[1])]
    for scale, shape, name in zip((scale_a, scale_b), want, "ab"):
        if scale.size != math.prod(shape) or (shape and scale.shape != shape):
            raise ValueError(f"scaled_mm: {recipes[0]} scale_{name} must have shape {shape or (1,)}, "
                             f"got {tuple(scale.shape)}")
    out = jnp.matmul(mat_a, mat_b, preferred_element_type=jnp.float32)
    out = out * scale_a.reshape(want[0]) * scale_b.reshape(want[1])
    if bias is not None:
        out = out + bias.astype(jnp.float32)
    return out.astype(as_dtype(output_dtype, jnp.bfloat16))


def scaled_grouped_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a=None,
                      swizzle_b=None, bias=None, offs=None, output_dtype=jnp.bfloat16,
                      contraction_dim=(), use_fast_accum: bool = False):
    """Not implemented: torch's fp8 grouped scaled matmul has no CPU kernel (it needs GPU fp8
    hardware support), so there is nothing to check an implementation against."""
    raise NotImplementedError(
        "F.scaled_grouped_mm: the fp8 grouped scaled matmul needs GPU hardware fp8 support (torch "
        "has no CPU kernel for it either); use grouped_mm on dequantized operands")


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x W^T + b with W of shape (out_features, in_features), PyTorch's init."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None, *, key=None):
        super().__init__()
        keys = KeyStream(key)
        self.in_features = in_features
        self.out_features = out_features
        dtype = as_dtype(dtype, jnp.float32)
        self.weight = Parameter(default_weight(keys(), (out_features, in_features)).astype(dtype))
        if bias:
            self.bias = Parameter(bias_uniform(keys(), (out_features,), in_features).astype(dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        self._check_input(input, range(1, 33), -1, self.in_features)
        self._check_floating(input)
        return linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """y = x1^T W x2 + b with W of shape (out, in1, in2); weight and bias ~ U(+-1/sqrt(in1))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None, *, key=None):
        super().__init__()
        keys = KeyStream(key)
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        dtype = as_dtype(dtype, jnp.float32)
        bound = 1.0 / math.sqrt(in1_features)
        shape = (out_features, in1_features, in2_features)
        self.weight = Parameter(_random.uniform(keys(), shape, dtype, -bound, bound))
        if bias:
            self.bias = Parameter(_random.uniform(keys(), (out_features,), dtype, -bound, bound))
        else:
            self.register_parameter("bias", None)

    def forward(self, input1, input2):
        self._check_input(input1, range(1, 33), -1, self.in1_features)
        self._check_input(input2, range(1, 33), -1, self.in2_features)
        self._check_floating(input1)
        self._check_floating(input2)
        if input1.shape[:-1] != input2.shape[:-1]:
            raise self._input_error("inputs with equal leading shapes,", tuple(input1.shape[:-1]),
                                    tuple(input2.shape[:-1]))
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
