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


def _renormed(weight, input, max_norm, norm_type):
    """`weight` with the rows `input` selects scaled down to `max_norm` (in `norm_type`) where
    their norm exceeds it, by max_norm / (norm + 1e-7) as torch's embedding_renorm_. torch does
    this in place without grad, so the gradient reaches `weight` as if nothing changed."""
    flat = input.reshape(-1)
    rows = jnp.take(weight, flat, axis=0)
    norms = vector_norm(rows, norm_type, -1, keepdims=True)
    scaled = jnp.where(norms > max_norm, rows * (max_norm / (norms + 1e-7)), rows)
    return _identity_gradient(weight.at[flat].set(scaled), weight)


def _lookup(input, weight, padding_idx, scale_grad_by_freq=False):
    """weight[input]; padding_idx rows get no gradient. scale_grad_by_freq: each row's gradient
    is divided by how often its index occurs in input."""
    # torch's IndexError; jnp.take alone would give a NaN row (a clamped one in a gradient)
    _anomaly.check_indices(input, weight.shape[0], "index out of range in self")
    out = jnp.take(weight, input, axis=0)
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

    max_norm: the looked-up rows are renormalised as torch's; torch also writes them back into
    `weight` in place, which an immutable array cannot take (`nn.Embedding` writes them back into
    its parameter). `sparse=True` is accepted and gives the same dense gradient (JAX has no
    sparse gradients).
    """
    _check_indices(input, "F.embedding")
    if weight.ndim != 2:
        raise ValueError(f"F.embedding: weight must be 2-d (num_embeddings, dim), got shape "
                         f"{tuple(weight.shape)}")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    input = jnp.asarray(input)
    if max_norm is not None:
        weight = _renormed(weight, input, max_norm, norm_type)
    return _lookup(input, weight, padding_idx, scale_grad_by_freq)


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
    skipped (not counted by 'mean'). max_norm and sparse as in `embedding`;
    scale_grad_by_freq divides each row's gradient by its count in `input`.
    """
    _check_indices(input, "F.embedding_bag")
    if weight.ndim != 2:
        raise ValueError(f"F.embedding_bag: weight must be 2-d (num_embeddings, dim), got shape "
                         f"{tuple(weight.shape)}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"F.embedding_bag: mode={mode!r}; use 'sum', 'mean' or 'max'")
    if mode == "max" and (scale_grad_by_freq or sparse):
        raise ValueError(f"F.embedding_bag: mode='max' does not support "
                         f"{'scale_grad_by_freq' if scale_grad_by_freq else 'sparse'}=True (as torch)")
    input = jnp.asarray(input)
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"F.embedding_bag: per_sample_weights with mode={mode!r} "
                                      "(PyTorch: 'sum' only)")
        if per_sample_weights.shape != input.shape:
            raise ValueError(f"F.embedding_bag: per_sample_weights must have the shape of input "
                             f"{tuple(input.shape)}, got {tuple(per_sample_weights.shape)}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("F.embedding_bag: offsets must be None for a 2-d input")
        bags, length = input.shape
        segment = jnp.repeat(jnp.arange(bags), length)
        flat = input.reshape(-1)
        psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None or jnp.ndim(offsets) != 1:
            raise ValueError("F.embedding_bag: offsets must be a 1-d array for a 1-d input, got "
                             f"{None if offsets is None else f'shape {jnp.shape(offsets)}'}")
        offsets = jnp.asarray(offsets)
        starts = offsets[:-1] if include_last_offset else offsets
        bags = starts.shape[0]
        segment = jnp.searchsorted(starts, jnp.arange(input.shape[0]), side="right") - 1
        if include_last_offset:  # entries past the last offset belong to no bag
            segment = jnp.where(jnp.arange(input.shape[0]) < offsets[-1], segment, bags)
        flat, psw = input, per_sample_weights
    else:
        raise ValueError(f"F.embedding_bag: input must be 1-d or 2-d, got shape {tuple(input.shape)}")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    valid = jnp.ones(flat.shape, bool) if padding_idx is None else flat != padding_idx
    segment = jnp.where(valid, segment, bags)  # skipped entries go to a dropped extra bag
    if max_norm is not None:
        weight = _renormed(weight, flat, max_norm, norm_type)
    rows = _lookup(flat, weight, None, scale_grad_by_freq)
    if psw is not None:
        rows = rows * psw[:, None].astype(rows.dtype)
    if mode == "max":
        counts = jax.ops.segment_sum(jnp.ones_like(flat), segment, bags + 1)[:bags]
        return jnp.where(counts[:, None] > 0, _bag_max(rows, segment, bags), 0.0)
    out = jax.ops.segment_sum(rows, segment, bags + 1)[:bags]
    if mode == "mean":
        counts = jax.ops.segment_sum(jnp.ones(flat.shape, rows.dtype), segment, bags + 1)[:bags]
        out = out / jnp.maximum(counts, 1.0)[:, None]
    return out


def _bag_max(rows, segment, bags):
    """Each bag's max per dimension, read from the first entry that holds it, so that its
    gradient goes to that entry alone, as torch's (its kernel keeps the first maximum);
    `segment_max`'s derivative splits a tie among the tied entries."""
    entries = rows.shape[0]
    if entries == 0:
        return jnp.zeros((bags, rows.shape[1]), rows.dtype)
    top = jax.lax.stop_gradient(jax.ops.segment_max(rows, segment, bags + 1))
    index = jnp.arange(entries)[:, None]
    first = jax.ops.segment_min(jnp.where(rows == top[segment], index, entries), segment,
                                bags + 1)[:bags]
    return jnp.take_along_axis(rows, jnp.minimum(first, entries - 1), axis=0)


def _renormed_weight(module, input):
    """module.weight, with the rows `input` selects renormalised to module.max_norm and written
    back into the module, as torch's forward does in place."""
    if module.max_norm is None:
        return module.weight
    weight = _renormed(module.weight, input, module.max_norm, module.norm_type)
    module._update_parameter("weight", weight)
    return weight


def _table(num_embeddings, embedding_dim, padding_idx, weight, dtype, key):
    """Given weights, or PyTorch's init N(0, 1) with the padding row zeroed."""
    dtype = as_dtype(dtype, jnp.float32)
    if weight is not None:
        return jnp.asarray(weight, dtype)
    table = _random.normal(KeyStream(key)(), (num_embeddings, embedding_dim), dtype)
    return table if padding_idx is None else table.at[padding_idx].set(0)


class Embedding(Module):
    """A lookup table (num_embeddings, embedding_dim), initialised N(0, 1) as in PyTorch.

    max_norm: each call renormalises the looked-up rows of `weight` and writes them back into
    the parameter, as torch's in-place renormalisation (eagerly, in `dl.jit` steps and under
    `dl.value_and_grad` alike). sparse=True is accepted; the gradient is dense.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None, *, key=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within "
                                 f"num_embeddings {num_embeddings}")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        weight = _table(num_embeddings, embedding_dim, padding_idx, _weight, dtype, key)
        self.weight = Parameter(weight, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, **kwargs):
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def forward(self, input):
        if not jnp.issubdtype(input.dtype, jnp.integer):
            raise self._input_error("integer indices, dtype", "int*", input.dtype)
        return _lookup(input, _renormed_weight(self, input), self.padding_idx,
                       self.scale_grad_by_freq)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s + _options_repr(self) + (", sparse=True" if self.sparse else "")


def _options_repr(module):
    """The non-default max_norm, norm_type, scale_grad_by_freq of torch's repr."""
    s = "" if module.max_norm is None else f", max_norm={module.max_norm}"
    s += "" if module.norm_type == 2 else f", norm_type={module.norm_type}"
    return s + (", scale_grad_by_freq=True" if module.scale_grad_by_freq else "")


class EmbeddingBag(Module):
    """Sums, means or maxima of embedding rows per bag (see `F.embedding_bag`); max_norm and
    sparse as in `Embedding`."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="mean", sparse=False, _weight=None,
                 include_last_offset=False, padding_idx=None, device=None, dtype=None, *,
                 key=None):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode={mode!r}; use 'sum', 'mean' or 'max'")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"EmbeddingBag: padding_idx {padding_idx} must be within "
                                 f"num_embeddings {num_embeddings}")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self.weight = Parameter(_table(num_embeddings, embedding_dim, padding_idx, _weight, dtype, key))

    def forward(self, input, offsets=None, per_sample_weights=None):
        if input.ndim not in (1, 2):
            raise self._input_error("input of rank", "1-d or 2-d", f"shape {tuple(input.shape)}")
        if not jnp.issubdtype(input.dtype, jnp.integer):
            raise self._input_error("integer indices, dtype", "int*", input.dtype)
        return embedding_bag(input, _renormed_weight(self, input), offsets, mode=self.mode,
                             scale_grad_by_freq=self.scale_grad_by_freq, sparse=self.sparse,
                             per_sample_weights=per_sample_weights,
                             include_last_offset=self.include_last_offset,
                             padding_idx=self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}{_options_repr(self)}, mode={self.mode!r}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"
