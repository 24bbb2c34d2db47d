"""default_collate: dtypes and values as np.stack and torch, errors naming the sample."""

import numpy as np
import pytest

from jaxdl import data


class RaggedDataset(data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return np.zeros(3 if i != 4 else 5, np.float32)


def test_default_collate_gives_the_dtype_and_values_of_np_stack():
    cases = [[1, 2], [1.5, 2.0], [True, False], [1 + 2j, 3j], [np.int32(1), np.int32(2)],
             [np.float16(1), np.float16(2)], [1, 2.5], [np.int32(1), 2.5], [1, 2**63],
             [np.zeros(3, np.float32), np.ones(3, np.float64)],  # promoted
             [np.array(["a", "b"]), np.array(["xyz", "z"])],  # widest string kept
             [np.zeros((0, 3)), np.zeros((0, 3))], [np.zeros((2, 0)), np.ones((2, 0))],
             [np.arange(6).reshape(2, 3), np.arange(6, 12).reshape(2, 3)]]
    for samples in cases:
        expected = np.stack([np.asarray(s) for s in samples])
        ours = data.default_collate(samples)
        assert ours.dtype == expected.dtype, samples
        np.testing.assert_array_equal(ours, expected)


# ---- collate and bad input -------------------------------------------------------------------
def test_default_collate_matches_torch_on_nested_samples():
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate

    samples = [{"image": np.full((2, 2), i, np.float32), "pair": (i, np.float32(i) / 2)}
               for i in range(3)]
    ours, theirs = data.default_collate(samples), torch_collate(samples)
    np.testing.assert_array_equal(ours["image"], theirs["image"].numpy())
    for a, b in zip(ours["pair"], theirs["pair"]):
        np.testing.assert_array_equal(a, b.numpy())
    del torch


def test_inconsistent_shapes_name_the_sample_index_and_both_shapes():
    loader = data.DataLoader(RaggedDataset(), batch_size=3)
    with pytest.raises(ValueError, match=r"dataset index 4 has shape \(5,\) but sample at "
                                         r"dataset index 3 has shape \(3,\)"):
        list(loader)
