"""Samples/s of jaxdl's DataLoader vs torch's on the same augmented in-memory image set.

Both loaders read the very same dataset object: N uint8 images (3, 32, 32),
each read does a random 32x32 crop of the 4-pixel zero-padded image and a
random horizontal flip in numpy, per sample (the usual CIFAR augmentation),
then the loader stacks batches of 128. jaxdl hands out jax arrays (on the CPU
device), torch hands out tensors. With workers, torch runs with
`persistent_workers=True`, as jaxdl's workers persist across epochs.

The two loaders are timed in one run, side by side. Without workers every batch
is made in this thread when asked for, so the loaders go in lockstep: one batch
of each in turn (who goes first alternates), adding up each one's `iter()` and
`next()` times. With workers they take turns of an epoch (the order alternates
every round); each turn starts with an untimed lead-in epoch, because the
loader that waited has its prefetch buffers full (jaxdl's grain workers keep
prefetching, torch's next iterator is created ahead) and their sizes differ, so
only epochs read at the steady rate are timed. The headline jaxdl/torch ratio
is the median over rounds of the paired ratios (the machine's load changes
between rounds); samples/s per loader is N over its median timed epoch, also
per CPU second (this process plus the loader's workers). The first epoch
(worker start-up) is reported separately. One thread for XLA and for torch.

    python benchmarks/dataloader.py            # full: 10000 images, 12 rounds
    python benchmarks/dataloader.py --quick    # smoke test: 1024 images, 2 rounds
"""

import argparse
import itertools
import json
import os
import pathlib
import platform
import statistics
import time

# Before jax is imported (XLA's CPU thread pools are fixed at start); spawned
# workers re-import this file and get the same setting. This keeps Eigen's pool to one
# thread only: XLA's other pools still see every core (CPU affinity bounds them, as
# _timing.pin_threads does), which is what a user's loader competes with.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

import numpy as np  # noqa: E402

from jaxdl import data  # noqa: E402

BATCH_SIZE = 128


class AugmentedImages(data.Dataset):
    """Random crop (padding 4) + horizontal flip over in-memory uint8 images, in numpy."""

    def __init__(self, images, labels, pad=4):
        self.images, self.labels, self.pad = images, labels, pad
        self._rng, self._pid = None, None  # made on first use in each process

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        if self._pid != os.getpid():  # a worker (forked or spawned) starts its own stream
            self._rng, self._pid = np.random.default_rng(), os.getpid()
        image = self.images[i]
        size, p = image.shape[-1], self.pad
        padded = np.pad(image, ((0, 0), (p, p), (p, p)))
        top, left = self._rng.integers(0, 2 * p + 1, 2)
        crop = padded[:, top:top + size, left:left + size]
        if self._rng.random() < 0.5:
            crop = crop[:, :, ::-1]
        return np.ascontiguousarray(crop, dtype=np.float32) / 255.0, self.labels[i]


class Contender:
    """One loader and how to read an epoch of it: wall seconds and CPU seconds."""

    def __init__(self, name, loader, wait, torch_style):
        self.name, self.loader, self.wait = name, loader, wait
        self.torch_style = torch_style
        self._ahead = None
        self.workers = []  # psutil handles of this loader's worker processes

    def epoch(self):
        cpu = _cpu_seconds(self.workers)
        start = time.perf_counter()
        batches, self._ahead = self._ahead or iter(self.loader), None
        for x, _ in batches:
            self.wait(x)
        seconds = time.perf_counter() - start
        if self.torch_style:
            # torch's persistent workers start the next epoch only in `iter()`: create the
            # iterator now, as jaxdl's workers go on to the next epoch by themselves.
            self._ahead = iter(self.loader)
        return seconds, _cpu_seconds(self.workers) - cpu


def _cpu_seconds(workers):
    """CPU time of this process and `workers`: less sensitive than wall time to other
    programs sharing the cores (it still counts what the loader itself spends)."""
    total = time.process_time()
    for process in workers:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except Exception:  # a worker that exited
            pass
    return total


def _children():
    try:
        import psutil
    except ImportError:
        return {}
    return {p.pid: p for p in psutil.Process().children(recursive=True)}


def measure(contenders, rounds, epochs_per_turn, lead_in):
    """First epoch of each, then `rounds` rounds of turns.

    Returns {name: (first epoch (wall, cpu), [[(wall, cpu) per epoch] per turn])}.
    """
    first = {}
    for c in contenders:
        before = _children()
        first[c.name] = c.epoch()
        c.workers = [p for pid, p in _children().items() if pid not in before]
    timed = {c.name: [] for c in contenders}
    for r in range(rounds):
        for c in (contenders if r % 2 == 0 else contenders[::-1]):
            if lead_in:
                c.epoch()
            timed[c.name].append([c.epoch() for _ in range(epochs_per_turn)])
    return {name: (first[name], timed[name]) for name in first}


def measure_lockstep(contenders, rounds, epochs_per_turn):
    """Without workers: the loaders' epochs run side by side, batch for batch.

    Each batch of either loader is made in this thread when asked for, so taking
    one batch from each in turn (who goes first alternates) and adding up the
    time of each `iter()` and `next()` lets both see the same moments of the
    machine's load. Same return value as `measure`.
    """
    first = {c.name: c.epoch() for c in contenders}
    timed = {c.name: [] for c in contenders}
    for _ in range(rounds):
        for name in timed:
            timed[name].append([])
        for _ in range(epochs_per_turn):
            for name, seconds in _lockstep_epoch(contenders).items():
                timed[name][-1].append(seconds)
    return {name: (first[name], timed[name]) for name in first}


