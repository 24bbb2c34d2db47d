"""ops.attention against torch's scaled_dot_product_attention: values and gradients.

The XLA path runs every case; the Pallas kernels run in interpret mode (slow on CPU)
on small shapes with small tiles, so several blocks, tails and skipped causal blocks
are exercised. Every kernel configuration is also lowered for "cuda".
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxdl import ops
from jaxdl.ops._attention_pallas import AttentionBlocks
from jaxdl.ops._dispatch import Backend

torch = pytest.importorskip("torch")
sdpa = torch.nn.functional.scaled_dot_product_attention

XLA = Backend("xla")
XLA_TILED = Backend("xla", blocks=(32, 64))  # many tiles and ragged tails on small shapes
PALLAS = Backend("pallas", interpret=True, blocks=AttentionBlocks(16, 32))
PALLAS_DEFAULT = Backend("pallas", interpret=True)  # the GPU heuristic's tiles

TOLERANCE = {jnp.float32: 2e-5, jnp.bfloat16: 3e-2, jnp.float16: 4e-3}


def _inputs(rng, q_shape, k_shape, dtype=jnp.float32, ev=None):
    v_shape = k_shape[:-1] + (ev or k_shape[-1],)
    return [jnp.asarray(rng.normal(size=s), dtype) for s in (q_shape, k_shape, v_shape)]


def _torch_attention(q, k, v, cotangent, mask=None, grad_mask=False, **kwargs):
    """torch's output and gradients (q, k, v[, mask]) in float32 for our (rounded) inputs."""
    def tensor(x, grad=True):
        x = torch.tensor(np.asarray(jnp.asarray(x, jnp.float32)) if x.dtype != bool
                         else np.asarray(x))
        return x.requires_grad_(grad)

    tq, tk, tv = (tensor(x) for x in (q, k, v))
    tm = None if mask is None else tensor(mask, grad_mask)
    out = sdpa(tq, tk, tv, attn_mask=tm, **kwargs)
    out.backward(tensor(cotangent, False))
    grads = [tq.grad, tk.grad, tv.grad] + ([tm.grad] if grad_mask else [])
    return out.detach().numpy(), [g.numpy() for g in grads]


def _close(actual, expected, tol):
    actual = np.asarray(jnp.asarray(actual, jnp.float32))
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


def _check(rng, q_shape, k_shape, impl, dtype=jnp.float32, mask=None, ev=None, **kwargs):
    q, k, v = _inputs(rng, q_shape, k_shape, dtype, ev)
    out_shape = q_shape[:-1] + (v.shape[-1],)
    cotangent = jnp.asarray(rng.normal(size=out_shape), dtype)
    out, vjp = jax.vjp(lambda q, k, v: ops.attention(q, k, v, mask=mask, impl=impl, **kwargs),
                       q, k, v)
    assert out.dtype == dtype and out.shape == out_shape
    expected, expected_grads = _torch_attention(q, k, v, cotangent, mask, **kwargs)
    tol = TOLERANCE[dtype]
    _close(out, expected, tol)
    for grad, expected_grad in zip(vjp(cotangent), expected_grads):
        assert grad.dtype == dtype
        _close(grad, expected_grad, tol * 4)


# ---- lengths, head sizes, causal alignment --------------------------------------------------


@pytest.mark.parametrize("n_q,n_k,e,causal", [
    (1, 1, 8, False), (1, 37, 64, True), (37, 1, 8, True), (37, 129, 128, False),
    (129, 37, 64, True), (129, 1000, 8, True), (1000, 129, 64, False), (1000, 1000, 64, True),
    (4097, 129, 8, True), (129, 4097, 64, False), (4097, 4097, 64, True),
])
def test_xla_matches_torch_for_lengths(rng, n_q, n_k, e, causal):
    _check(rng, (1, 2, n_q, e), (1, 2, n_k, e), XLA, is_causal=causal)


@pytest.mark.parametrize("n_q,n_k,causal", [(37, 129, True), (129, 37, True), (100, 100, False)])
def test_xla_tiles_match_torch(rng, n_q, n_k, causal):
    _check(rng, (2, 3, n_q, 8), (2, 3, n_k, 8), XLA_TILED, is_causal=causal, ev=24)


