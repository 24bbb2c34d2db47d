"""Dropout, Dropout2d, AlphaDropout, FeatureAlphaDropout: masks from the module's own key stream."""

from jaxdl._module import Module
from jaxdl._random import KeyStream
from jaxdl.nn import functional as F


class Dropout(Module):
    """Zeroes elements with probability p in training mode, scaling the rest by 1/(1-p).

    The key stream is module state: under `dl.jit` it advances every step, so
    two compiled steps never reuse a mask.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False, *, key=None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace
        self._register_rng("_rng", KeyStream(key)())

    _functional = staticmethod(F.dropout)

    def forward(self, input):
        if not self.training or self.p == 0.0:
            return input
        return self._functional(input, self.p, True, key=self._next_key())

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout2d(Dropout):
    """Zeroes whole channels (axis 1 of (N, C, H, W)) with probability p in training mode."""

    _functional = staticmethod(F.dropout2d)

    def forward(self, input):
        self._check_input(input, (3, 4))
        return super().forward(input)


class AlphaDropout(Dropout):
    """Alpha dropout for SELU networks: keeps zero mean and unit variance in training mode."""

    _functional = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels (axis 1 of (N, C, ...))."""

    _functional = staticmethod(F.feature_alpha_dropout)

    def forward(self, input):
        self._check_input(input, (2, 3, 4, 5))
        return super().forward(input)
