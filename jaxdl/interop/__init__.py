"""`jaxdl.interop`: PyTorch models into jaxdl, and side-by-side comparison of a port."""

from jaxdl.interop._compare import CompareReport, CompareRow, compare
from jaxdl.interop._from_torch import from_torch
from jaxdl.interop._pth import load_torch_state_dict

__all__ = ["CompareReport", "CompareRow", "compare", "from_torch", "load_torch_state_dict"]
