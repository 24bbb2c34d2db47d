"""Ready-made datasets: the real 8x8 digits from scikit-learn, synthetic sets for benchmarks."""

import numpy as np

from jaxdl._extras import require
from jaxdl.data._dataset import Dataset, TensorDataset

# The digits split is part of the dataset's definition: never change this seed.
_DIGITS_SPLIT_SEED = 0
_DIGITS_TEST_FRACTION = 0.2


def digits(split: str = "train") -> TensorDataset:
    """The 1797 8x8 handwritten digits shipped with scikit-learn (`load_digits`).

    Arguments:
      split: "train" (80%) or "test" (20%), a fixed split: the first 20% of
        `numpy.random.default_rng(0).permutation(1797)` is the test set.

    Returns:
      A `TensorDataset` of (image float32 (1, 8, 8) in [0, 1] (pixel / 16),
      label int32 in 0..9).
    """
    if split not in ("train", "test"):
        raise ValueError(f"digits: split must be 'train' or 'test', got {split!r}")
    data = require("sklearn.datasets", "data", "datasets.digits").load_digits()
    images = (data.images.astype(np.float32) / 16.0)[:, None, :, :]
    labels = data.target.astype(np.int32)
    order = np.random.default_rng(_DIGITS_SPLIT_SEED).permutation(len(labels))
    n_test = int(round(len(labels) * _DIGITS_TEST_FRACTION))
    chosen = order[:n_test] if split == "test" else order[n_test:]
    return TensorDataset(images[chosen], labels[chosen])


def synthetic_images(num_samples: int = 1024, image_size: int = 32, channels: int = 3,
                     num_classes: int = 10, seed: int = 0) -> TensorDataset:
    """Random uint8 images (N, C, H, W) and int32 labels, held in memory."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (num_samples, channels, image_size, image_size), np.uint8)
    labels = rng.integers(0, num_classes, num_samples).astype(np.int32)
    return TensorDataset(images, labels)


class SyntheticTokens(Dataset):
    """Random token sequences for language-model benchmarks.

    Sample i is `(tokens[:-1], tokens[1:])` of a sequence of `seq_len + 1`
    int32 tokens drawn from `numpy.random.default_rng([seed, i])`, so any
    sample can be read in any order without storing the set.
    """

    def __init__(self, num_samples: int = 1024, seq_len: int = 128, vocab_size: int = 1000,
                 seed: int = 0):
        self.num_samples, self.seq_len, self.vocab_size, self.seed = (
            num_samples, seq_len, vocab_size, seed)

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        if not 0 <= index < self.num_samples:
            raise IndexError(f"SyntheticTokens: index {index} out of range [0, {self.num_samples})")
        rng = np.random.default_rng([self.seed, index])
        tokens = rng.integers(0, self.vocab_size, self.seq_len + 1).astype(np.int32)
        return tokens[:-1], tokens[1:]


def synthetic_tokens(num_samples: int = 1024, seq_len: int = 128, vocab_size: int = 1000,
                     seed: int = 0) -> SyntheticTokens:
    """A `SyntheticTokens` dataset (input, next-token target) pairs."""
    return SyntheticTokens(num_samples, seq_len, vocab_size, seed)
