"""`torch.nn.init` with PyTorch's formulas.

Arrays are immutable, so each function returns the new array. Given an
`nn.Parameter` it also replaces the parameter's data, as the in-place PyTorch
function would. Randomness comes from `key=` or the global stream
(`dl.manual_seed`).
"""

import math

import jax
import jax.numpy as jnp

from jaxdl import _random
from jaxdl._module import Parameter
from jaxdl._random import next_key


def _data(tensor):
    return tensor.data if isinstance(tensor, Parameter) else jnp.asarray(tensor)


def _set(tensor, value):
    value = value.astype(_data(tensor).dtype)
    if isinstance(tensor, Parameter):
        tensor.data = value
    return value


def calculate_gain(nonlinearity: str, param=None) -> float:
    linear = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid"}
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, int | float):
            raise ValueError(f"negative_slope {param} is not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(shape):
    if len(shape) < 2:
        raise ValueError(
            f"fan in and fan out need an array of at least 2 dimensions, got shape {tuple(shape)}"
        )
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fan(shape, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode {mode!r} not supported, use 'fan_in' or 'fan_out'")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(shape)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a: float = 0.0, b: float = 1.0, *, key=None):
    data = _data(tensor)
    key = next_key() if key is None else key
    return _set(tensor, _random.uniform(key, data.shape, jnp.float32, a, b))


def normal_(tensor, mean: float = 0.0, std: float = 1.0, *, key=None):
    data = _data(tensor)
    key = next_key() if key is None else key
    return _set(tensor, mean + std * _random.normal(key, data.shape, jnp.float32))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, *, key=None):
    """Normal(mean, std) truncated to [a, b] (bounds in absolute units, as PyTorch)."""
    data = _data(tensor)
    key = next_key() if key is None else key
    lower, upper = (a - mean) / std, (b - mean) / std
    sample = jax.random.truncated_normal(key, lower, upper, data.shape, jnp.float32)
    return _set(tensor, mean + std * sample)


def constant_(tensor, val: float):
    return _set(tensor, jnp.full(_data(tensor).shape, val))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def eye_(tensor):
    data = _data(tensor)
    if data.ndim != 2:
        raise ValueError(f"eye_ needs a 2-d array, got shape {tuple(data.shape)}")
    return _set(tensor, jnp.eye(*data.shape))


def xavier_uniform_(tensor, gain: float = 1.0, *, key=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_data(tensor).shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, key=key)


def xavier_normal_(tensor, gain: float = 1.0, *, key=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_data(tensor).shape)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), key=key)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", *, key=None):
    fan = _fan(_data(tensor).shape, mode)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, key=key)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", *, key=None):
    fan = _fan(_data(tensor).shape, mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), key=key)


def orthogonal_(tensor, gain: float = 1.0, *, key=None):
    data = _data(tensor)
    if data.ndim < 2:
        raise ValueError(f"orthogonal_ needs at least 2 dimensions, got shape {tuple(data.shape)}")
    rows = data.shape[0]
    cols = data.size // rows
    key = next_key() if key is None else key
    flat = _random.normal(key, (rows, cols), jnp.float32)
    if rows < cols:
        flat = flat.T
    q, r = jnp.linalg.qr(flat)
    q = q * jnp.sign(jnp.diagonal(r))  # make the decomposition unique, as PyTorch does
    if rows < cols:
        q = q.T
    return _set(tensor, gain * q.reshape(data.shape))


def bias_uniform(key, shape, fan_in: int):
    """PyTorch's default bias init for Linear/Conv: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return _random.uniform(key, shape, jnp.float32, -bound, bound)


def default_weight(key, shape):
    """PyTorch's default weight init for Linear/Conv: kaiming_uniform_(a=sqrt(5))."""
    return kaiming_uniform_(jnp.zeros(shape), a=math.sqrt(5), key=key)
