"""`DataLoader` on grain: deterministic order, worker processes, device prefetch, resumable.

The loader sees training as one long sequence of batches: batch `k` belongs to
epoch `k // len(loader)`, and its samples are the `k % len(loader)`-th slice of
that epoch's order (`epoch_order`). A grain `MapDataset` over that sequence is
read by `mp_prefetch` worker processes, each taking every `num_workers`-th batch
and grain interleaving them back in order, so any number of workers gives the
same batches; without workers the main process reads that sequence directly.
The pipeline outlives an epoch (workers stay up and keep prefetching the next
epoch) and is rebuilt only when the position jumps (`set_epoch`,
`load_state_dict`, an epoch left early).

Batches are collated into memory that jax can adopt without a copy: 64-byte
aligned buffers in the main process, shared memory in a worker (page-aligned,
which grain passes on by name). `device_put` onto the CPU then aliases them, so
each batch gets a fresh buffer that no later batch writes into.
"""

import atexit
import collections
import itertools
import math
import signal
import weakref

import jax
import numpy as np

from jaxdl._extras import require
from jaxdl.data._collate import collate_samples
from jaxdl.data._dataset import IterableDataset

# The batch sequence must have a length: enough epochs for any run.
_MAX_EPOCHS = 2**20

# XLA's CPU client uses a host buffer in place (`device_put` without a copy) only when its
# data starts on a 64-byte boundary; numpy's large allocations often start 16 bytes past one.
_ALIGN = 64

# Arrays below this size travel from workers pickled through grain's queue: a shared
# memory segment costs more system calls than copying a few kilobytes (labels).
_MIN_SHARED_BYTES = 64 * 1024

# Loaders whose workers may be running: stopped at exit (a garbage-collected loader
# closes itself). The hook is registered after grain and multiprocessing are imported,
# so that it runs before their own exit hooks kill the workers (atexit runs LIFO).
_open_loaders = weakref.WeakSet()


def _close_open_loaders():
    for loader in list(_open_loaders):
        loader.close()


def epoch_order(num_samples, epoch, seed, shuffle=True, shard_index=0, num_shards=1):
    """The dataset indices one process visits in `epoch`, in order.

    The reference order is `numpy.random.default_rng([seed, epoch]).permutation(n)`
    (or `arange(n)` without shuffling). With `num_shards > 1` the order is padded
    by wrapping around to a multiple of `num_shards` and process `shard_index`
    takes every `num_shards`-th index from position `shard_index`, as
    `torch.utils.data.DistributedSampler` does: shards are disjoint (up to the
    padding) and equally long, so every process runs the same number of steps.
    """
    order = np.random.default_rng([seed, epoch]).permutation(num_samples) if shuffle else (
        np.arange(num_samples))
    if num_shards > 1:
        order = np.resize(order, math.ceil(num_samples / num_shards) * num_shards)
        order = order[shard_index::num_shards]
    return order


class _EpochBatches:
    """Random-access source for grain: item k is the collated batch k of the whole run."""

    def __init__(self, dataset, batch_size, batches_per_epoch, order_args, collate_fn,
                 in_workers=False):
        self.dataset = dataset
        self.batch_size = batch_size
        self.batches_per_epoch = batches_per_epoch
        self.order_args = order_args  # (num_samples, seed, shuffle, shard_index, num_shards)
        self.collate_fn = collate_fn
        # Where the default collate writes a batch: straight into shared memory in a worker
        # (grain then sends it as is), else into aligned memory that jax can adopt.
        self.allocate = _shared_empty if in_workers else _aligned_empty
        self._cached = (None, None)  # (epoch, order): a worker reads one epoch at a time

    def __len__(self):
        return self.batches_per_epoch * _MAX_EPOCHS

    def _order(self, epoch):
        if self._cached[0] != epoch:
            n, seed, shuffle, shard_index, num_shards = self.order_args
            self._cached = (epoch, epoch_order(n, epoch, seed, shuffle, shard_index, num_shards))
        return self._cached[1]

    def __getitem__(self, k):
        epoch, j = divmod(int(k), self.batches_per_epoch)
        indices = self._order(epoch)[j * self.batch_size:(j + 1) * self.batch_size]
        indices = indices.tolist()  # Python ints, as torch's samplers give
        samples = [self.dataset[i] for i in indices]
        if self.collate_fn is not None:
            return self.collate_fn(samples)
        made = []

        def allocate(shape, dtype):
            made.append(self.allocate(shape, dtype))
            return made[-1]

        try:
            return collate_samples(samples, indices, allocate=allocate)
        except BaseException:
            # A later field failed (e.g. ragged shapes): shared memory segments already made
            # for earlier fields would outlive the batch that never gets sent.
            for array in made:
                if hasattr(array, "unlink_on_del"):
                    array.unlink_on_del()
            raise


