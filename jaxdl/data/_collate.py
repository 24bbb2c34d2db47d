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


def collate_samples(samples, indices, index_name="dataset index", field=""):
    """`default_collate` that names offending samples by `indices` (their dataset indices)."""
    first = samples[0]
    if isinstance(first, dict):
        for pos, sample in enumerate(samples):
            if not isinstance(sample, dict) or sample.keys() != first.keys():
                raise ValueError(
                    f"collate: sample at {index_name} {indices[pos]} has keys "
                    f"{_keys(sample)} but sample at {index_name} {indices[0]} has keys "
                    f"{_keys(first)}")
        return {k: collate_samples([s[k] for s in samples], indices, index_name,
                                   f"{field}[{k!r}]") for k in first}
    if isinstance(first, tuple | list):
        for pos, sample in enumerate(samples):
            if not isinstance(sample, tuple | list) or len(sample) != len(first):
                raise ValueError(
                    f"collate{_at(field)}: sample at {index_name} {indices[pos]} has "
                    f"{_describe(sample)} but sample at {index_name} {indices[0]} has "
                    f"{_describe(first)}")
        fields = [collate_samples([s[i] for s in samples], indices, index_name, f"{field}[{i}]")
                  for i in range(len(first))]
        return type(first)(*fields) if hasattr(first, "_fields") else type(first)(fields)
    if isinstance(first, str | bytes):
        return list(samples)
    arrays = [np.asarray(s) for s in samples]
    for pos, array in enumerate(arrays):
        if array.shape != arrays[0].shape:
            raise ValueError(
                f"collate{_at(field)}: sample at {index_name} {indices[pos]} has shape "
                f"{array.shape} but sample at {index_name} {indices[0]} has shape "
                f"{arrays[0].shape}; samples in a batch must have equal shapes")
    return np.stack(arrays)


def _at(field):
    return f" (field {field})" if field else ""


def _keys(sample):
    return sorted(sample) if isinstance(sample, dict) else f"none (a {type(sample).__name__})"


def _describe(sample):
    if isinstance(sample, tuple | list):
        return f"{len(sample)} fields"
    return f"a {type(sample).__name__}"
