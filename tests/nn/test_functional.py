"""jaxdl.nn.functional offers every torch.nn.functional name and rejects what torch rejects,
naming the argument."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxdl.nn.functional as F


def test_no_torch_function_is_missing():
    missing = [n for n in dir(TF) if not n.startswith("_") and callable(getattr(TF, n))
               and not hasattr(F, n)]
    allowed = {"Callable", "DType", "Optional", "Tensor", "assert_int_or_pair", "boolean_dispatch",
               "handle_torch_function", "has_torch_function", "has_torch_function_unary",
               "has_torch_function_variadic"}
    assert set(missing) <= allowed, sorted(set(missing) - allowed)


_X4, _X2 = np.ones((2, 3, 8, 8), np.float32), np.ones((4, 5), np.float32)
# (call on a functional module, what our message must say)
BAD_INPUTS = {
    "linear": (lambda f: f.linear(_X2, np.ones((3, 6), np.float32)),
               r"F.linear: input of shape \(4, 5\).*\(3, 6\)"),
    "conv2d-rank": (lambda f: f.conv2d(_X4, np.ones((4, 3, 3), np.float32)),
                    r"F.conv2d: .*weight \(4, 3, 3\)"),
    "conv2d-channels": (lambda f: f.conv2d(_X4, np.ones((4, 2, 3, 3), np.float32)),
                        "F.conv2d: input has 3 channels.*expects 2"),
    "avg_pool2d-stride": (lambda f: f.avg_pool2d(_X4, 2, stride=0), "stride must be positive"),
    "layer_norm": (lambda f: f.layer_norm(_X2, (4,)), r"normalized_shape \(4,\)"),
    "batch_norm": (lambda f: f.batch_norm(_X2, np.zeros(3, np.float32), np.ones(3, np.float32)),
                   r"running_mean must have shape \(5,\)"),
    "pixel_shuffle": (lambda f: f.pixel_shuffle(_X4, 2), "pixel_shuffle: .*upscale_factor=2"),
    "mse_loss": (lambda f: f.mse_loss(_X2, np.ones((4, 6), np.float32)), "mse_loss: input of shape"),
    "binary_cross_entropy": (lambda f: f.binary_cross_entropy(_X2 / 2, np.ones(4, np.float32)),
                             "binary_cross_entropy: target of shape"),
    "cosine_similarity": (lambda f: f.cosine_similarity(_X2, np.ones((3, 5), np.float32)),
                          "cosine_similarity: x1 of shape"),
}


class _Torch:
    """torch.nn.functional taking numpy arrays."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            tensor = lambda v: torch.tensor(v) if isinstance(v, np.ndarray) else v  # noqa: E731
            return getattr(TF, name)(*map(tensor, args), **{k: tensor(v) for k, v in kwargs.items()})
        return call


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_what_torch_rejects_is_rejected_naming_the_argument(case):
    call, message = BAD_INPUTS[case]
    with pytest.raises((RuntimeError, ValueError)):
        call(_Torch())
    with pytest.raises(ValueError, match=message):
        call(F)
