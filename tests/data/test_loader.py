"""jaxdl.data: loader order, coverage, workers, resume, sharding, collate, errors; datasets."""

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
import traceback

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdl import data


def index_dataset(n):
    """Sample i is (i as a 2-vector of floats, label i): batches reveal the indices read."""
    return data.TensorDataset(np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, 1),
                              np.arange(n, dtype=np.int32))


def labels_of(batches):
    return [np.asarray(y).tolist() for _, y in batches]


def flat(batches):
    return [i for batch in labels_of(batches) for i in batch]


class FailingDataset(data.Dataset):
    """Raises from a uniquely named function when sample `bad` is read."""

    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            self.unique_reader_of_sample(i)
        return np.float32(i)

    def unique_reader_of_sample(self, i):
        raise ValueError(f"cannot read sample {i}")


class Stream(data.IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(np.arange(self.n, dtype=np.int32))


# ---- batches handed to jax without a copy ----------------------------------------------------
def image_dataset(n):
    """Sample i is a (3, 64, 64) image filled with i and label i: a batch of 4 images is
    192 KiB, enough that workers send it through shared memory rather than pickled."""
    return data.TensorDataset(np.broadcast_to(np.arange(n, dtype=np.float32)[:, None, None, None],
                                              (n, 3, 64, 64)).copy(), np.arange(n, dtype=np.int32))


def _record_allocations(monkeypatch, allocator, describe):
    """Wrap the loader's `allocator` so that `describe(array)` of each array it makes is kept
    in the returned list."""
    from jaxdl.data import _loader

    seen, real = [], getattr(_loader, allocator)

    def recording(shape, dtype):
        out = real(shape, dtype)
        seen.append(describe(out))
        return out

    monkeypatch.setattr(_loader, allocator, recording)
    return seen


# ---- order, coverage, length ---------------------------------------------------------------
def test_shuffled_order_is_the_documented_reference_permutation():
    n, seed = 103, 7
    loader = data.DataLoader(index_dataset(n), batch_size=10, shuffle=True, seed=seed)
    for epoch in range(3):  # each iteration is the next epoch, with its own order
        expected = np.random.default_rng([seed, epoch]).permutation(n)
        assert flat(loader) == expected.tolist()
    again = data.DataLoader(index_dataset(n), batch_size=10, shuffle=True, seed=seed)
    assert flat(again) == np.random.default_rng([seed, 0]).permutation(n).tolist()


def test_every_sample_once_per_epoch_and_len():
    loader = data.DataLoader(index_dataset(23), batch_size=5)
    batches = labels_of(loader)
    assert len(loader) == len(batches) == 5
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
    assert sum(batches, []) == list(range(23))
    x, _ = next(iter(loader))
    assert isinstance(x, jax.Array) and x.shape == (5, 2) and x.dtype == np.float32


def test_drop_last_drops_only_the_short_batch():
    loader = data.DataLoader(index_dataset(23), batch_size=5, shuffle=True, seed=1,
                             drop_last=True)
    batches = labels_of(loader)
    assert len(loader) == len(batches) == 4 and all(len(b) == 5 for b in batches)
    reference = np.random.default_rng([1, 0]).permutation(23)[:20]
    assert sum(batches, []) == reference.tolist()


def test_only_the_newest_iterator_runs():
    loader = data.DataLoader(index_dataset(12), batch_size=2)
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert np.asarray(next(second)[1]).tolist() == [0, 1]  # a new epoch from its start
    with pytest.raises(RuntimeError, match="superseded"):
        next(first)


def test_set_epoch_selects_that_epochs_order():
    loader = data.DataLoader(index_dataset(30), batch_size=7, shuffle=True, seed=3)
    loader.set_epoch(5)
    assert flat(loader) == np.random.default_rng([3, 5]).permutation(30).tolist()
    assert flat(loader) == np.random.default_rng([3, 6]).permutation(30).tolist()


# ---- workers ---------------------------------------------------------------------------------
def test_workers_give_the_same_batches_as_the_main_process():
    ds = index_dataset(50)
    single = data.DataLoader(ds, batch_size=8, shuffle=True, seed=11)
    workers = data.DataLoader(ds, batch_size=8, shuffle=True, seed=11, num_workers=2)
    for _ in range(2):  # two epochs through the same (persistent) worker pipeline
        ours, theirs = list(single), list(workers)
        assert len(ours) == len(theirs) == 7
        for (x0, y0), (x1, y1) in zip(ours, theirs):
            np.testing.assert_array_equal(x0, x1)
            np.testing.assert_array_equal(y0, y1)
    workers.close()
    assert multiprocessing.active_children() == []


def test_worker_exception_reaches_main_process_with_traceback_and_no_leftover_workers():
    loader = data.DataLoader(FailingDataset(40, bad=13), batch_size=4, num_workers=2)
    start = time.monotonic()
    with pytest.raises(ValueError, match="cannot read sample 13") as info:
        list(loader)
    assert time.monotonic() - start < 60
    text = "".join(traceback.format_exception(info.value))
    assert "unique_reader_of_sample" in text  # the worker's frames, not just the message
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert multiprocessing.active_children() == []


def test_ctrl_c_stops_workers_cleanly(tmp_path):
    script = tmp_path / "interrupt.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, os, signal, time
        import numpy as np
        from jaxdl import data

        if __name__ == "__main__":
            # As in an interactive shell: a run started in the background (CI) inherits
            # SIGINT ignored, and Python then never raises KeyboardInterrupt.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            ds = data.TensorDataset(np.arange(4000, dtype=np.float32))
            loader = data.DataLoader(ds, batch_size=4, num_workers=2)
            pids = []
            try:
                for i, batch in enumerate(loader):
                    if i == 3:
                        pids = [p.pid for p in multiprocessing.active_children()]
                        os.killpg(0, signal.SIGINT)  # Ctrl-C: the whole process group
                        time.sleep(5)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
            print("workers", *pids, flush=True)
            print("alive", len(multiprocessing.active_children()), flush=True)
    """))
    # A session of its own, so that the interrupt reaches the script and its workers only.
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=os.getcwd(), start_new_session=True)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.split("\n") if " " in line)
    assert "interrupted" in result.stdout
    assert len(lines["workers"].split()) == 2  # the interrupt came while both workers ran
    assert lines["alive"] == "0"
    assert "KeyboardInterrupt" not in result.stderr  # workers did not die mid-batch
    for pid in map(int, lines["workers"].split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# ---- checkpointable position ----------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_epoch_yields_exactly_the_remaining_batches(num_workers):
    ds = index_dataset(45)
    reference = data.DataLoader(ds, batch_size=4, shuffle=True, seed=2)
    next(iter(reference))  # epoch 0 (abandoned)
    full = labels_of(reference)  # epoch 1, whole
    loader = data.DataLoader(ds, batch_size=4, shuffle=True, seed=2, num_workers=num_workers)
    list(loader)  # epoch 0
    seen = []
    for _, y in loader:  # epoch 1, stopped after 5 batches
        seen.append(np.asarray(y).tolist())
        if len(seen) == 5:
            state = loader.state_dict()
            break
    assert seen == full[:5]
    resumed = data.DataLoader(ds, batch_size=4, shuffle=True, seed=99, num_workers=num_workers)
    resumed.load_state_dict(state)  # restores the seed too
    assert labels_of(resumed) == full[5:]
    assert flat(resumed) == np.random.default_rng([2, 2]).permutation(45).tolist()
    resumed.close()
    loader.close()


def test_load_state_dict_rejects_a_different_setup():
    state = data.DataLoader(index_dataset(10), batch_size=4).state_dict()
    with pytest.raises(ValueError, match="batch_size=4 but this loader has batch_size=5"):
        data.DataLoader(index_dataset(10), batch_size=5).load_state_dict(state)


# ---- sharding over processes and devices -----------------------------------------------------
def test_shards_partition_each_epoch_like_distributed_sampler():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler

    n = 21  # odd: shards are padded to equal length by wrapping around, as in torch
    shards = [data.DataLoader(index_dataset(n), batch_size=3, shard_index=r, num_shards=2)
              for r in range(2)]
    for rank, loader in enumerate(shards):
        expected = list(DistributedSampler(range(n), num_replicas=2, rank=rank, shuffle=False))
        assert flat(loader) == expected and len(loader) == 4
    shuffled = [flat(data.DataLoader(index_dataset(20), batch_size=5, shuffle=True, seed=4,
                                     shard_index=r, num_shards=2)) for r in range(2)]
    assert sorted(shuffled[0] + shuffled[1]) == list(range(20))  # disjoint, complete
    assert shuffled[0] == np.random.default_rng([4, 0]).permutation(20)[0::2].tolist()
    del torch


def test_shard_defaults_come_from_jax_processes():
    loader = data.DataLoader(index_dataset(8))
    assert (loader.shard_index, loader.num_shards) == (jax.process_index(), jax.process_count())


def test_prefetch_onto_a_sharding_and_a_device():
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    loader = data.DataLoader(index_dataset(32), batch_size=16, sharding=sharding)
    x, y = next(iter(loader))
    assert x.sharding == sharding and y.sharding == sharding
    np.testing.assert_array_equal(np.asarray(y), np.arange(16))
    short_last = data.DataLoader(index_dataset(20), batch_size=16, sharding=sharding)
    with pytest.raises(ValueError, match=r"batch of shape \(4, 2\) does not split.*drop_last"):
        list(short_last)
    device = jax.devices()[3]
    x, _ = next(iter(data.DataLoader(index_dataset(8), batch_size=4, device=device)))
    assert x.devices() == {device}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_stay_intact_while_later_batches_are_made(num_workers):
    loader = data.DataLoader(image_dataset(24), batch_size=4, shuffle=True, seed=5,
                             num_workers=num_workers)
    kept = [batch for _ in range(2) for batch in loader]  # two epochs, every batch held
    loader.close()
    expected = np.concatenate([data.epoch_order(24, e, 5) for e in range(2)]).reshape(-1, 4)
    assert len(kept) == len(expected)
    for (x, y), labels in zip(kept, expected):
        np.testing.assert_array_equal(np.asarray(y), labels)
        np.testing.assert_array_equal(np.asarray(x), np.broadcast_to(
            labels[:, None, None, None].astype(np.float32), (4, 3, 64, 64)))
    pointers = [x.unsafe_buffer_pointer() for x, _ in kept]
    assert len(set(pointers)) == len(pointers)  # no two live batches share memory


def test_main_process_batches_are_adopted_by_jax_without_a_copy(monkeypatch):
    allocated = _record_allocations(monkeypatch, "_aligned_empty", lambda a: a.ctypes.data)
    loader = data.DataLoader(image_dataset(12), batch_size=4, device=jax.devices("cpu")[0])
    batches = list(loader)
    # Each image batch lies in the buffer it was collated into (64-byte aligned, which
    # XLA's CPU client needs to alias it), one fresh buffer per batch.
    assert [x.unsafe_buffer_pointer() for x, _ in batches] == allocated
    assert all(p % 64 == 0 for p in allocated)
    np.testing.assert_array_equal(np.asarray(batches[2][0])[:, 0, 0, 0], [8, 9, 10, 11])


def test_a_batch_that_fails_to_collate_leaves_no_shared_memory_behind(monkeypatch):
    import gc

    from jaxdl.data import _loader

    names = _record_allocations(monkeypatch, "_shared_empty", lambda a: a.shm.name)

    class RaggedLabels(data.Dataset):  # the images fit; the second field does not
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.zeros((3, 64, 64), np.float32), np.zeros(3 if i != 2 else 4)

    source = _loader._EpochBatches(RaggedLabels(), 4, 2, (8, 0, False, 0, 1), None,
                                   in_workers=True)
    with pytest.raises(ValueError, match="dataset index 2 has shape"):
        source[0]
    gc.collect()
    assert len(names) == 1  # the images went to shared memory, and it is gone again
    # grain unlinks on a background thread once its workers have run in this process
    deadline = time.monotonic() + 10
    while os.path.exists(f"/dev/shm/{names[0].lstrip('/')}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/dev/shm/{names[0].lstrip('/')}")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="batch_size"):
        data.DataLoader(index_dataset(4), batch_size=0)
    with pytest.raises(ValueError, match="IterableDataset"):
        data.DataLoader(Stream(4), shuffle=True)
    with pytest.raises(ValueError, match="shard_index"):
        data.DataLoader(index_dataset(4), shard_index=2, num_shards=2)


def test_iterable_dataset_batches_in_order_and_resumes():
    loader = data.DataLoader(Stream(10), batch_size=4)
    assert labels_of((None, b) for b in loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed = data.DataLoader(Stream(10), batch_size=4, drop_last=True)
    resumed.load_state_dict({**state, "drop_last": 1})
    assert [np.asarray(b).tolist() for b in resumed] == [[4, 5, 6, 7]]
