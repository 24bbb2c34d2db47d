"""Embedding, EmbeddingBag, `F.embedding`, `F.embedding_bag`, `F.one_hot`."""

import jax
import jax.numpy as jnp

from jaxdl import _random
from jaxdl._convert import as_dtype
from jaxdl._module import Module, Parameter
from jaxdl._random import KeyStream


def _refuse(max_norm, scale_grad_by_freq, sparse, where):
    # max_norm renormalises the weight in place; the others change gradient semantics.
    for name, value in (("max_norm", max_norm), ("scale_grad_by_freq", scale_grad_by_freq),
                        ("sparse", sparse)):
        if value:
            raise NotImplementedError(f"{where}({name}={value!r})")


def _check_indices(input, where):
    if not jnp.issubdtype(jnp.asarray(input).dtype, jnp.integer):
        raise TypeError(f"{where}: expected integer indices, got dtype {jnp.asarray(input).dtype}")


def _lookup(input, weight, padding_idx):
    out = jnp.take(weight, input, axis=0)
    if padding_idx is None:
        return out
    # The padding row gets no gradient, as in PyTorch.
    keep = (input != padding_idx)[..., None]
    return jnp.where(keep, out, jax.lax.stop_gradient(out))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` (num_embeddings, dim) at integer `input`; padding_idx rows get no grad."""
    _refuse(max_norm, scale_grad_by_freq, sparse, "F.embedding")
    _check_indices(input, "F.embedding")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return _lookup(jnp.asarray(input), weight, padding_idx)


def one_hot(tensor, num_classes=-1):
    """int32 one-hot encoding (PyTorch returns int64); num_classes=-1 needs concrete input."""
    tensor = jnp.asarray(tensor)
    if num_classes < 0:
        num_classes = int(jnp.max(tensor)) + 1
    return jax.nn.one_hot(tensor, num_classes, dtype=jnp.int32)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sum/mean/max of embedding rows per bag.

    Bags are the rows of a 2-d `input`, or the segments of a 1-d `input` that
    start at `offsets`. Empty bags give zeros; `padding_idx` entries are
    skipped (not counted by 'mean').
    """
    _refuse(max_norm, scale_grad_by_freq, sparse, "F.embedding_bag")
    _check_indices(input, "F.embedding_bag")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode={mode!r}; use 'sum', 'mean' or 'max'")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"per_sample_weights with mode={mode!r} (PyTorch: 'sum' only)")
    input = jnp.asarray(input)
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("offsets must be None for a 2-d input")
        bags, length = input.shape
        segment = jnp.repeat(jnp.arange(bags), length)
        flat = input.reshape(-1)
        psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets are required for a 1-d input")
        offsets = jnp.asarray(offsets)
        starts = offsets[:-1] if include_last_offset else offsets
        bags = starts.shape[0]
        segment = jnp.searchsorted(starts, jnp.arange(input.shape[0]), side="right") - 1
        if include_last_offset:  # entries past the last offset belong to no bag
            segment = jnp.where(jnp.arange(input.shape[0]) < offsets[-1], segment, bags)
        flat, psw = input, per_sample_weights
    else:
        raise ValueError(f"input must be 1-d or 2-d, got shape {tuple(input.shape)}")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    valid = jnp.ones(flat.shape, bool) if padding_idx is None else flat != padding_idx
    segment = jnp.where(valid, segment, bags)  # skipped entries go to a dropped extra bag
    rows = jnp.take(weight, flat, axis=0)
    if psw is not None:
        rows = rows * psw[:, None].astype(rows.dtype)
    if mode == "max":
        out = jax.ops.segment_max(rows, segment, bags + 1)[:bags]
        counts = jax.ops.segment_sum(jnp.ones_like(flat), segment, bags + 1)[:bags]
        return jnp.where(counts[:, None] > 0, out, 0.0)
    out = jax.ops.segment_sum(rows, segment, bags + 1)[:bags]
    if mode == "mean":
        counts = jax.ops.segment_sum(jnp.ones(flat.shape, rows.dtype), segment, bags + 1)[:bags]
        out = out / jnp.maximum(counts, 1.0)[:, None]
    return out


def _table(num_embeddings, embedding_dim, padding_idx, weight, dtype, key):
    """Given weights, or PyTorch's init N(0, 1) with the padding row zeroed."""
    dtype = as_dtype(dtype, jnp.float32)
    if weight is not None:
        return jnp.asarray(weight, dtype)
    table = _random.normal(KeyStream(key)(), (num_embeddings, embedding_dim), dtype)
    return table if padding_idx is None else table.at[padding_idx].set(0)


class Embedding(Module):
    """A lookup table (num_embeddings, embedding_dim), initialised N(0, 1) as in PyTorch."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None, *, key=None):
        super().__init__()
        _refuse(max_norm, scale_grad_by_freq, sparse, "Embedding")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"padding_idx {padding_idx} must be within num_embeddings "
                                 f"{num_embeddings}")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx, self.max_norm = padding_idx, max_norm
        weight = _table(num_embeddings, embedding_dim, padding_idx, _weight, dtype, key)
        self.weight = Parameter(weight, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, **kwargs):
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def forward(self, input):
        if not jnp.issubdtype(input.dtype, jnp.integer):
            raise self._input_error("integer indices, dtype", "int*", input.dtype)
        return _lookup(input, self.weight, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


class EmbeddingBag(Module):
    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="mean", sparse=False, _weight=None,
                 include_last_offset=False, padding_idx=None, device=None, dtype=None, *,
                 key=None):
        super().__init__()
        _refuse(max_norm, scale_grad_by_freq, sparse, "EmbeddingBag")
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode={mode!r}; use 'sum', 'mean' or 'max'")
        if padding_idx is not None:
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        self.weight = Parameter(_table(num_embeddings, embedding_dim, padding_idx, _weight, dtype, key))

    def forward(self, input, offsets=None, per_sample_weights=None):
        if input.ndim not in (1, 2):
            raise self._input_error("input of rank", "1-d or 2-d", f"shape {tuple(input.shape)}")
        if not jnp.issubdtype(input.dtype, jnp.integer):
            raise self._input_error("integer indices, dtype", "int*", input.dtype)
        return embedding_bag(input, self.weight, offsets, mode=self.mode,
                             per_sample_weights=per_sample_weights,
                             include_last_offset=self.include_last_offset,
                             padding_idx=self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
