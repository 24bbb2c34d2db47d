"""Datasets: Subset/ConcatDataset/random_split as torch, digits, synthetic sets."""

import numpy as np
import pytest

from jaxdl import data


def index_dataset(n):
    """Sample i is (i as a 2-vector of floats, label i): batches reveal the indices read."""
    return data.TensorDataset(np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, 1),
                              np.arange(n, dtype=np.int32))


# ---- datasets --------------------------------------------------------------------------------
def test_subset_concat_and_random_split_match_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import ConcatDataset as TorchConcat

    a, b = index_dataset(5), index_dataset(3)
    ours, theirs = data.ConcatDataset([a, b]), TorchConcat([a, b])
    assert len(ours) == len(theirs) == 8
    for i in range(-8, 8):
        assert ours[i][1] == theirs[i][1]
    parts = data.random_split(index_dataset(10), [0.7, 0.3], generator=0)
    assert [len(p) for p in parts] == [7, 3]
    order = np.random.default_rng(0).permutation(10)
    assert [parts[0][i][1] for i in range(7)] == order[:7].tolist()
    assert data.Subset(index_dataset(10), [9, 2])[1][1] == 2
    del torch


def test_digits_is_sklearns_set_scaled_and_split_80_20():
    from sklearn.datasets import load_digits

    raw = load_digits()
    train, test = data.datasets.digits("train"), data.datasets.digits("test")
    assert (len(train), len(test)) == (1438, 359)
    x, y = train[0]
    assert x.shape == (1, 8, 8) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    # Every image, times 16, is one of sklearn's with its label; the splits are disjoint.
    keys = {raw.images[i].astype(np.float32).tobytes(): raw.target[i] for i in range(1797)}
    seen = []
    for split in (train, test):
        images, labels = split.tensors
        for image, label in zip(images, labels):
            assert keys[(image[0] * 16).tobytes()] == label
        seen.extend(image.tobytes() for image in images)
    assert len(set(seen)) == len(keys)
    np.testing.assert_array_equal(data.datasets.digits("test").tensors[1], test.tensors[1])
    with pytest.raises(ValueError, match="'valid'"):
        data.datasets.digits("valid")


def test_synthetic_datasets():
    images = data.datasets.synthetic_images(16, image_size=32)
    x, y = images[3]
    assert x.shape == (3, 32, 32) and x.dtype == np.uint8 and 0 <= y < 10
    tokens = data.datasets.synthetic_tokens(4, seq_len=6, vocab_size=50)
    inputs, targets = tokens[2]
    np.testing.assert_array_equal(inputs[1:], targets[:-1])
    np.testing.assert_array_equal(tokens[2][0], inputs)  # reproducible per index
