"""F.scaled_dot_product_attention and nn.MultiheadAttention against PyTorch."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_twin import assert_close, bool_mask, check_twin, rand

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn

# Without dropout, train and eval compute the same thing: one mode, compiled (faster than eager).
twin = functools.partial(check_twin, modes=("train",), jit=True)


class _SDPA(torch.nn.Module):
    """Lets the twin harness differentiate q, k, v of the functional op."""

    def __init__(self, fn, **kwargs):
        super().__init__()
        self.fn, self.kwargs = fn, kwargs

    def forward(self, q, k, v, *mask):
        return self.fn(q, k, v, *mask, **self.kwargs)


class _JSDPA(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v, *mask):
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kwargs)


def _mha_pair(*args, **kwargs):
    torch.manual_seed(0)
    t = torch.nn.MultiheadAttention(*args, **kwargs)
    j = nn.MultiheadAttention(*args, **kwargs)
    assert list(j.state_dict()) == list(t.state_dict())
    for name, value in j.state_dict().items():
        assert value.shape == tuple(t.state_dict()[name].shape), name
    j.load_state_dict(t.state_dict())
    return t, j


@pytest.mark.parametrize("mask_kind", [None, "bool", "float", "causal", "scale"])
def test_sdpa_matches_torch(mask_kind, rng):
    q, k, v = rand(rng, 2, 3, 5, 4), rand(rng, 2, 3, 7, 4), rand(rng, 2, 3, 7, 6)
    kwargs, masks = {}, []
    if mask_kind == "bool":  # True = may attend; row 1 fully masked -> zeros as in torch
        mask = ~bool_mask(rng, 5, 7)
        mask[1] = False
        masks = [mask]
    elif mask_kind == "float":
        masks = [rand(rng, 2, 1, 5, 7)]
    elif mask_kind == "causal":
        kwargs = {"is_causal": True}
    elif mask_kind == "scale":
        kwargs = {"scale": 0.3}
    # the harness differentiates float inputs (q, k, v, a float mask) and passes bool ones
    twin(_SDPA(TF.scaled_dot_product_attention, **kwargs), _JSDPA(**kwargs), [q, k, v, *masks])


def test_sdpa_gqa_and_errors(rng):
    q, k, v = rand(rng, 1, 4, 3, 8), rand(rng, 1, 2, 5, 8), rand(rng, 1, 2, 5, 8)
    expected = TF.scaled_dot_product_attention(*map(torch.tensor, (q, k, v)), enable_gqa=True)
    assert_close(F.scaled_dot_product_attention(q, k, v, enable_gqa=True), expected, "gqa")
    with pytest.raises(ValueError, match="attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=jnp.ones((3, 3), bool), is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(2, 3\) does not broadcast"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=jnp.ones((2, 3), bool))


def test_sdpa_dropout_needs_key_under_trace_and_scales_kept_weights(rng):
    q = jnp.asarray(rand(rng, 1, 1, 4, 8))
    v = jnp.eye(4)[None, None]  # output rows are the (dropped-out) attention weights
    with pytest.raises(ValueError, match="needs key"):
        jax.jit(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5))(q)
    dense = F.scaled_dot_product_attention(q, q, v)
    dropped = F.scaled_dot_product_attention(q, q, v, dropout_p=0.5,
                                             dropout_key=jax.random.key(0))
    kept = np.asarray(dropped) != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(np.asarray(dropped)[kept], 2 * np.asarray(dense)[kept], rtol=1e-5)


def test_sdpa_and_the_fused_mha_path_never_write_the_scores():
    n, e = 4096, 64  # a float32 (n, n) score matrix is 64 MiB
    x = jax.ShapeDtypeStruct((1, 1, n, e), jnp.float32)
    sdpa = jax.jit(jax.grad(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True)
                            .sum()))
    # O(L) only (block-major q, k, v, dO, the backward's transposed q and dO, the dq
    # accumulator: 8.2 MiB for SDPA, 10.5 MiB with MHA's projections): a quarter of one
    # score matrix bounds it
    bound = n * n * 4 / 4
    assert sdpa.lower(x).compile().memory_analysis().temp_size_in_bytes < bound
    weights = (jnp.ones((3 * e, e)) / e, jnp.zeros(3 * e), jnp.ones((e, e)) / e, jnp.zeros(e))
    causal = ~jnp.tril(jnp.ones((n, n), bool))

    def mha(x):  # the transformer layers' call: no weights, the causal hint
        out = F.multi_head_attention_forward(x, x, x, e, 1, weights[0], weights[1], None, None,
                                             False, 0.0, weights[2], weights[3],
                                             need_weights=False, attn_mask=causal,
                                             is_causal=True)[0]
        return out.sum()

    x = jax.ShapeDtypeStruct((n, 1, e), jnp.float32)
    temp = jax.jit(jax.grad(mha)).lower(x).compile().memory_analysis().temp_size_in_bytes
    assert temp < bound


@pytest.mark.parametrize("options", [
    {},
    {"batch_first": True, "bias": False},
    {"kdim": 3, "vdim": 5},
    {"add_bias_kv": True, "add_zero_attn": True},
])
@pytest.mark.parametrize("need_weights, average", [(True, True), (True, False), (False, True)])
def test_mha_matches_torch(options, need_weights, average, rng):
    t, j = _mha_pair(8, 2, **options)
    n_first = options.get("batch_first", False)
    q_shape = (2, 4, 8) if n_first else (4, 2, 8)
    kv = (2, 6) if n_first else (6, 2)
    inputs = [rand(rng, *q_shape), rand(rng, *kv, options.get("kdim", 8)),
              rand(rng, *kv, options.get("vdim", 8))]
    twin(t, j, inputs, kwargs={"need_weights": need_weights, "average_attn_weights": average})


@pytest.mark.parametrize("mask_dtype", ["bool", "float"])
def test_mha_masks_match_torch(mask_dtype, rng):
    t, j = _mha_pair(8, 2, batch_first=True)
    attn_mask = bool_mask(rng, 4, 6)
    padding = bool_mask(rng, 3, 6)
    if mask_dtype == "float":
        attn_mask, padding = rand(rng, 4, 6), np.where(padding, -np.inf, 0.0).astype(np.float32)
    per_head = np.repeat(attn_mask[None], 3 * 2, axis=0)  # the (N * heads, L, S) form
    x, mem = rand(rng, 3, 4, 8), rand(rng, 3, 6, 8)
    for mask in (attn_mask, per_head):
        for need_weights in (True, False):
            kwargs = {"attn_mask": mask, "key_padding_mask": padding,
                      "need_weights": need_weights}
            out_t, w_t = t(torch.tensor(x), torch.tensor(mem), torch.tensor(mem),
                           **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                              for k, v in kwargs.items()})
            out_j, w_j = j(x, mem, mem, **kwargs)
            assert_close(out_j, out_t, f"output, need_weights={need_weights}")
            if need_weights:
                assert_close(w_j, w_t, "weights")


def test_mha_mask_gradients_and_unbatched(rng):
    t, j = _mha_pair(6, 3, add_bias_kv=True)
    mask = bool_mask(rng, 4, 4)

    class Masked(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, x, x, attn_mask=torch.tensor(mask))

    class JMasked(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, x, x, attn_mask=jnp.asarray(mask))

    twin(Masked(t), JMasked(j), [rand(rng, 4, 2, 6)])
    twin(Masked(t), JMasked(j), [rand(rng, 4, 6)])  # unbatched (L, E)


def test_mha_fully_masked_query_like_torch(rng):
    t, j = _mha_pair(4, 2)
    x = rand(rng, 3, 1, 4)
    padding = np.ones((1, 3), bool)
    out_t, _ = t(*[torch.tensor(x)] * 3, key_padding_mask=torch.tensor(padding))
    out_j, _ = j(x, x, x, key_padding_mask=padding)
    assert np.isnan(out_t.detach().numpy()).all() and np.isnan(np.asarray(out_j)).all()
    out_t, _ = t(*[torch.tensor(x)] * 3, key_padding_mask=torch.tensor(padding),
                 need_weights=False)
    out_j, _ = j(x, x, x, key_padding_mask=padding, need_weights=False)
    assert_close(out_j, out_t, "fused path: fully masked queries give out_proj(0)")


def test_mha_init_like_torch():
    dl.manual_seed(0)
    j = nn.MultiheadAttention(64, 4)
    bound = np.sqrt(6 / (64 + 3 * 64))  # xavier_uniform_ on the packed (3E, E) weight
    w = np.asarray(j.in_proj_weight)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert not np.any(j.in_proj_bias) and not np.any(j.out_proj.bias)


def test_mha_dropout_train_only(rng):
    j = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = jnp.asarray(rand(rng, 4, 2, 8))
    step = dl.jit(lambda m, x: m(x, x, x)[1])
    first, second = np.asarray(step(j, x)), np.asarray(step(j, x))
    assert not np.allclose(first, second)  # a fresh key per compiled call
    j.eval()
    w_eval = np.asarray(j(x, x, x)[1])
    np.testing.assert_allclose(w_eval.sum(-1), 1.0, rtol=1e-5)


def test_mha_bad_inputs_name_module():
    model = nn.ModuleDict({"attn": nn.MultiheadAttention(8, 2, batch_first=True)})
    attn = model["attn"]
    x = jnp.zeros((2, 4, 8))
    with pytest.raises(ValueError, match=r"attn \(MultiheadAttention\).*size 8.*\(2, 4, 7\)"
                                         r".*argument query"):
        attn(jnp.zeros((2, 4, 7)), x, x)
    with pytest.raises(ValueError, match=r"rank 3-d.*\(4, 8\).*argument value"):
        attn(x, x, jnp.zeros((4, 8)))
    with pytest.raises(ValueError, match=r"attn \(MultiheadAttention\).*attn_mask of shape "
                                         r"\(4, 4\) or \(4, 4, 4\), got \(4, 5\)"):
        attn(x, x, x, attn_mask=jnp.zeros((4, 5), bool))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 4\), got \(2, 3\)"):
        attn(x, x, x, key_padding_mask=jnp.zeros((2, 3), bool))
    with pytest.raises(ValueError, match="is_causal"):
        attn(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)


def test_attention_under_autocast_runs_matmuls_in_bfloat16(rng):
    q, k, v = (jnp.asarray(rand(rng, 2, 2, 5, 8)) for _ in range(3))
    reference = F.scaled_dot_product_attention(q, k, v)
    with dl.amp.autocast(dtype=jnp.bfloat16):
        low = F.scaled_dot_product_attention(q, k, v)
    assert low.dtype == jnp.bfloat16 and reference.dtype == jnp.float32
    assert_close(low.astype(jnp.float32), reference, "bf16 attention", tol=3e-2)
    mha = nn.MultiheadAttention(8, 2)
    x = q[0]
    with dl.amp.autocast(dtype=jnp.bfloat16):
        out, weights = mha(x, x, x)
    assert out.dtype == jnp.bfloat16 and weights.dtype == jnp.float32  # softmax in float32
    assert_close(out.astype(jnp.float32), mha(x, x, x)[0], "bf16 MHA", tol=3e-2)
