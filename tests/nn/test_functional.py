"""jaxdl.nn.functional offers every torch.nn.functional name."""

import torch.nn.functional as TF

import jaxdl.nn.functional as F


def test_no_torch_function_is_missing():
    missing = [n for n in dir(TF) if not n.startswith("_") and callable(getattr(TF, n))
               and not hasattr(F, n)]
    allowed = {"Callable", "DType", "Optional", "Tensor", "assert_int_or_pair", "boolean_dispatch",
               "handle_torch_function", "has_torch_function", "has_torch_function_unary",
               "has_torch_function_variadic"}
    assert set(missing) <= allowed, sorted(set(missing) - allowed)