def _aligned_empty(shape, dtype):
    """A fresh empty array whose data is `_ALIGN`-byte aligned (see `_ALIGN`).

    Fresh per batch: a jax array made from it without a copy owns it from then on, so no
    later batch may be written into the same memory.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _shared_empty(shape, dtype):
    """An empty array in a new shared memory segment (page-aligned), for large fields.

    grain's workers copy every array of a batch into shared memory; one that is already
    there is passed on by name, which saves that copy (as torch's workers stack into
    shared memory). The main process maps it and `device_put` adopts it on CPU.
    """
    if math.prod(shape) * dtype.itemsize < _MIN_SHARED_BYTES:
        return _aligned_empty(shape, dtype)
    grain_mp = require("grain.multiprocessing", "data", "DataLoader(num_workers>0)")
    return grain_mp.SharedMemoryArray(shape, dtype)


class DataLoader:
    """Batches of a dataset, like `torch.utils.data.DataLoader`, read through grain.

    Arguments:
      dataset: a map-style dataset (`__getitem__`, `__len__`) or an `IterableDataset`.
      batch_size: samples per batch.
      shuffle: visit samples in a new random order each epoch (see `epoch_order`).
      drop_last: drop the last batch of an epoch when it is smaller than `batch_size`.
      num_workers: worker processes (grain `mp_prefetch`, spawned: scripts need an
        `if __name__ == "__main__":` guard). Any count yields the same batches.
      collate_fn: turns a list of samples into a batch; default stacks numpy arrays
        (tuples/dicts field by field) and names the sample whose shape differs.
      seed: base of the shuffling order; `None` draws one (kept in `state_dict()`).
      prefetch: batches moved to the device ahead of use (and buffered per worker).
      device: a `jax.Device` for the batches (default: JAX's default device).
      sharding: a `jax.sharding.Sharding`; each process's batch becomes its part of
        a global array (`jax.make_array_from_process_local_data`).
      shard_index, num_shards: this process's slice of every epoch (default
        `jax.process_index()` / `jax.process_count()`), like `DistributedSampler`.

    Iterating gives one epoch. Each new iteration starts the next epoch, unless
    `set_epoch` or `load_state_dict` chose the position since the last one.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, num_workers=0,
                 collate_fn=None, seed=None, prefetch=2, device=None, sharding=None, *,
                 shard_index=None, num_shards=None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be an int >= 0, got {num_workers!r}")
        if device is not None and sharding is not None:
            raise ValueError("DataLoader: pass either device or sharding, not both")
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable and (shuffle or num_workers):
            raise ValueError("DataLoader: an IterableDataset is read in order in the main "
                             f"process; got shuffle={shuffle}, num_workers={num_workers}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.seed = int(np.random.SeedSequence().generate_state(1)[0]) if seed is None else seed
        self.prefetch = prefetch
        self.device = device
        self.sharding = sharding
        self.num_shards = jax.process_count() if num_shards is None else num_shards
        self.shard_index = jax.process_index() if shard_index is None else shard_index
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"DataLoader: shard_index must be in [0, {self.num_shards}), "
                             f"got {self.shard_index}")
        self._epoch = 0
        self._batch = 0  # batches of the current epoch already yielded
        self._position_chosen = True  # the next iteration starts at (_epoch, _batch)
        self._generation = 0  # bumps with every iteration: only the newest iterator runs
        self._pipeline = None
        self._pipeline_next = None  # global batch index the pipeline yields next

    # ---- sizes ------------------------------------------------------------------------------
    def _samples_per_shard(self):
        n = len(self.dataset)
        return n if self.num_shards == 1 else math.ceil(n / self.num_shards)

    def __len__(self):
        if self.iterable and not hasattr(self.dataset, "__len__"):
            raise TypeError("len(DataLoader) is unknown for an IterableDataset without __len__")
        per_shard = len(self.dataset) if self.iterable else self._samples_per_shard()
        if self.drop_last:
            return per_shard // self.batch_size
        return math.ceil(per_shard / self.batch_size)

    # ---- position and checkpoint state ------------------------------------------------------
    def set_epoch(self, epoch: int):
        """Starts the next iteration at the beginning of `epoch` (its own order)."""
        self._epoch, self._batch = int(epoch), 0
        self._position_chosen = True

    def state_dict(self) -> dict:
        """Where the loader stands: the next iteration continues from here after a reload."""
        return {"epoch": self._epoch, "batch": self._batch, "seed": self.seed,
                "num_samples": len(self.dataset) if hasattr(self.dataset, "__len__") else -1,
                "batch_size": self.batch_size, "shuffle": int(self.shuffle),
                "drop_last": int(self.drop_last), "num_shards": self.num_shards,
                "shard_index": self.shard_index}

    def load_state_dict(self, state: dict):
        """Restores `state_dict()`; the next iteration yields exactly the remaining batches."""
        mine = self.state_dict()
        for key in ("num_samples", "batch_size", "shuffle", "drop_last", "num_shards",
                    "shard_index"):
            if key in state and int(state[key]) != mine[key]:
                raise ValueError(f"DataLoader.load_state_dict: saved {key}={int(state[key])} "
                                 f"but this loader has {key}={mine[key]}")
        self.seed = int(state["seed"])
        self._epoch, self._batch = int(state["epoch"]), int(state["batch"])
        if not self.iterable and self._batch >= len(self):
            self._epoch, self._batch = self._epoch + 1, 0
        self._position_chosen = True

    # ---- iteration --------------------------------------------------------------------------
    def __iter__(self):
        if not self._position_chosen:
            self._epoch, self._batch = self._epoch + 1, 0
        self._position_chosen = False
        self._generation += 1
        if self.iterable:
            return self._iterate_stream(self._generation)
        return self._iterate_epoch(self._generation)

    def _iterate_epoch(self, generation):
        batches_per_epoch = len(self)
        remaining = batches_per_epoch - self._batch
        if remaining <= 0:
            return
        pipeline = self._pipeline_from(self._epoch * batches_per_epoch + self._batch)
        ahead = collections.deque()
        completed = False
        try:
            while True:
                self._check_current(generation)
                # Stay within the epoch: the pipeline then sits at the next epoch's start.
                while remaining and len(ahead) < max(self.prefetch, 1):
                    ahead.append(self._to_device(next(pipeline)))
                    self._pipeline_next += 1
                    remaining -= 1
                if not ahead:
                    completed = True
                    return
                self._batch += 1
                yield ahead.popleft()
        finally:
            # Left early (break, error, KeyboardInterrupt): prefetched batches are lost, so
            # the pipeline no longer matches the position; stop its workers now.
            if not completed and generation == self._generation:
                self.close()

    def _iterate_stream(self, generation):
        skip = self._batch  # a resumed pass re-reads the stream up to where it stopped
        samples = []
        for sample in self.dataset:
            samples.append(sample)
            if len(samples) < self.batch_size:
                continue
            batch, samples = samples, []
            if skip:
                skip -= 1
                continue
            self._check_current(generation)
            self._batch += 1
            yield self._to_device(self._collate(batch))
        if samples and not self.drop_last and not skip:
            self._check_current(generation)
            self._batch += 1
            yield self._to_device(self._collate(samples))

    def _collate(self, samples):
        if self.collate_fn is None:
            return collate_samples(samples, list(range(len(samples))), "stream position",
                                   allocate=_aligned_empty)
        return self.collate_fn(samples)

    def _check_current(self, generation):
        if generation != self._generation:
            raise RuntimeError("DataLoader: this iterator was superseded by a newer iter(loader); "
                               "a loader runs one iteration at a time")

    def _pipeline_from(self, start):
        if self._pipeline is not None and self._pipeline_next == start:
            return self._pipeline
        self.close()
        source = _EpochBatches(
            self.dataset, self.batch_size, len(self),
            (len(self.dataset), self.seed, self.shuffle, self.shard_index, self.num_shards),
            self.collate_fn, in_workers=self.num_workers > 0)
        if not self.num_workers:
            # In the main process grain's iterator would only add its per-element
            # bookkeeping (statistics, metrics, tree walks: 0.1-0.4 ms a batch, several
            # percent of the benchmark's epoch), so the batches are read straight off.
            self._pipeline, self._pipeline_next = map(source.__getitem__, itertools.count(start)), start
            return self._pipeline
        grain = require("grain", "data", "DataLoader(num_workers>0)")  # deferred: slow to import

        ds = grain.MapDataset.source(source)[start:].to_iter_dataset(
            grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))  # in memory: no threads
        _mark_absl_flags_parsed()
        ds = grain.experimental.WithOptionsIterDataset(
            ds, grain.experimental.DatasetOptions(min_shm_size=_MIN_SHARED_BYTES))
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=self.num_workers, per_worker_buffer_size=max(self.prefetch, 1)),
            worker_init_fn=_ignore_sigint)
        self._pipeline, self._pipeline_next = iter(ds), start
        if not _open_loaders:
            atexit.unregister(_close_open_loaders)
            atexit.register(_close_open_loaders)
        _open_loaders.add(self)
        return self._pipeline

    def _to_device(self, batch):
        if self.sharding is not None:
            def put(a):
                try:
                    return jax.make_array_from_process_local_data(self.sharding, a)
                except ValueError as e:
                    raise ValueError(
                        f"DataLoader: a batch of shape {a.shape} does not split over the "
                        f"sharding; use drop_last=True or a batch_size it divides ({e})") from e
            return jax.tree.map(lambda a: put(a) if isinstance(a, np.ndarray) else a, batch)
        # One device_put for all arrays of the batch: a call costs tens of microseconds.
        leaves, treedef = jax.tree.flatten(batch)
        arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, np.ndarray)]
        for i, placed in zip(arrays, jax.device_put([leaves[i] for i in arrays], self.device)):
            leaves[i] = placed
        return jax.tree.unflatten(treedef, leaves)

    def close(self):
        """Stops the worker processes (they restart on the next iteration)."""
        pipeline, self._pipeline, self._pipeline_next = self._pipeline, None, None
        _open_loaders.discard(self)
        if pipeline is not None and hasattr(pipeline, "close"):
            pipeline.close()

    def __del__(self):
        if "_pipeline" in self.__dict__:
            self.close()

    def __repr__(self):
        return (f"DataLoader(batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, num_workers={self.num_workers}, "
                f"shard {self.shard_index}/{self.num_shards})")


def _ignore_sigint(worker_index, worker_count):
    # Ctrl-C reaches the whole process group: the main process stops the workers (closing
    # the pipeline), so workers must not die mid-batch with their own KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _mark_absl_flags_parsed():
    # grain reads absl flags; outside an absl app nobody parsed them, and reading raises.
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
