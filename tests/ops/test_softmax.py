"""jaxdl.ops against jax.nn, lax.top_k, optax and PyTorch, for the XLA and Pallas impls.

Pallas runs in interpret mode here (slow on CPU), so kernel tests use few rows; small
block shapes exercise the multi-tile and split-row paths on small arrays. Every kernel
configuration is also lowered for "cuda" (Triton's power-of-two rules apply there).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax
from jax.test_util import check_grads

from jaxdl import ops
from jaxdl.ops._dispatch import Backend
from jaxdl.ops._pallas_core import Blocks

XLA = Backend("xla")


PALLAS = Backend("pallas", interpret=True)  # the GPU heuristic's blocks


PALLAS_TILED = Backend("pallas", interpret=True, blocks=Blocks(2, 128))  # loops over tiles


PALLAS_SPLIT = Backend("pallas", interpret=True, blocks=Blocks(2, 128, splits=3))  # merges


ALL = [XLA, PALLAS, PALLAS_TILED, PALLAS_SPLIT]


IDS = ["xla", "pallas", "pallas_tiled", "pallas_split"]


def _close(actual, expected, tol=2e-6):
    np.testing.assert_allclose(np.asarray(actual, np.float32), np.asarray(expected, np.float32),
                               rtol=tol, atol=tol)


def _normal(rng, shape, scale=3.0, dtype=np.float32):
    return jnp.asarray((rng.normal(size=shape) * scale).astype(dtype))


def _check_family(x, impl, axis=-1, tol=2e-6):
    _close(ops.softmax(x, axis, impl=impl), jax.nn.softmax(x, axis=axis), tol)
    _close(ops.log_softmax(x, axis, impl=impl), jax.nn.log_softmax(x, axis=axis), tol * 4)
    _close(ops.logsumexp(x, axis, impl=impl), jax.nn.logsumexp(x, axis=axis), tol * 4)


def _far_from_seed_rows(rng, n):
    """Rows that defeat the XLA path's one-pass shift (a lower bound of the row max read
    from the first columns and, for cross-entropy, the label's logit) and make it fall
    back to the exact max-shifted passes."""
    x = np.array(_normal(rng, (6, n)))
    x[0, -1] = 300.0  # exp(x - seed) overflows float32
    x[1, :16] = -np.inf  # the seed is -inf
    x[2, :] = -np.inf
    x[3, n // 2] = np.nan
    x[4, -1] = 80.0  # exp(x - seed) is finite but huge: no fallback needed
    return jnp.asarray(x)


def _torch_ce(logits, labels, **kwargs):
    torch = pytest.importorskip("torch")
    t = torch.tensor(np.asarray(logits, np.float32), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(t, torch.tensor(np.asarray(labels, np.int64)), **kwargs)
    loss.sum().backward()
    return loss.detach().numpy(), t.grad.numpy()


CE_CASES = [(XLA, r, s) for r in ("mean", "sum", "none") for s in (0.0, 0.1)] + [
    (PALLAS, "none", 0.0), (PALLAS_TILED, "sum", 0.1), (PALLAS_SPLIT, "mean", 0.1)
]


def _losses(k=3):
    weights = jnp.linspace(-1.0, 1.0, 300)
    top_weights = jnp.arange(1.0, k + 1) * (-1.0) ** jnp.arange(k)  # cotangents of both signs
    return {
        "softmax": lambda x, impl: jnp.sum(ops.softmax(x, impl=impl) * weights),
        "log_softmax": lambda x, impl: jnp.sum(ops.log_softmax(x, impl=impl) * weights),
        "logsumexp": lambda x, impl: jnp.sum(ops.logsumexp(x, impl=impl) ** 2),
        "softmax_topk": lambda x, impl: jnp.sum(ops.softmax_topk(x, k, impl=impl)[0]
                                                * top_weights),
    }


def _reference_losses(k=3):
    weights = jnp.linspace(-1.0, 1.0, 300)
    top_weights = jnp.arange(1.0, k + 1) * (-1.0) ** jnp.arange(k)
    return {
        "softmax": lambda x: jnp.sum(jax.nn.softmax(x) * weights),
        "log_softmax": lambda x: jnp.sum(jax.nn.log_softmax(x) * weights),
        "logsumexp": lambda x: jnp.sum(jax.nn.logsumexp(x, axis=-1) ** 2),
        "softmax_topk": lambda x: jnp.sum(lax.top_k(jax.nn.softmax(x), k)[0]
                                          * top_weights),
    }


OPS = ["softmax", "log_softmax", "logsumexp", "softmax_topk"]


def _losses_of_every_op(x, labels, impl):
    return [
        jnp.sum(ops.softmax(x, impl=impl) ** 2),
        jnp.sum(ops.log_softmax(x, impl=impl) ** 2),
        jnp.sum(ops.logsumexp(x, impl=impl) ** 2),
        jnp.sum(ops.softmax_topk(x, 5, impl=impl)[0] ** 2),
        jnp.sum(ops.softmax_topk(x, 64, impl=impl)[0] ** 2),
        ops.cross_entropy(x, labels, label_smoothing=0.1, impl=impl),
    ]


LOWERING_CASES = [  # (rows, n, dtype, blocks): which launch shape each one takes
    (4000, 64, jnp.float32, None),  # many short rows per program, fused
    (4000, 1000, jnp.bfloat16, None),  # one row per program in one tile, fused
    (1024, 65537, jnp.float32, None),  # many long rows: fused, looping over tiles
    (64, 65537, jnp.float16, None),  # few long rows: split, merged, then emitted
    (1, 2**20 + 3, jnp.float32, None),  # one huge row: split
    (5, 1000, jnp.float32, Blocks(2, 128)),
    (5, 1000, jnp.float32, Blocks(2, 128, splits=3)),
]


@pytest.mark.parametrize("n", [1, 2, 3, 127, 129, 1000, 4097, 65537])
def test_xla_matches_jax_nn_for_row_lengths(rng, n):
    _check_family(_normal(rng, (2, 3, n)), XLA)


@pytest.mark.parametrize("n", [1, 2, 3, 127, 129, 1000, 4097])
def test_pallas_matches_jax_nn_for_row_lengths(rng, n):
    _check_family(_normal(rng, (3, n)), PALLAS)


@pytest.mark.parametrize("impl", [PALLAS_TILED, PALLAS_SPLIT], ids=IDS[2:])
def test_pallas_tiles_and_splits(rng, impl):
    _check_family(_normal(rng, (5, 1000)), impl)


def test_pallas_long_rows_split_by_default(rng):
    _check_family(_normal(rng, (2, 65537)), PALLAS)


@pytest.mark.parametrize("impl", [XLA, PALLAS], ids=IDS[:2])
def test_row_over_a_million(rng, impl):
    x = _normal(rng, (1, 2**20 + 3))
    _check_family(x, impl, tol=1e-6)
    values, indices = ops.softmax_topk(x, 5, impl=impl)
    expected_values, expected_indices = lax.top_k(jax.nn.softmax(x), 5)
    _close(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("impl", [XLA, PALLAS_SPLIT], ids=["xla", "pallas_split"])
def test_any_leading_shape_and_axis(rng, impl):
    x = _normal(rng, (2, 200, 3))
    _check_family(x, impl, axis=1)
    _check_family(x[0, :, 0], impl, axis=0)


@pytest.mark.parametrize(
    "impl,dtype", [(XLA, jnp.bfloat16), (XLA, jnp.float16), (PALLAS_SPLIT, jnp.bfloat16)]
)
def test_low_precision_accumulates_in_float32(rng, impl, dtype):
    x = _normal(rng, (3, 1000)).astype(dtype)
    x32 = x.astype(jnp.float32)
    for op, ref in [(ops.softmax, jax.nn.softmax), (ops.log_softmax, jax.nn.log_softmax)]:
        y = op(x, impl=impl)
        assert y.dtype == dtype
        # exactly the float32 result rounded once to the input dtype
        _close(y, ref(x32).astype(dtype), 0)
    lse = ops.logsumexp(x, impl=impl)
    assert lse.dtype == dtype
    _close(lse, jax.nn.logsumexp(x32, axis=-1).astype(dtype), 0)


@pytest.mark.parametrize("impl", [XLA, PALLAS_TILED, PALLAS_SPLIT], ids=["xla", "tiled", "split"])
def test_neg_inf_entries_and_rows_as_jax_nn(rng, impl):
    x = np.array(_normal(rng, (4, 300)))
    x[0, ::3] = -np.inf
    x[1, :] = -np.inf
    x[2, :-1] = -np.inf  # a single finite entry, at the end of the last tile
    x = jnp.asarray(x)
    _close(ops.softmax(x, impl=impl), jax.nn.softmax(x))
    _close(ops.log_softmax(x, impl=impl), jax.nn.log_softmax(x))
    _close(ops.logsumexp(x, impl=impl), jax.nn.logsumexp(x, axis=-1))
    values, indices = ops.softmax_topk(x, 3, impl=impl)
    expected_values, expected_indices = lax.top_k(jax.nn.softmax(x), 3)
    _close(values, expected_values)
    finite_rows = np.array([0, 2, 3])  # a row of -inf has nan probabilities
    np.testing.assert_array_equal(np.asarray(indices)[finite_rows],
                                  np.asarray(expected_indices)[finite_rows])


@pytest.mark.parametrize("impl", [XLA, PALLAS_SPLIT], ids=["xla", "pallas_split"])
def test_large_magnitudes(rng, impl):
    x = _normal(rng, (3, 500), scale=1e4)
    _check_family(x, impl, tol=1e-5)


@pytest.mark.parametrize("n", [300, 9000])  # 9000: softmax takes its one-pass path too
def test_xla_one_pass_shift_falls_back_exactly(rng, n):
    x = _far_from_seed_rows(rng, n)
    _close(ops.softmax(x, impl=XLA), jax.nn.softmax(x))
    _close(ops.log_softmax(x, impl=XLA), jax.nn.log_softmax(x), 1e-5)
    _close(ops.logsumexp(x, impl=XLA), jax.nn.logsumexp(x, axis=-1), 1e-5)
    fast = x[4:]  # rows that keep the one-pass result
    _close(ops.logsumexp(fast, impl=XLA), jax.nn.logsumexp(fast, axis=-1), 1e-5)
    _close(ops.log_softmax(fast, impl=XLA), jax.nn.log_softmax(fast), 1e-5)
    _close(ops.softmax(fast, impl=XLA), jax.nn.softmax(fast))
    labels = jnp.asarray([0, 5, 7, 1, 2, n - 1])
    _close(ops.cross_entropy(x, labels, reduction="none", impl=XLA),
           optax.softmax_cross_entropy_with_integer_labels(x, labels), 1e-5)


def test_xla_one_pass_under_vmap_and_jit(rng):
    x = _far_from_seed_rows(rng, 300)[None].repeat(2, axis=0)
    _close(jax.vmap(lambda r: ops.logsumexp(r, impl=XLA))(x), jax.nn.logsumexp(x, axis=-1), 1e-5)
    _close(jax.vmap(lambda r: ops.softmax(r, impl=XLA))(x), jax.nn.softmax(x))
    # labels out of range are only caught when concrete; under jit they give nan, as optax
    labels = jnp.asarray([0, 300, 2, 1, 7, 9])
    loss = jax.jit(lambda x, y: ops.cross_entropy(x, y, reduction="none", impl=XLA))(x[0], labels)
    _close(loss, optax.softmax_cross_entropy_with_integer_labels(x[0], labels), 1e-5)


@pytest.mark.parametrize(
    "impl,k", [(XLA, 1), (XLA, 5), (XLA, 64), (PALLAS, 1), (PALLAS_SPLIT, 5), (PALLAS_TILED, 64)]
)
def test_softmax_topk_matches_lax_top_k_with_ties(rng, impl, k):
    # few distinct values: many ties, which lax.top_k orders lowest index first
    x = jnp.asarray(rng.integers(0, 6, size=(3, 4097)).astype(np.float32))
    if impl is not XLA:
        x = x[:, :700]
    values, indices = ops.softmax_topk(x, k, impl=impl)
    expected_values, expected_indices = lax.top_k(jax.nn.softmax(x), k)
    _close(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


@pytest.mark.parametrize("impl", [XLA, PALLAS_TILED], ids=["xla", "pallas_tiled"])
def test_softmax_topk_axis_and_dtype(rng, impl):
    x = _normal(rng, (2, 300, 3)).astype(jnp.bfloat16)
    values, indices = ops.softmax_topk(x, 4, axis=1, impl=impl)
    assert values.shape == indices.shape == (2, 4, 3) and values.dtype == jnp.bfloat16
    p = jnp.moveaxis(jax.nn.softmax(x.astype(jnp.float32), axis=1), 1, -1)
    expected_values, expected_indices = lax.top_k(p, 4)
    _close(jnp.moveaxis(values, 1, -1), expected_values.astype(jnp.bfloat16), 0)
    np.testing.assert_array_equal(jnp.moveaxis(indices, 1, -1), expected_indices)


def test_softmax_topk_bad_k(rng):
    x = _normal(rng, (2, 7))
    for k in (0, 8, 2.0):
        with pytest.raises(ValueError, match=rf"k={k!r}, n=7"):
            ops.softmax_topk(x, k)


@pytest.mark.parametrize("impl,reduction,smoothing", CE_CASES)
def test_cross_entropy_matches_torch(rng, impl, reduction, smoothing):
    logits = _normal(rng, (6, 300))
    labels = jnp.asarray(rng.integers(0, 300, size=6)).at[2].set(-100).at[4].set(-100)
    kwargs = dict(label_smoothing=smoothing, reduction=reduction)
    loss, grad = jax.value_and_grad(lambda x: ops.cross_entropy(x, labels, impl=impl,
                                                                **kwargs).sum())(logits)
    expected_loss, expected_grad = _torch_ce(logits, labels, **kwargs)
    _close(loss, np.sum(expected_loss), 1e-5)
    _close(grad, expected_grad, 1e-6)
    if reduction == "none":
        _close(ops.cross_entropy(logits, labels, impl=impl, **kwargs), expected_loss, 1e-5)


@pytest.mark.parametrize("impl", [XLA, PALLAS_SPLIT], ids=["xla", "pallas_split"])
def test_cross_entropy_matches_optax(rng, impl):
    logits = _normal(rng, (2, 3, 1000))
    labels = jnp.asarray(rng.integers(0, 1000, size=(2, 3)))
    expected = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    _close(ops.cross_entropy(logits, labels, reduction="none", impl=impl), expected, 1e-5)
    moved = jnp.moveaxis(logits, -1, 1)
    _close(ops.cross_entropy(moved, labels, axis=1, reduction="none", impl=impl), expected, 1e-5)


def test_cross_entropy_bad_input(rng):
    logits = _normal(rng, (4, 10))
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\).*got \(3,\)"):
        ops.cross_entropy(logits, jnp.zeros(3, jnp.int32))
    with pytest.raises(ValueError, match=r"in \[0, 10\).*\[10\]"):
        ops.cross_entropy(logits, jnp.asarray([0, 10, -100, 1]))
    with pytest.raises(ValueError, match="labels must be integers"):
        ops.cross_entropy(logits, jnp.zeros(4))
    with pytest.raises(ValueError, match="logits must be a floating array, got dtype int32"):
        ops.cross_entropy(jnp.zeros((4, 10), jnp.int32), jnp.zeros(4, jnp.int32))
    with pytest.raises(ValueError, match="reduction='avg'"):
        ops.cross_entropy(logits, jnp.zeros(4, jnp.int32), reduction="avg")


def test_bad_input():
    with pytest.raises(ValueError, match="x must be a floating array, got dtype int32"):
        ops.softmax(jnp.arange(3))
    with pytest.raises(ValueError, match="impl='cuda' is not valid"):
        ops.softmax(jnp.ones(3), impl="cuda")
    with pytest.raises(ValueError, match="axis=2 is out of range for an array of rank 2"):
        ops.log_softmax(jnp.ones((2, 3)), axis=2)


def test_auto_is_xla_on_cpu():
    from jaxdl.ops._dispatch import resolve

    assert resolve("auto") == XLA
    assert resolve("pallas") == PALLAS


@pytest.mark.parametrize(
    "impl,op", [(XLA, op) for op in OPS] + [(PALLAS_SPLIT, op) for op in OPS]
    + [(PALLAS, "softmax"), (PALLAS, "log_softmax")]
)
def test_gradients_match_jax_nn(rng, impl, op):
    x = _normal(rng, (3, 300), scale=2.0)
    _close(jax.grad(_losses()[op])(x, impl), jax.grad(_reference_losses()[op])(x), 2e-6)


@pytest.mark.parametrize("impl", [XLA, PALLAS_TILED], ids=["xla", "pallas_tiled"])
def test_check_grads_numerically(rng, impl):
    # distinct logits 0.02 apart: a finite-difference step cannot reorder the top k
    x = jnp.asarray(np.stack([rng.permutation(np.linspace(-3, 3, 300)) for _ in range(2)]),
                    jnp.float32)
    for loss in _losses().values():
        check_grads(lambda x, loss=loss: loss(x, impl), (x,), order=1, modes=["rev"],
                    atol=2e-2, rtol=2e-2, eps=2e-3)


@pytest.mark.parametrize("rows,n,dtype,blocks", LOWERING_CASES)
def test_every_kernel_lowers_for_cuda(rows, n, dtype, blocks):
    impl = Backend("pallas", interpret=False, blocks=blocks)

    def forward_and_backward(x, labels):
        n_ops = len(_losses_of_every_op(x, labels, impl))
        return [jax.grad(lambda x, i=i: _losses_of_every_op(x, labels, impl)[i])(x)
                for i in range(n_ops)]

    x = jax.ShapeDtypeStruct((rows, n), dtype)
    labels = jax.ShapeDtypeStruct((rows,), jnp.int32)
    lowered = jax.jit(forward_and_backward).trace(x, labels).lower(lowering_platforms=("cuda",))
    # 6 forward + 6 backward passes; softmax/log_softmax use one kernel per pass when fused
    assert lowered.as_text().count("__gpu$xla.gpu.triton") >= 12


def test_cuda_lowering_enforces_power_of_two_blocks():
    impl = Backend("pallas", blocks=Blocks(3, 100))
    x = jax.ShapeDtypeStruct((6, 1000), jnp.float32)
    with pytest.raises(ValueError, match="power of 2"):
        jax.jit(lambda x: ops.softmax(x, impl=impl)).trace(x).lower(lowering_platforms=("cuda",))


def test_functional_routes_supported_cases_through_ops(rng):
    import jaxdl.nn.functional as F

    logits = _normal(rng, (4, 3, 5))  # classes on axis 1, as PyTorch
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):  # torch's error
        F.cross_entropy(logits, jnp.asarray([[0, 1, 2, 3, 9]] * 4))  # class 3 of 3
    weighted = F.cross_entropy(logits, jnp.zeros((4, 5), jnp.int32), weight=jnp.ones(3))
    _close(weighted, F.cross_entropy(logits, jnp.zeros((4, 5), jnp.int32)), 1e-6)
    _close(F.softmax(logits, dim=1), jax.nn.softmax(logits, axis=1))
    _close(F.log_softmax(logits, dim=1), jax.nn.log_softmax(logits, axis=1))
