"""Layers with float weights refuse integer and bool inputs, as torch's do, naming the layer,
the expected and the actual dtype (Module._check_floating)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxdl import nn
from jaxdl._module import ShapeError

# (layer name, constructor arguments, input shapes): the same in torch.nn and jaxdl.nn
LAYERS = [
    ("Linear", (3, 2), [(2, 3)]),
    ("Bilinear", (3, 3, 2), [(2, 3), (2, 3)]),
    ("Conv2d", (3, 2, 1), [(2, 3, 4, 4)]),
    ("BatchNorm1d", (3,), [(2, 3)]),
    ("InstanceNorm2d", (3,), [(2, 3, 4, 4)]),
    ("LayerNorm", (3,), [(2, 3)]),
    ("RMSNorm", (3,), [(2, 3)]),
    ("GroupNorm", (1, 3), [(2, 3)]),
    ("LocalResponseNorm", (2,), [(2, 3, 4)]),
    ("RNN", (3, 2), [(2, 1, 3)]),
    ("LSTM", (3, 2), [(2, 1, 3)]),
    ("GRU", (3, 2), [(2, 1, 3)]),
    ("GRUCell", (3, 2), [(2, 3)]),
    ("LSTMCell", (3, 2), [(2, 3)]),
    ("MultiheadAttention", (4, 2), [(2, 1, 4)] * 3),
    ("TransformerEncoderLayer", (4, 2, 8), [(2, 1, 4)]),
]


@pytest.mark.parametrize("name, args, shapes", LAYERS, ids=[layer[0] for layer in LAYERS])
@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_float_layers_refuse_integer_and_bool_inputs(name, args, shapes, dtype):
    t_layer = getattr(torch.nn, name)(*args)
    with pytest.raises((RuntimeError, NotImplementedError, ValueError)):  # torch refuses them
        t_layer(*(torch.ones(shape, dtype=getattr(torch, dtype)) for shape in shapes))
    model = nn.Sequential(nn.Identity(), getattr(nn, name)(*args))
    inputs = [jnp.ones(shape, dtype) for shape in shapes]
    with pytest.raises(ShapeError) as err:
        model[1](*inputs) if len(inputs) > 1 else model(*inputs)
    message = str(err.value)
    assert message.startswith(f"1 ({name})") and "expected a floating-point input (float32" in message
    assert f"got dtype {dtype}" in message, message
    floats = [jnp.ones(shape, jnp.float32) for shape in shapes]  # the same call with floats works
    out = model[1](*floats) if len(floats) > 1 else model(*floats)
    assert all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree.leaves(out))


def test_the_error_names_the_parameters_dtype():
    layer = nn.Linear(3, 2, dtype=jnp.bfloat16)
    with pytest.raises(ShapeError, match=r"<root> \(Linear\): expected a floating-point input "
                                         r"\(bfloat16, like its parameters\), got dtype int32"):
        layer(jnp.ones((2, 3), jnp.int32))
