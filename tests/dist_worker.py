"""Worker for tests/distributed/test_distributed.py, started by the launcher (one process per rank).

Each process owns 4 simulated CPU devices and its half of every global batch;
rank 0 writes the losses and final parameters to the file named by argv[1].
With argv[2] == "fail", rank 1 raises instead, to test the launcher's cleanup.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import numpy as np  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import nn, optim  # noqa: E402


def global_batches(steps=3, batch=16):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((batch, 6)).astype(np.float32), rng.integers(0, 3, batch))
            for _ in range(steps)]


def make_model():
    dl.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def train_step(model, opt, x, y):
    loss, grads = dl.value_and_grad(lambda m: nn.CrossEntropyLoss()(m(x), y))(model)
    opt.step(grads)
    return loss


def main():
    out_path, mode = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "train"
    rank, world = dl.distributed.init(timeout_s=60)
    if mode == "fail" and rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    if mode == "fail":
        import time

        time.sleep(120)  # the launcher must stop this process when rank 1 fails
    model = nn.parallel.DistributedDataParallel(make_model())
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = dl.distributed.data_parallel(train_step)
    losses = []
    for x, y in global_batches():
        half = len(x) // world
        local = slice(rank * half, (rank + 1) * half)
        losses.append(float(step(model, opt, x[local], y[local])))
    if rank == 0:
        params = {k: np.asarray(v) for k, v in model.module.state_dict().items()}
        np.savez(out_path, losses=np.array(losses), **params)
    print(f"rank {rank} of {world} done, {dl.distributed.default_mesh().size} devices")


if __name__ == "__main__":
    main()
