"""Linear, Identity."""

import jax.numpy as jnp

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
        dtype = jnp.float32 if dtype is None else dtype
        self.weight = Parameter(default_weight(keys(), (out_features, in_features)).astype(dtype))
        if bias:
            self.bias = Parameter(bias_uniform(keys(), (out_features,), in_features).astype(dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        self._check_input(input, range(1, 33), -1, self.in_features)
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
