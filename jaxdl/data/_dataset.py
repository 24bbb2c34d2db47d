"""Map-style and iterable datasets with `torch.utils.data`'s names and behaviour."""

import bisect
import math

import numpy as np


class Dataset:
    """A map-style dataset: subclass it and define `__getitem__(i)` and `__len__()`.

    Samples are numpy arrays, numbers, or tuples/dicts of them; the loader's
    collate function stacks them into batches.
    """

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset:
    """A stream of samples: subclass it and define `__iter__()`.

    The loader batches the stream in order (no shuffling, no worker processes).
    """

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    """Sample i is `tuple(t[i] for t in tensors)`; all tensors share their first dimension."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        self.tensors = tuple(np.asarray(t) for t in tensors)
        sizes = [t.shape[0] if t.ndim else None for t in self.tensors]
        if None in sizes or len(set(sizes)) != 1:
            shapes = ", ".join(str(t.shape) for t in self.tensors)
            raise ValueError(f"TensorDataset: tensors must share their first dimension, "
                             f"got shapes {shapes}")

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = [int(i) for i in indices]

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset needs at least one dataset")
        for i, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise TypeError(f"ConcatDataset: datasets[{i}] is an IterableDataset; "
                                "only map-style datasets can be concatenated")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1]) if self.cumulative_sizes else 0

    def __getitem__(self, index):
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for a ConcatDataset of {n} samples")
        index %= n
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = 0 if which == 0 else int(self.cumulative_sizes[which - 1])
        return self.datasets[which][index - start]


def random_split(dataset, lengths, generator=None):
    """Splits `dataset` into non-overlapping `Subset`s of the given lengths.

    Arguments:
      dataset: a map-style dataset.
      lengths: integer lengths summing to `len(dataset)`, or fractions summing to 1
        (remainders go round-robin to the first splits, as in PyTorch).
      generator: an int seed or a `numpy.random.Generator` (PyTorch takes a
        `torch.Generator`); `None` draws fresh entropy.

    Returns:
      A list of `Subset`s; together they hold every index once, in the order of
      `numpy.random.default_rng(generator).permutation(len(dataset))`.
    """
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError(f"random_split: lengths {lengths} sum to {sum(lengths)}, "
                         f"but the dataset has {n} samples")
    rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(
        generator)
    order = rng.permutation(n)
    bounds = np.cumsum([0] + lengths)
    return [Subset(dataset, order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
