"""Dropout, dropout2d/3d, alpha dropout: functional forms (key= or the global stream) and modules
(masks from the module's own key stream)."""

import jax.numpy as jnp

from jaxdl._counter_random import bernoulli_keep
from jaxdl._module import Module
from jaxdl._random import KeyStream
from jaxdl.nn._keys import fresh_key as _fresh_key


def _keep_mask(input, p, training, key, mask_shape, what):
    """A dropout's keep mask over `mask_shape`; None where the input passes unchanged (eval,
    p = 0) and False where everything is dropped (p = 1, no key drawn)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return None
    if p == 1.0:
        return False
    return bernoulli_keep(_fresh_key(key, input, what), mask_shape, p)


def _dropout(input, p, training, key, mask_shape, what):
    """Zero entries with probability p along a mask broadcast over `mask_shape`, scale the rest."""
    keep = _keep_mask(input, p, training, key, mask_shape, what)
    if keep is None:
        return input
    if keep is False:
        return jnp.zeros_like(input)
    return jnp.where(keep, input / (1.0 - p), 0).astype(input.dtype)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    return _dropout(input, p, training, key, input.shape, "dropout")


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels of (N, C, L) or (C, L) inputs."""
    shape = input.shape[:-1] + (1,)
    return _dropout(input, p, training, key, shape, "dropout1d")


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels of (N, C, D, H, W) inputs."""
    return _dropout(input, p, training, key, input.shape[:2] + (1,) * (input.ndim - 2), "dropout3d")


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None):
    """Zeroes whole channels (axis 1 of (N, C, ...)) with probability p, scaling the rest."""
    return _dropout(input, p, training, key, input.shape[:2] + (1,) * (input.ndim - 2), "dropout2d")


# SELU's negative saturation value -scale * alpha: alpha dropout sets dropped units to it.
_SELU_SATURATION = 1.7580993408473766


def _alpha_dropout(input, p, training, key, mask_shape, what):
    """Drop to SELU's saturation value, then an affine map a x + b that keeps zero mean and unit
    variance for standardised inputs (Klambauer et al. 2017; PyTorch's constants)."""
    keep = _keep_mask(input, p, training, key, mask_shape, what)
    if keep is None:
        return input
    if keep is False:
        return jnp.zeros_like(input)
    a = ((_SELU_SATURATION ** 2 * p + 1) * (1 - p)) ** -0.5
    return (jnp.where(keep, input, -_SELU_SATURATION) * a + _SELU_SATURATION * a * p).astype(
        input.dtype)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False, *,
                  key=None):
    return _alpha_dropout(input, p, training, key, input.shape, "alpha_dropout")


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False, *,
                          key=None):
    """Alpha dropout of whole channels (axis 1 of (N, C, ...))."""
    shape = input.shape[:2] + (1,) * (input.ndim - 2)
    return _alpha_dropout(input, p, training, key, shape, "feature_alpha_dropout")


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

    _functional = staticmethod(dropout)

    def forward(self, input):
        if not self.training or self.p == 0.0:
            return input
        return self._functional(input, self.p, True, key=self._next_key())

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout2d(Dropout):
    """Zeroes whole channels (axis 1 of (N, C, H, W)) with probability p in training mode."""

    _functional = staticmethod(dropout2d)

    def forward(self, input):
        self._check_input(input, (3, 4))
        return super().forward(input)


class AlphaDropout(Dropout):
    """Alpha dropout for SELU networks: keeps zero mean and unit variance in training mode."""

    _functional = staticmethod(alpha_dropout)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels (axis 1 of (N, C, ...))."""

    _functional = staticmethod(feature_alpha_dropout)

    def forward(self, input):
        self._check_input(input, (2, 3, 4, 5))
        return super().forward(input)
