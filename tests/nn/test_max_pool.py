"""Max pooling's gradient written per stride phase (jaxdl/nn/_max_pool.py): gradients,
forward-mode tangents and second derivatives against PyTorch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxdl.nn.functional as F
from jaxdl.nn import _max_pool

CASES = [  # (input shape, max_pool kwargs)
    ((2, 3, 9, 11), dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 10, 10), dict(kernel_size=2)),
    ((1, 2, 11, 7), dict(kernel_size=3, stride=2)),
    ((1, 2, 13, 12), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((2, 2, 8, 9), dict(kernel_size=3, stride=1, padding=1)),
    ((1, 3, 14, 13), dict(kernel_size=(3, 4), stride=3, padding=(1, 2), ceil_mode=True)),
    ((1, 2, 12, 11), dict(kernel_size=3, stride=2, padding=1, dilation=2)),
    ((1, 2, 10, 9), dict(kernel_size=(2, 3), stride=(1, 3), dilation=(3, 1))),
    ((3, 9, 9), dict(kernel_size=2, stride=3)),  # unbatched, stride above the kernel
    # Windows that tile the input (stride == kernel; _tiled_scatter): a floor-mode tail the
    # windows leave out, and padding with a ceil-mode window past the end.
    ((2, 3, 9, 7), dict(kernel_size=2)),
    ((1, 2, 11, 10), dict(kernel_size=(3, 2), padding=1, ceil_mode=True)),
]


def _input(rng, shape, nan=False):
    """Rounded normals, so many windows hold their maximum twice (torch sends the gradient
    to the first one in window order); optionally a few NaNs, which always win."""
    x = np.round(rng.standard_normal(shape)).astype(np.float32)
    if nan:
        x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = np.nan
    return x


def _torch_grad(x, ct, kwargs, dtype=torch.float32):
    xt = torch.tensor(x, dtype=dtype, requires_grad=True)
    out = TF.max_pool2d(xt, **kwargs)
    (grad,) = torch.autograd.grad(out, xt, torch.tensor(ct, dtype=dtype))
    return out.detach().float().numpy(), grad.float().numpy()


@pytest.mark.parametrize("shape, kwargs", CASES)
@pytest.mark.parametrize("nan", [False, True])
def test_gradient_matches_torch(shape, kwargs, nan, rng):
    x = _input(rng, shape, nan)
    ct = rng.standard_normal(TF.max_pool2d(torch.tensor(x), **kwargs).shape).astype(np.float32)
    want_out, want_grad = _torch_grad(x, ct, kwargs)
    out, vjp = jax.vjp(lambda a: F.max_pool2d(a, **kwargs), jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), want_out)
    np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(ct))[0]), want_grad, rtol=1e-6,
                               atol=1e-6)


def test_bf16_gradient_under_jit_matches_torch(rng):
    kwargs = dict(kernel_size=3, stride=2, padding=1)
    x = _input(rng, (2, 4, 9, 10))
    ct = np.round(rng.standard_normal((2, 4, 5, 5)) * 4) / 4
    want_out, want_grad = _torch_grad(x, ct, kwargs, torch.bfloat16)
    grad = jax.jit(jax.grad(lambda a, c: (F.max_pool2d(a, **kwargs) * c).sum()))(
        jnp.asarray(x, jnp.bfloat16), jnp.asarray(ct, jnp.bfloat16))
    assert grad.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(grad, np.float32), want_grad)


def test_bf16_window_with_more_offsets_than_bf16_holds_matches_torch(rng):
    # 17x17 = 289 offsets (dilated: undilated windows over 64 offsets go to reduce_window):
    # more than bfloat16's 8 significant bits count exactly, so the winning offset is
    # recorded as an integer (_offset_type). Rows that grow downwards put each window's
    # maximum in its last rows, past offset 256, where bfloat16 rounds odd integers away.
    kwargs = dict(kernel_size=17, stride=5, padding=8, dilation=2)
    x = _input(rng, (1, 2, 40, 38)) + 8 * np.arange(40, dtype=np.float32)[:, None]
    out_shape = TF.max_pool2d(torch.tensor(x), **kwargs).shape
    ct = np.round(rng.standard_normal(out_shape) * 4) / 4
    want_out, want_grad = _torch_grad(x, ct, kwargs, torch.bfloat16)
    grad = jax.grad(lambda a, c: (F.max_pool2d(a, **kwargs) * c).sum())(
        jnp.asarray(x, jnp.bfloat16), jnp.asarray(ct, jnp.bfloat16))
    np.testing.assert_array_equal(np.asarray(grad, np.float32), want_grad)


@pytest.mark.parametrize("dtype, offsets, want", [
    (jnp.float32, 9, jnp.float32), (jnp.bfloat16, 256, jnp.bfloat16),
    (jnp.bfloat16, 289, jnp.int32), (jnp.float16, 2049, jnp.int32), (jnp.int32, 9, jnp.int8)])
def test_offset_type_is_x_own_float_type_only_where_it_counts_every_offset(dtype, offsets, want):
    assert _max_pool._offset_type(jnp.dtype(dtype), offsets) == want


@pytest.mark.parametrize("shape, kwargs", [CASES[0], CASES[1], CASES[3], CASES[6], CASES[-1]])
def test_forward_mode_and_second_derivatives_match_torch(shape, kwargs, rng):
    x = rng.standard_normal(shape).astype(np.float32)  # no ties: a smooth neighbourhood
    tangent = rng.standard_normal(shape).astype(np.float32)
    _, want_tangent = torch.func.jvp(lambda a: TF.max_pool2d(a, **kwargs),
                                     (torch.tensor(x),), (torch.tensor(tangent),))
    _, got_tangent = jax.jvp(lambda a: F.max_pool2d(a, **kwargs), (jnp.asarray(x),),
                             (jnp.asarray(tangent),))
    np.testing.assert_array_equal(np.asarray(got_tangent), want_tangent.numpy())

    # d/dx of |grad of sum(pool(x)^3)|^2: the second derivative goes through the pool twice.
    def torch_loss(a):
        (g,) = torch.autograd.grad((TF.max_pool2d(a, **kwargs) ** 3).sum(), a,
                                   create_graph=True)
        return (g ** 2).sum()

    xt = torch.tensor(x, requires_grad=True)
    (want,) = torch.autograd.grad(torch_loss(xt), xt)
    got = jax.grad(lambda a: (jax.grad(
        lambda b: (F.max_pool2d(b, **kwargs) ** 3).sum())(a) ** 2).sum())(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, shape, kwargs", [
    (1, (2, 3, 13), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (3, (1, 2, 7, 6, 9), dict(kernel_size=(3, 2, 3), stride=2, padding=1)),
])
def test_1d_and_3d_gradients_match_torch(n, shape, kwargs, rng):
    x = _input(rng, shape)
    ours, theirs = getattr(F, f"max_pool{n}d"), getattr(TF, f"max_pool{n}d")
    xt = torch.tensor(x, requires_grad=True)
    out = theirs(xt, **kwargs)
    ct = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    (want,) = torch.autograd.grad(out, xt, torch.tensor(ct))
    _, vjp = jax.vjp(lambda a: ours(a, **kwargs), jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(ct))[0]), want.numpy(), rtol=1e-6,
                               atol=1e-6)
