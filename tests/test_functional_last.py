"""The last torch.nn.functional names against torch: adaptive max pools with indices, fractional
max pools, native_channel_shuffle, conv_tbc, linear_cross_entropy, grouped_mm, scaled_mm."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from functional_oracle import check_functional
from torch_twin import rand

import jaxdl.nn.functional as F
from jaxdl import interop, nn


def _ties(rng, *shape):
    """Rounded normals: many windows hold their maximum twice, so the tie rule matters."""
    return np.round(rand(rng, *shape)).astype(np.float32)


def _same_indices(ours, theirs):
    np.testing.assert_array_equal(np.asarray(ours), theirs.numpy())
    assert ours.dtype == np.int32


@pytest.mark.parametrize("n, shape, size", [
    (1, (2, 3, 11), 4), (1, (3, 7), 7), (2, (2, 3, 7, 10), (3, 4)), (2, (3, 5, 6), (None, 4)),
    (2, (1, 2, 4, 4), 6), (3, (1, 2, 5, 4, 7), (2, 3, 3)),
])
def test_adaptive_max_pool_indices_and_gradient_on_ties(n, shape, size):
    x = _ties(np.random.default_rng(n), *shape)
    kwargs = dict(output_size=size, return_indices=True)
    name = f"adaptive_max_pool{n}d"
    _, indices = check_functional(getattr(F, name), getattr(TF, name), [x], kwargs=kwargs)
    _same_indices(indices, getattr(TF, name)(torch.tensor(x), **kwargs)[1])
    # the always-with-indices names, and the plain form's gradient on ties
    ours = getattr(F, f"{name}_with_indices")(x, size)
    _same_indices(ours[1], getattr(TF, f"{name}_with_indices")(torch.tensor(x), size)[1])
    check_functional(getattr(F, name), getattr(TF, name), [x], kwargs=dict(output_size=size))


def test_adaptive_max_pool_nan_and_inf_as_torch():
    x = _ties(np.random.default_rng(3), 2, 2, 6, 7)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = np.nan  # torch keeps the last NaN of a window
    x[1, 1, :3] = -np.inf
    values, indices = F.adaptive_max_pool2d(x, (2, 3), return_indices=True)
    t_values, t_indices = TF.adaptive_max_pool2d(torch.tensor(x), (2, 3), return_indices=True)
    np.testing.assert_array_equal(np.asarray(values), t_values.numpy())
    _same_indices(indices, t_indices)


def test_adaptive_max_pool_module_return_indices(rng):
    x = rand(rng, 2, 3, 7, 9)
    values, indices = nn.AdaptiveMaxPool2d((3, 4), return_indices=True)(x)
    t_values, t_indices = torch.nn.AdaptiveMaxPool2d((3, 4), return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(np.asarray(values), t_values.numpy())
    _same_indices(indices, t_indices)


FRACTIONAL = [
    (2, (2, 3, 9, 11), dict(kernel_size=2, output_size=(4, 5))),
    (2, (2, 3, 9, 11), dict(kernel_size=(3, 2), output_ratio=(0.5, 0.7))),
    (2, (1, 2, 6, 7), dict(kernel_size=2, output_size=(5, 6))),  # overlapping windows
    (2, (3, 8, 8), dict(kernel_size=3, output_size=1)),  # unbatched, one window
    (3, (2, 2, 7, 6, 9), dict(kernel_size=(2, 3, 2), output_size=(4, 3, 5))),
    (3, (2, 5, 6, 7), dict(kernel_size=2, output_ratio=(0.5, 0.6, 0.7))),  # unbatched
]


@pytest.mark.parametrize("n, shape, kwargs", FRACTIONAL)
def test_fractional_max_pool_matches_torch_given_its_samples(n, shape, kwargs):
    rng = np.random.default_rng(len(shape) + n)
    x = _ties(rng, *shape)
    batch = shape[0] if len(shape) == n + 2 else 1
    samples = rng.random((batch, shape[-n - 1], n)).astype(np.float32)
    name = f"fractional_max_pool{n}d"
    kwargs = dict(kwargs, return_indices=True)
    ours, theirs = getattr(F, name), getattr(TF, name)
    _, indices = check_functional(lambda v, s, **kw: ours(v, _random_samples=s, **kw),
                                  lambda v, s, **kw: theirs(v, _random_samples=s, **kw),
                                  [x], [samples], kwargs=kwargs)
    t_indices = getattr(TF, name)(torch.tensor(x), **kwargs, _random_samples=torch.tensor(samples))[1]
    _same_indices(indices, t_indices)
    ours = getattr(F, f"{name}_with_indices")(x, _random_samples=samples, **kwargs)
    _same_indices(ours[1], t_indices)


def test_fractional_max_pool_keys_and_module():
    x = rand(np.random.default_rng(0), 2, 3, 13, 11)
    key = jax.random.key(1)
    a = F.fractional_max_pool2d(x, 2, output_size=5, key=key)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(F.fractional_max_pool2d(x, 2, (5, 5), key=key)))
    with pytest.raises(ValueError, match="needs key="):
        jax.jit(lambda v: F.fractional_max_pool2d(v, 2, output_size=5))(x)
    # the module draws new windows from its key stream on each call
    pool = nn.FractionalMaxPool2d(2, output_size=5, return_indices=True, key=key)
    draws = {np.asarray(pool(x)[1]).tobytes() for _ in range(4)}
    assert len(draws) > 1
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.FractionalMaxPool3d(2, output_ratio=1.5)
    with pytest.raises(ValueError, match="either an output"):
        nn.FractionalMaxPool2d(2)
    with pytest.raises(ValueError, match="_random_samples must have shape"):
        F.fractional_max_pool2d(x, 2, output_size=5, _random_samples=np.zeros((2, 3, 3), np.float32))
    with pytest.raises(ValueError, match="at least output \\+ kernel - 1"):
        F.fractional_max_pool2d(x, 3, output_size=12, key=key)


def test_fractional_module_with_samples_converts_from_torch():
    x = rand(np.random.default_rng(2), 2, 3, 7, 6, 8)
    samples = torch.rand(2, 3, 3)
    t_pool = torch.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True,
                                          _random_samples=samples)
    pool = interop.from_torch(t_pool)
    t_values, t_indices = t_pool(torch.tensor(x))
    values, indices = pool(x)
    np.testing.assert_array_equal(np.asarray(values), t_values.numpy())
    _same_indices(indices, t_indices)


def test_native_channel_shuffle(rng):
    x = rand(rng, 2, 6, 3, 2)
    np.testing.assert_array_equal(np.asarray(F.native_channel_shuffle(x, 3)),
                                  TF.native_channel_shuffle(torch.tensor(x), 3).numpy())


@pytest.mark.parametrize("pad", [0, 2])
def test_conv_tbc(pad, rng):
    x, w, b = rand(rng, 9, 2, 3), rand(rng, 3, 3, 4), rand(rng, 4)
    check_functional(F.conv_tbc, TF.conv_tbc, [x, w, b], [pad])


@pytest.mark.parametrize("case", ["indices", "unbatched", "probabilities", "k_dim"])
def test_linear_cross_entropy(case, rng):
    x, w, b = rand(rng, 5, 4), rand(rng, 3, 4), rand(rng, 3)
    target = np.array([0, 2, 1, -100, 2])
    kwargs = dict(label_smoothing=0.1, weight=jnp.asarray([1.0, 2.0, 0.5]))
    if case == "unbatched":
        x, target, kwargs = x[0], np.array(1), dict(reduction="sum")
    elif case == "probabilities":
        target, kwargs = np.asarray(jax.nn.softmax(rand(rng, 5, 3))), dict(reduction="none")
    elif case == "k_dim":
        w, b = rand(rng, 3, 2, 4), rand(rng, 3, 2)
        target, kwargs = np.array([[0, 1], [2, 2], [1, 0], [0, 0], [2, 1]]), dict(ignore_index=0)
    t_kwargs = {k: torch.tensor(np.asarray(v)) if k == "weight" else v for k, v in kwargs.items()}
    check_functional(lambda x, w, b, t, **kw: F.linear_cross_entropy(x, w, t, linear_bias=b, **kw),
                     lambda x, w, b, t, **kw: TF.linear_cross_entropy(x, w, t, linear_bias=b, **kw),
                     [x, w, b], [target], kwargs, torch_kwargs=t_kwargs)


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


def test_no_torch_function_is_missing():
    missing = [n for n in dir(TF) if not n.startswith("_") and callable(getattr(TF, n))
               and not hasattr(F, n)]
    allowed = {"Callable", "DType", "Optional", "Tensor", "assert_int_or_pair", "boolean_dispatch",
               "handle_torch_function", "has_torch_function", "has_torch_function_unary",
               "has_torch_function_variadic"}
    assert set(missing) <= allowed, sorted(set(missing) - allowed)