@pytest.mark.parametrize("n_q,n_k,e,causal", [
    (1, 1, 8, False), (37, 129, 8, True), (129, 37, 24, True), (50, 70, 128, False),
])
def test_pallas_matches_torch(rng, n_q, n_k, e, causal):
    _check(rng, (1, 2, n_q, e), (1, 2, n_k, e), PALLAS, is_causal=causal)


def test_pallas_default_blocks(rng):
    _check(rng, (2, 1, 150, 64), (2, 1, 70, 64), PALLAS_DEFAULT, is_causal=True)


@pytest.mark.parametrize("impl,dtype", [(XLA, jnp.bfloat16), (XLA, jnp.float16),
                                        (XLA_TILED, jnp.bfloat16), (PALLAS, jnp.float16)])
def test_low_precision(rng, impl, dtype):
    _check(rng, (2, 2, 70, 64), (2, 2, 90, 64), impl, dtype, is_causal=True)


def test_unbatched_and_extra_batch_axes(rng):
    _check(rng, (20, 8), (30, 8), XLA, is_causal=True)
    _check(rng, (2, 3, 2, 20, 8), (2, 3, 2, 30, 8), XLA_TILED)


# ---- masks ----------------------------------------------------------------------------------


def _masks(rng, b, h, n_q, n_k):
    bool_mask = rng.random((b, h, n_q, n_k)) > 0.4
    bool_mask[0, 0, 3] = False  # a query that sees no key: zeros, zero gradients
    padding = np.ones((b, 1, 1, n_k), bool)
    padding[1, ..., n_k // 2:] = False
    return {
        "bool": bool_mask,
        "bool_broadcast_LS": rng.random((n_q, n_k)) > 0.3,
        "key_padding": padding,
        "float": rng.normal(size=(b, h, n_q, n_k)).astype(np.float32),
        "float_per_head_with_inf": np.where(rng.random((h, 1, n_k)) > 0.2, 0.5, -np.inf)
        .astype(np.float32),
        "float_rows_all_inf": np.where(np.arange(n_q)[:, None] % 5 == 0, -np.inf, 0.0)
        .astype(np.float32) * np.ones(n_k, np.float32),
    }


@pytest.mark.parametrize("kind", list(_masks(np.random.default_rng(0), 2, 2, 4, 4)))
@pytest.mark.parametrize("impl", [XLA, XLA_TILED, PALLAS], ids=["xla", "xla_tiled", "pallas"])
def test_masks(rng, kind, impl):
    b, h, n_q, n_k = 2, 2, 45, 70
    mask = jnp.asarray(_masks(rng, b, h, n_q, n_k)[kind])
    _check(rng, (b, h, n_q, 16), (b, h, n_k, 16), impl, mask=mask)


@pytest.mark.parametrize("impl", [XLA_TILED, PALLAS], ids=["xla_tiled", "pallas"])
def test_grouped_query_attention(rng, impl):
    mask = jnp.asarray(rng.random((2, 6, 40, 50)) > 0.3)
    _check(rng, (2, 6, 40, 16), (2, 2, 50, 16), impl, mask=mask, enable_gqa=True)
    _check(rng, (2, 6, 40, 16), (2, 3, 50, 16), impl, is_causal=True, enable_gqa=True)


def test_differentiated_float_mask_gets_torchs_gradient(rng):
    q, k, v = _inputs(rng, (2, 2, 30, 8), (2, 2, 40, 8))
    bias = jnp.asarray(rng.normal(size=(2, 1, 30, 40)), jnp.float32)
    cotangent = jnp.asarray(rng.normal(size=(2, 2, 30, 8)), jnp.float32)
    _, vjp = jax.vjp(lambda q, k, v, m: ops.attention(q, k, v, mask=m, impl=XLA_TILED), q, k, v,
                     bias)
    _, expected = _torch_attention(q, k, v, cotangent, bias, grad_mask=True)
    for grad, expected_grad in zip(vjp(cotangent), expected):
        _close(grad, expected_grad, 1e-4)


@pytest.mark.parametrize("mask_kind", ["float", "bool_with_dead_row"])
def test_dense_path_forward_mode_and_second_derivatives(rng, mask_kind):
    # the dense path's tangent is written out (_attention_xla._dense_jvp): forward mode,
    # reverse mode and their second derivatives against finite differences, with GQA,
    # dropout and a mask (differentiated when it is a float one)
    q, k, v = _inputs(rng, (1, 4, 12, 8), (1, 2, 16, 8))
    key = jax.random.key(0)
    if mask_kind == "float":
        mask = jnp.asarray(rng.normal(size=(1, 1, 12, 16)), jnp.float32)
        check_grads(lambda q, k, v, m: ops.attention(q, k, v, mask=m, dropout_p=0.3, key=key,
                                                     enable_gqa=True, impl=XLA),
                    (q, k, v, mask), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2,
                    eps=1e-3)
        return
    mask = jnp.asarray(rng.random((12, 16)) < 0.7).at[3].set(False)  # query 3 sees no key
    f = lambda q, k, v: ops.attention(q, k, v, mask=mask, dropout_p=0.3, key=key,  # noqa: E731
                                      enable_gqa=True, impl=XLA)
    check_grads(f, (q, k, v), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2, eps=1e-3)
    _, tangent = jax.jvp(f, (q, k, v), (q, k, v))
    assert np.isfinite(np.asarray(tangent)).all() and not np.asarray(tangent)[0, :, 3].any()


def test_scale(rng):
    _check(rng, (1, 2, 20, 8), (1, 2, 30, 8), XLA, scale=0.3)


# ---- dropout --------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", [XLA, XLA_TILED, PALLAS], ids=["xla", "xla_tiled", "pallas"])
def test_dropout_statistics(impl):
    # v = identity: the output row is the row of kept, rescaled weights
    n = 64
    q = jnp.zeros((1, 2, n, 16))
    k = jnp.zeros((1, 2, n, 16))
    v = jnp.broadcast_to(jnp.eye(n), (1, 2, n, n))
    p = 0.3
    out = np.asarray(ops.attention(q, k, v, dropout_p=p, key=jax.random.key(1), impl=impl))
    kept = out > 0
    np.testing.assert_allclose(out[kept], 1.0 / n / (1 - p), rtol=1e-5)
    assert abs(kept.mean() - (1 - p)) < 0.02  # 8192 draws: 4.5 standard deviations
    again = ops.attention(q, k, v, dropout_p=p, key=jax.random.key(1), impl=impl)
    np.testing.assert_array_equal(out, again)
    other = np.asarray(ops.attention(q, k, v, dropout_p=p, key=jax.random.key(2), impl=impl))
    assert (kept != (other > 0)).mean() > 0.3  # 2 p (1 - p) = 0.42 expected
    assert (kept[0, 0] != kept[0, 1]).mean() > 0.3  # heads draw independently


def test_dropout_same_mask_on_both_backends(rng):
    q, k, v = _inputs(rng, (2, 3, 40, 16), (2, 3, 50, 16))  # three chunks of two heads
    outs = [ops.attention(q, k, v, dropout_p=0.5, key=jax.random.key(3), is_causal=True,
                          impl=impl) for impl in (XLA, XLA_TILED, PALLAS)]
    for out in outs[1:]:
        _close(out, np.asarray(outs[0]), 1e-5)


@pytest.mark.parametrize("impl", [XLA, XLA_TILED, PALLAS], ids=["xla", "xla_tiled", "pallas"])
def test_dropout_gradients_numerically(rng, impl):
    q, k, v = _inputs(rng, (1, 2, 20, 8), (1, 2, 40, 8))
    key = jax.random.key(0)
    check_grads(lambda q, k, v: ops.attention(q, k, v, dropout_p=0.4, key=key, impl=impl,
                                              is_causal=True),
                (q, k, v), order=1, modes=["rev"], atol=1e-2, rtol=1e-2, eps=1e-3)


# ---- arguments ------------------------------------------------------------------------------


def test_bad_input(rng):
    q, k, v = _inputs(rng, (2, 4, 5, 8), (2, 2, 6, 8))
    with pytest.raises(ValueError, match=r"query heads \(4\) may be a multiple"):
        ops.attention(q, k, v)
    with pytest.raises(ValueError, match="multiple"):
        ops.attention(q, k[:, :1].repeat(3, axis=1), v[:, :1].repeat(3, axis=1),
                      enable_gqa=True)
    with pytest.raises(ValueError, match=r"expected q \(..., L, E\)"):
        ops.attention(q, k[..., :4], v, enable_gqa=True)
    with pytest.raises(ValueError, match="share a dtype"):
        ops.attention(q, k.astype(jnp.bfloat16), v, enable_gqa=True)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 6\) does not broadcast"):
        ops.attention(q, k, v, mask=jnp.ones((3, 6), bool), enable_gqa=True)
    with pytest.raises(ValueError, match="either mask or is_causal"):
        ops.attention(q, k, v, mask=jnp.ones((5, 6), bool), is_causal=True, enable_gqa=True)
    with pytest.raises(ValueError, match="needs a jax random `key`"):
        ops.attention(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(ValueError, match="mask must be bool"):
        ops.attention(q, k, v, mask=jnp.ones((5, 6), jnp.int32), enable_gqa=True)
    with pytest.raises(ValueError, match="impl='triton' is not valid"):
        ops.attention(q, k, v, enable_gqa=True, impl="triton")


# ---- memory ---------------------------------------------------------------------------------


def test_xla_never_materialises_the_scores():
    n = 8192
    x = jax.ShapeDtypeStruct((1, 1, n, 64), jnp.float32)
    step = jax.jit(jax.grad(lambda q, k, v: ops.attention(q, k, v, is_causal=True,
                                                          impl="xla").sum(), argnums=(0, 1, 2)))
    temp = step.lower(x, x, x).compile().memory_analysis().temp_size_in_bytes
    assert temp < n * n * 4 / 16  # one (n, n) float32 score matrix is 256 MiB


# ---- cuda lowering of every kernel configuration ---------------------------------------------


LOWERING_CASES = [  # (q shape, k shape, dtype, mask shape, causal, dropout, blocks)
    ((2, 4, 1000, 64), (2, 4, 1000, 64), jnp.bfloat16, None, True, 0.0, None),
    ((2, 4, 1000, 128), (2, 2, 4097, 128), jnp.float16, None, False, 0.0, None),
    ((1, 4, 37, 8), (1, 4, 129, 8), jnp.float32, (1, 4, 37, 129), False, 0.1, None),
    ((2, 8, 129, 96), (2, 2, 37, 96), jnp.bfloat16, (2, 1, 1, 37), False, 0.0, None),
    ((1, 2, 1, 64), (1, 2, 1, 64), jnp.float32, (1, 37), False, 0.0, None),
    ((1, 2, 100, 64), (1, 2, 300, 64), jnp.bfloat16, None, True, 0.2, AttentionBlocks(16, 32)),
    ((1, 2, 300, 64), (1, 2, 100, 64), jnp.float32, (300, 1), False, 0.0,
     AttentionBlocks(64, 128, 8, 3)),
]


@pytest.mark.parametrize("q_shape,k_shape,dtype,mask_shape,causal,dropout,blocks",
                         LOWERING_CASES)
def test_every_kernel_lowers_for_cuda(q_shape, k_shape, dtype, mask_shape, causal, dropout,
                                      blocks):
    impl = Backend("pallas", interpret=False, blocks=blocks)
    if mask_shape == (1, 37):  # n_q = n_k = 1: a (1, 1) mask
        mask_shape = (1, 1)

    def forward_and_backward(q, k, v, mask, key):
        def loss(q, k, v):
            out = ops.attention(q, k, v, mask=mask, is_causal=causal, dropout_p=dropout,
                                key=key, enable_gqa=True, impl=impl)
            return jnp.sum(out.astype(jnp.float32))
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    shapes = (q_shape, k_shape, k_shape)
    args = [jax.ShapeDtypeStruct(s, dtype) for s in shapes]
    mask = None if mask_shape is None else jax.ShapeDtypeStruct(mask_shape, jnp.bool_)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    lowered = jax.jit(forward_and_backward).trace(*args, mask, key).lower(
        lowering_platforms=("cuda",))
    assert lowered.as_text().count("__gpu$xla.gpu.triton") == 3  # forward, dk/dv, dq


def test_cuda_lowering_enforces_power_of_two_blocks():
    impl = Backend("pallas", blocks=AttentionBlocks(24, 32))
    x = jax.ShapeDtypeStruct((1, 1, 100, 64), jnp.float32)
    with pytest.raises(ValueError, match="power of 2"):
        jax.jit(lambda q: ops.attention(q, q, q, impl=impl)).trace(x).lower(
            lowering_platforms=("cuda",))
