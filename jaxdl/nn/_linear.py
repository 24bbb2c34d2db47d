"""Linear, Bilinear, Identity."""

import math

import jax.numpy as jnp

from jaxdl import _random
from jaxdl._convert import as_dtype
from jaxdl._module import Module, Parameter
from jaxdl._random import KeyStream
from jaxdl.nn import functional as F
from jaxdl.nn.init import bias_uniform, default_weight


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
        return F.linear(input, self.weight, self.bias)

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
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
