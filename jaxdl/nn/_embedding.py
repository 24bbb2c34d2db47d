"""Embedding, EmbeddingBag, `F.embedding`, `F.embedding_bag`, `F.one_hot`."""

import jax
import jax.numpy as jnp

from jaxdl import _anomaly, _random
from jaxdl._convert import as_dtype
from jaxdl._module import Module, Parameter
from jaxdl._random import KeyStream
from jaxdl._tracing import is_traced
from jaxdl.nn._distance import vector_norm


def _check_indices(input, where):
    if not jnp.issubdtype(jnp.asarray(input).dtype, jnp.integer):
        raise TypeError(f"{where}: expected integer indices, got dtype {jnp.asarray(input).dtype}")


def _identity_gradient(value, x):
    """`value` forward, the gradient of `x` backward (for changes torch makes without grad)."""
    return jax.lax.stop_gradient(value) + (x - jax.lax.stop_gradient(x))


def _lookup(input, weight, padding_idx, max_norm=None, norm_type=2.0, scale_grad_by_freq=False):
    """weight[input] with torch's options. padding_idx rows get no gradient. max_norm: rows whose
    norm_type-norm exceeds it are scaled to max_norm (torch does this to `weight` in place and
    without gradient; here the looked-up rows are scaled and `weight` stays as it is).
    scale_grad_by_freq: each row's gradient is divided by how often its index occurs in input."""
    # torch's IndexError; jnp.take alone would give a NaN row (a clamped one in a gradient)
    _anomaly.check_indices(input, weight.shape[0], "index out of range in self")
    out = jnp.take(weight, input, axis=0)
    if max_norm is not None:
        norms = vector_norm(out, norm_type, -1, keepdims=True)
        scale = jnp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        out = _identity_gradient(out * scale, out)
    if scale_grad_by_freq:
        counts = jnp.zeros(weight.shape[0], out.dtype).at[input].add(1.0)[input]
        out = jax.lax.stop_gradient(out) + (out - jax.lax.stop_gradient(out)) / counts[..., None]
    if padding_idx is None:
        return out
    # The padding row gets no gradient, as in PyTorch.
    keep = (input != padding_idx)[..., None]
    return jnp.where(keep, out, jax.lax.stop_gradient(out))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of `weight` (num_embeddings, dim) at integer `input`; padding_idx rows get no grad.

    `sparse=True` is accepted and gives the same dense gradient (JAX has no sparse gradients).
    """
    _check_indices(input, "F.embedding")
    if weight.ndim != 2:
        raise ValueError(f"F.embedding: weight must be 2-d (num_embeddings, dim), got shape "
                         f"{tuple(weight.shape)}")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return _lookup(jnp.asarray(input), weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)


def one_hot(tensor, num_classes=-1):
    """int32 one-hot encoding (PyTorch returns int64); num_classes=-1 needs concrete input."""
    tensor = jnp.asarray(tensor)
    _check_indices(tensor, "F.one_hot")
    if num_classes < 0:
        if is_traced(tensor):
            raise ValueError("F.one_hot: num_classes=-1 reads the largest index, which a traced "
                             "input does not have: pass num_classes")
        if not tensor.size:
            raise ValueError("F.one_hot: can not infer num_classes from an empty tensor")
        num_classes = int(jnp.max(tensor)) + 1
    if tensor.size and not is_traced(tensor) and not (
            0 <= int(jnp.min(tensor)) and int(jnp.max(tensor)) < num_classes):
        raise ValueError(f"F.one_hot: class values must be in [0, num_classes={num_classes})")
    return jax.nn.one_hot(tensor, num_classes, dtype=jnp.int32)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sum/mean/max of embedding rows per bag.

    Bags are the rows of a 2-d `input`, or the segments of a 1-d `input` that
    start at `offsets`. Empty bags give zeros; `padding_idx` entries are
    skipped (not counted by 'mean'). max_norm and sparse as in `embedding`.
    """
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
    if scale_grad_by_freq:  # torch's bag backward counts differently from embedding's (unchecked)
        raise NotImplementedError("F.embedding_bag(scale_grad_by_freq=True)")
    rows = _lookup(flat, weight, None, max_norm, norm_type)
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


def _refuse_max_norm(max_norm, where):
    if max_norm is not None:
        raise NotImplementedError(
            f"{where}(max_norm={max_norm!r}): torch renormalises the stored weight in place at "
            "each lookup, and arrays are immutable here; F.embedding(input, module.weight, "
            "max_norm=...) renormalises the looked-up rows")


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
        _refuse_max_norm(max_norm, "Embedding")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"padding_idx {padding_idx} must be within num_embeddings "
                                 f"{num_embeddings}")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx, self.max_norm = padding_idx, max_norm
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse  # sparse: dense gradient
        weight = _table(num_embeddings, embedding_dim, padding_idx, _weight, dtype, key)
        self.weight = Parameter(weight, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, **kwargs):
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def forward(self, input):
        if not jnp.issubdtype(input.dtype, jnp.integer):
            raise self._input_error("integer indices, dtype", "int*", input.dtype)
        return _lookup(input, self.weight, self.padding_idx,
                       scale_grad_by_freq=self.scale_grad_by_freq)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


class EmbeddingBag(Module):
    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="mean", sparse=False, _weight=None,
                 include_last_offset=False, padding_idx=None, device=None, dtype=None, *,
                 key=None):
        super().__init__()
        _refuse_max_norm(max_norm, "EmbeddingBag")
        if scale_grad_by_freq:
            raise NotImplementedError("EmbeddingBag(scale_grad_by_freq=True)")
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode={mode!r}; use 'sum', 'mean' or 'max'")
        if padding_idx is not None:
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse  # sparse: dense gradient
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
