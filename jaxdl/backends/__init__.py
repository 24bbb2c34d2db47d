"""`dl.backends`: switches for how operations are lowered on a backend, like `torch.backends`."""

from jaxdl.backends import cpu

__all__ = ["cpu"]
