"""Samples/s of jaxdl's DataLoader vs torch's on the same augmented in-memory image set.

Both loaders read the very same dataset object: N uint8 images (3, 32, 32),
each read does a random 32x32 crop of the 4-pixel zero-padded image and a
random horizontal flip in numpy (the usual CIFAR augmentation), then the
loader stacks batches of 128. jaxdl hands out jax arrays (device_put onto the
CPU device), torch hands out tensors. With workers, torch runs with
`persistent_workers=True`, as jaxdl's workers persist across epochs; the first
epoch (worker start-up) is reported separately and the throughput is the
median over the later epochs.

    python benchmarks/dataloader.py            # full: 10000 images, 6 epochs
    python benchmarks/dataloader.py --quick    # smoke test: 1024 images, 3 epochs
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import time

import numpy as np

from jaxdl import data

BATCH_SIZE = 128


class AugmentedImages(data.Dataset):
    """Random crop (padding 4) + horizontal flip over in-memory uint8 images, in numpy."""

    def __init__(self, images, labels, pad=4):
        self.images, self.labels, self.pad = images, labels, pad
        self._rng = None  # made on first use, so each worker process gets its own stream

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        if self._rng is None:
            self._rng = np.random.default_rng()
        image = self.images[i]
        size, p = image.shape[-1], self.pad
        padded = np.pad(image, ((0, 0), (p, p), (p, p)))
        top, left = self._rng.integers(0, 2 * p + 1, 2)
        crop = padded[:, top:top + size, left:left + size]
        if self._rng.random() < 0.5:
            crop = crop[:, :, ::-1]
        return np.ascontiguousarray(crop, dtype=np.float32) / 255.0, self.labels[i]


def epoch_times(loader, epochs, wait):
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        for x, _ in loader:
            wait(x)
        times.append(time.perf_counter() - start)
    return times


def summarize(times, num_samples):
    steady = statistics.median(times[1:])
    return {"first_epoch_s": times[0], "epoch_s": times[1:],
            "samples_per_s": num_samples / steady}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/"
                                                     "dataloader[.quick].json)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    num_samples, epochs = (1024, 3) if args.quick else (10000, 6)
    images = data.datasets.synthetic_images(num_samples, image_size=32)
    dataset = AugmentedImages(*images.tensors)
    results = {"batch_size": BATCH_SIZE, "num_samples": num_samples, "epochs": epochs,
               "quick": args.quick, "torch_threads": 1, "cpus": os.cpu_count(),
               "machine": platform.processor() or platform.machine(), "runs": []}
    for workers in (0, 2):
        ours = data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, seed=0,
                               num_workers=workers)
        jax_times = epoch_times(ours, epochs, lambda x: x.block_until_ready())
        ours.close()
        theirs = torch.utils.data.DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True,
                                             num_workers=workers,
                                             persistent_workers=workers > 0)
        torch_times = epoch_times(theirs, epochs, lambda x: None)
        del theirs
        run = {"num_workers": workers, "jaxdl": summarize(jax_times, num_samples),
               "torch": summarize(torch_times, num_samples)}
        run["speedup"] = run["jaxdl"]["samples_per_s"] / run["torch"]["samples_per_s"]
        results["runs"].append(run)
        print(f"num_workers={workers}: jaxdl {run['jaxdl']['samples_per_s']:.0f} samples/s, "
              f"torch {run['torch']['samples_per_s']:.0f} samples/s, "
              f"ratio {run['speedup']:.2f}x (first epoch: jaxdl "
              f"{run['jaxdl']['first_epoch_s']:.2f} s, torch {run['torch']['first_epoch_s']:.2f} s)",
              flush=True)
    default = "dataloader.quick.json" if args.quick else "dataloader.json"
    out = pathlib.Path(args.out or pathlib.Path(__file__).parent / "results" / default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":  # grain spawns its workers: they re-import this file
    main()
