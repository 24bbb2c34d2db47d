"""Module.to / .cpu / .cuda / .float / .half / .bfloat16 and torch dtypes wherever a dtype is taken
(jaxdl/_convert.py), against torch's own conversions."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch_twin import assert_close

import jaxdl as dl
import jaxdl.nn.functional as F
from jaxdl import nn


def twins(seed=0):
    """A jaxdl model and its torch twin with the same weights and buffers."""
    torch.manual_seed(seed)
    t_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                  torch.nn.Dropout(0.5), torch.nn.Linear(8, 3))
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(8, 3))
    model.load_state_dict(t_model.state_dict())
    return model, t_model


def dtypes(state_dict) -> dict:
    return {k: str(v.dtype).removeprefix("torch.").replace("int64", "int32")
            for k, v in state_dict.items()}


@pytest.mark.parametrize("convert", [
    lambda m: m.half(), lambda m: m.bfloat16(), lambda m: m.half().float(),
    lambda m: m.to(torch.float16), lambda m: m.to(dtype=torch.bfloat16),
    lambda m: m.to("cpu", torch.bfloat16),
])
def test_dtype_conversions_cast_what_torch_casts(convert, rng):
    model, t_model = twins()
    assert convert(model) is model
    convert(t_model)
    assert dtypes(model.state_dict()) == dtypes(t_model.state_dict())  # counters stay integers
    model.eval(), t_model.eval()
    x = rng.standard_normal((5, 6)).astype(np.float32)
    dtype = t_model[0].weight.dtype
    out = model(jnp.asarray(x, dl._convert.as_dtype(dtype)))
    want = t_model(torch.from_numpy(x).to(dtype))
    assert str(out.dtype) == str(want.dtype).removeprefix("torch.")
    assert_close(np.asarray(out, np.float32), want.float(), "output", tol=2e-2)


def test_to_device_keeps_values_and_moves_every_array():
    model, _ = twins()
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    for where in ["cpu", "cpu:0", jax.devices()[0], torch.device("cpu")]:
        assert model.to(where) is model
    assert model.cpu() is model
    model.to("cpu:1")  # conftest simulates 8 CPU devices
    for index, value in enumerate(model._store.values):
        assert value.devices() == {jax.devices()[1]}, index  # the dropout key stream too
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(value), before[key])

    @dl.jit
    def forward(model, x):
        return model(x)

    assert forward(model, jax.device_put(jnp.ones((4, 6)), jax.devices()[1])).devices() == \
        {jax.devices()[1]}


def test_to_sharding_places_and_keeps_the_sharding_through_compiled_steps():
    model, _ = twins()
    opt = dl.optim.SGD(model.parameters(), lr=0.1)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    model.to(replicated)
    assert model[0].weight.sharding == replicated

    @dl.jit
    def step(model, opt, x):
        loss, grads = dl.value_and_grad(lambda m: m(x).sum())(model)
        opt.step(grads)
        return loss

    step(model, opt, jax.device_put(jnp.ones((4, 6)), replicated))
    assert model[0].weight.sharding == replicated
    model.to("cpu:0")
    assert model[0].weight.devices() == {jax.devices()[0]}
    assert not model._store.shardings


def test_cuda_without_a_gpu_and_bad_arguments_fail_clearly():
    model, t_model = twins()
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(RuntimeError, match="'cuda' is not available: JAX sees no cuda device"):
            model.cuda()
    with pytest.raises(RuntimeError, match="JAX sees 8 cpu device"):
        model.to("cpu:9")
    with pytest.raises(TypeError, match="floating point or complex dtypes"):
        t_model.to(torch.int32)  # torch refuses it too
    with pytest.raises(TypeError, match="floating point or complex dtypes, but got desired "
                                        "dtype=torch.int32"):
        model.to(torch.int32)
    with pytest.raises(TypeError, match="expected a dtype"):
        model.to("floaty")
    assert model[0].weight.dtype == jnp.float32  # nothing changed


def test_torch_dtypes_wherever_a_dtype_is_taken(rng):
    bf16, f16 = jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)
    layers = [(nn.Linear(4, 3, dtype=torch.bfloat16), bf16), (nn.Linear(4, 3, dtype=torch.half), f16),
              (nn.Conv2d(2, 3, 3, dtype=torch.float16), f16), (nn.LSTM(4, 3, dtype=torch.half), f16),
              (nn.LayerNorm(4, dtype=torch.bfloat16), bf16), (nn.GRUCell(4, 3, dtype="float16"), f16),
              (nn.MultiheadAttention(4, 2, dtype=torch.bfloat16), bf16),
              (nn.Embedding(5, 4, dtype=torch.float16), f16),
              (nn.BatchNorm1d(4, dtype=torch.bfloat16), bf16),
              (nn.TransformerEncoderLayer(4, 2, 8, dtype=torch.bfloat16), bf16)]
    for layer, dtype in layers:
        floats = {v.dtype for v in layer.state_dict().values() if v.dtype != jnp.int32}
        assert floats == {dtype}, layer
    model, _ = twins()
    model.eval()
    x = jnp.asarray(rng.standard_normal((5, 6)), jnp.float32)
    with dl.amp.autocast(dtype=torch.bfloat16):
        low = model(x)
    with dl.amp.autocast(dtype=jnp.bfloat16):
        np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(low))
    with dl.amp.autocast(torch.float16):
        assert model[0](x).dtype == jnp.float16
    with pytest.raises(ValueError, match="bfloat16 or float16, got float32"):
        dl.amp.autocast(dtype=torch.float32)
    logits = rng.standard_normal((3, 5)).astype(np.float32)
    for name in ("softmax", "log_softmax", "softmin"):  # dtype= in the functional forms too
        got = getattr(F, name)(jnp.asarray(logits), 1, dtype=torch.bfloat16)
        want = getattr(torch.nn.functional, name)(torch.from_numpy(logits), 1, dtype=torch.bfloat16)
        assert got.dtype == jnp.bfloat16
        assert_close(np.asarray(got, np.float32), want.float(), name, tol=1e-2)


def test_compiled_step_follows_a_dtype_change_as_eager_does(rng):
    model, _ = twins()
    model.eval()
    x = jnp.asarray(rng.standard_normal((5, 6)), jnp.float32)

    @dl.jit
    def forward(model, x):
        return model(x)

    assert forward(model, x).dtype == jnp.float32
    for convert, dtype in [(lambda m: m.bfloat16(), jnp.bfloat16), (lambda m: m.half(), jnp.float16),
                           (lambda m: m.to(torch.float32), jnp.float32)]:
        convert(model)
        compiled, eager = forward(model, x.astype(dtype)), model(x.astype(dtype))
        assert compiled.dtype == eager.dtype == dtype
        np.testing.assert_allclose(np.asarray(compiled, np.float32), np.asarray(eager, np.float32),
                                   rtol=2e-2, atol=2e-2)


def test_converting_never_imports_torch():
    script = textwrap.dedent("""
        import sys
        import jax.numpy as jnp
        import jaxdl as dl
        from jaxdl import nn
        model = nn.Sequential(nn.Linear(3, 4, dtype="bfloat16"), nn.Dropout(0.1))
        model.to("cpu").half().float().to(jnp.bfloat16).cpu()
        with dl.amp.autocast(dtype=jnp.float16):
            model(jnp.ones((2, 3)))
        assert "torch" not in sys.modules, "torch was imported"
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
