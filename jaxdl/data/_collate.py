"""Stacking samples into a batch, like `torch.utils.data.default_collate`."""

import numpy as np


def default_collate(samples):
    """Stacks a list of samples into one batch of numpy arrays.

    Arrays and numbers are stacked along a new first axis; tuples, lists and
    dicts are collated field by field (keeping their type); strings and bytes
    are gathered into a list.

    Arguments:
      samples: a non-empty list of samples with the same structure and shapes.

    Returns:
      The batch, with the samples' structure.

    Raises:
      ValueError: naming the two samples (by position in `samples`) whose
        structure or shapes differ.
    """
    return collate_samples(samples, list(range(len(samples))), "sample index")


def collate_samples(samples, indices, index_name="dataset index", field="", allocate=None):
    """`default_collate` that names offending samples by `indices` (their dataset indices).

    `allocate(shape, dtype)`, when given, returns the (empty) array that a stacked field
    is written into: the loader uses it to place batches where they can be handed on
    without another copy (64-byte aligned memory, shared memory in a worker).
    """
    first = samples[0]
    if isinstance(first, dict):
        for pos, sample in enumerate(samples):
            if not isinstance(sample, dict) or sample.keys() != first.keys():
                raise ValueError(
                    f"collate: sample at {index_name} {indices[pos]} has keys "
                    f"{_keys(sample)} but sample at {index_name} {indices[0]} has keys "
                    f"{_keys(first)}")
        return {k: collate_samples([s[k] for s in samples], indices, index_name,
                                   f"{field}[{k!r}]", allocate) for k in first}
    if isinstance(first, tuple | list):
        for pos, sample in enumerate(samples):
            if not isinstance(sample, tuple | list) or len(sample) != len(first):
                raise ValueError(
                    f"collate{_at(field)}: sample at {index_name} {indices[pos]} has "
                    f"{_describe(sample)} but sample at {index_name} {indices[0]} has "
                    f"{_describe(first)}")
        fields = [collate_samples([s[i] for s in samples], indices, index_name, f"{field}[{i}]",
                                  allocate) for i in range(len(first))]
        return type(first)(*fields) if hasattr(first, "_fields") else type(first)(fields)
    if isinstance(first, str | bytes):
        return list(samples)
    return _stack(samples, indices, index_name, field, allocate)


def _stack(samples, indices, index_name, field, allocate):
    first = samples[0]
    if isinstance(first, _SCALARS) and all(type(s) is type(first) for s in samples):
        # Numbers of one type (labels): one conversion instead of a 0-d array per sample;
        # same dtype as stacking them one by one.
        return np.array(samples)
    arrays = [np.asarray(s) for s in samples]
    shape, dtype = arrays[0].shape, arrays[0].dtype
    same_dtype = True
    for pos, array in enumerate(arrays):
        if array.shape != shape:
            raise ValueError(
                f"collate{_at(field)}: sample at {index_name} {indices[pos]} has shape "
                f"{array.shape} but sample at {index_name} {indices[0]} has shape "
                f"{shape}; samples in a batch must have equal shapes")
        same_dtype = same_dtype and array.dtype == dtype
    if not same_dtype or dtype.hasobject or not shape:
        return np.stack(arrays)  # mixed dtypes: numpy promotes them
    out = (allocate or np.empty)((len(arrays),) + shape, dtype)
    # Joining along the first axis of `out` seen as (n * shape[0], ...) writes the same
    # bytes as np.stack without its one expanded view per sample (~20% of the collate).
    np.concatenate(arrays, out=out.reshape((len(arrays) * shape[0],) + shape[1:]))
    return out


# Scalar types that numpy converts to the same dtype in a list as one by one.
_SCALARS = (int, float, bool, complex, np.generic)


def _at(field):
    return f" (field {field})" if field else ""


def _keys(sample):
    return sorted(sample) if isinstance(sample, dict) else f"none (a {type(sample).__name__})"


def _describe(sample):
    if isinstance(sample, tuple | list):
        return f"{len(sample)} fields"
    return f"a {type(sample).__name__}"