def _lockstep_epoch(contenders):
    """One epoch of each contender, batch for batch: {name: (wall, cpu) seconds}."""
    totals = {c.name: [0.0, 0.0] for c in contenders}
    iterators = {}
    for c in contenders:
        wall, cpu = time.perf_counter(), time.process_time()
        iterators[c.name] = iter(c.loader)
        totals[c.name][0] += time.perf_counter() - wall
        totals[c.name][1] += time.process_time() - cpu
    for k in itertools.count():
        finished = 0
        for c in (contenders if k % 2 == 0 else contenders[::-1]):
            wall, cpu = time.perf_counter(), time.process_time()
            batch = next(iterators[c.name], None)
            if batch is not None:
                c.wait(batch[0])
            totals[c.name][0] += time.perf_counter() - wall
            totals[c.name][1] += time.process_time() - cpu
            finished += batch is None
        if finished:
            assert finished == len(contenders), "the loaders gave different batch counts"
            return {name: tuple(t) for name, t in totals.items()}


def summarize(first, turns, num_samples):
    walls = [wall for turn in turns for wall, _ in turn]
    cpus = [cpu for turn in turns for _, cpu in turn]
    return {"first_epoch_s": first[0], "epoch_s": walls, "epoch_cpu_s": cpus,
            "samples_per_s": num_samples / statistics.median(walls),
            "samples_per_cpu_s": num_samples / statistics.median(cpus)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="turns per loader")
    parser.add_argument("--epochs-per-turn", type=int, default=1)
    parser.add_argument("--workers", default="0,2", help="num_workers values, comma-separated")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/"
                                                     "dataloader[.quick].json)")
    args = parser.parse_args()
    import grain
    import jax
    import torch

    torch.set_num_threads(1)
    num_samples, rounds = (1024, 2) if args.quick else (10000, 12)
    rounds = args.rounds or rounds
    images = data.datasets.synthetic_images(num_samples, image_size=32)
    dataset = AugmentedImages(*images.tensors)
    results = {"batch_size": BATCH_SIZE, "num_samples": num_samples, "rounds": rounds,
               "epochs_per_turn": args.epochs_per_turn, "quick": args.quick,
               "torch_threads": torch.get_num_threads(), "xla_flags": os.environ["XLA_FLAGS"],
               "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
               "versions": {"jax": jax.__version__, "torch": torch.__version__,
                            "grain": getattr(grain, "__version__", "?"),
                            "numpy": np.__version__},
               "load_average_before": os.getloadavg(), "runs": []}
    for workers in (int(w) for w in args.workers.split(",")):
        ours = data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, seed=0,
                               num_workers=workers)
        theirs = torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True,
                                             num_workers=workers,
                                             persistent_workers=workers > 0)
        contenders = [Contender("jaxdl", ours, lambda x: x.block_until_ready(), False),
                      Contender("torch", theirs, lambda x: None, workers > 0)]
        if workers:
            timings = measure(contenders, rounds, args.epochs_per_turn, lead_in=True)
        else:
            timings = measure_lockstep(contenders, rounds, args.epochs_per_turn)
        ours.close()
        del theirs
        run = {"num_workers": workers,
               "method": "turns with a lead-in epoch" if workers else "lockstep, batch for batch"}
        run.update({name: summarize(*t, num_samples) for name, t in timings.items()})
        # Round by round (neighbours in time share the machine's load): torch time / jaxdl
        # time. Their median is the headline; the load on a shared machine moves the
        # medians of the two loaders' own epochs more than it moves a pair.
        run["speedup_per_round"] = [sum(w for w, _ in t) / sum(w for w, _ in j) for j, t in
                                    zip(timings["jaxdl"][1], timings["torch"][1])]
        run["speedup"] = statistics.median(run["speedup_per_round"])
        run["ratio_of_median_samples_per_s"] = (run["jaxdl"]["samples_per_s"]
                                                / run["torch"]["samples_per_s"])
        run["cpu_speedup"] = (run["jaxdl"]["samples_per_cpu_s"]
                              / run["torch"]["samples_per_cpu_s"])
        results["runs"].append(run)
        print(f"num_workers={workers}: jaxdl {run['jaxdl']['samples_per_s']:.0f} samples/s, "
              f"torch {run['torch']['samples_per_s']:.0f} samples/s; jaxdl/torch "
              f"{run['speedup']:.3f}x (median of rounds: "
              f"{', '.join(f'{s:.2f}' for s in run['speedup_per_round'])}; per CPU second "
              f"{run['cpu_speedup']:.3f}x; first epoch: jaxdl "
              f"{run['jaxdl']['first_epoch_s']:.2f} s, torch {run['torch']['first_epoch_s']:.2f} s)",
              flush=True)
    results["load_average_after"] = os.getloadavg()
    default = "dataloader.quick.json" if args.quick else "dataloader.json"
    out = pathlib.Path(args.out or pathlib.Path(__file__).parent / "results" / default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":  # grain spawns its workers: they re-import this file
    main()
