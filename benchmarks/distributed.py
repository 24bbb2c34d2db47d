"""Data-parallel step time at 1, 2, 4, 8 simulated CPU devices.

Run:  .venv/bin/python benchmarks/distributed.py [--quick]

The simulated devices share this machine's cores, so this shows the cost of
splitting a step (collectives, per-shard dispatch), not a speed-up: with real
devices each shard would run on its own chip (see benchmarks/gpu/distributed.py).
"""

import argparse
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
sys.path.insert(0, str(Path(__file__).parent))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _timing import machine, median_seconds, write_json  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import nn, optim  # noqa: E402

BATCH = 256


def mlp():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def train_step(model, opt, x, y):
    loss, grads = dl.value_and_grad(lambda m: nn.CrossEntropyLoss()(m(x), y))(model)
    opt.step(grads)
    return loss


def measure(devices: int, mode: str, steps: int, repeats: int) -> float:
    dl.manual_seed(0)
    model = mlp()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((BATCH, 64)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 10, BATCH))
    if devices == 1 and mode == "jit":
        step = dl.jit(train_step)
    else:
        mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
        step = dl.distributed.data_parallel(train_step, mesh=mesh, mode=mode)
    return median_seconds(lambda: step(model, opt, x, y).block_until_ready(), steps, repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    steps, repeats = (5, 1) if args.quick else (100, 5)
    rows = [{"devices": 1, "mode": "jit", "seconds": measure(1, "jit", steps, repeats)}]
    for mode in ("shard_map", "pmap"):
        for devices in (1, 2, 4, 8):
            rows.append({"devices": devices, "mode": mode, "seconds": measure(devices, mode, steps, repeats)})
    base = rows[0]["seconds"]
    print(f"MLP 64-256-256-10, global batch {BATCH}, SGD momentum; simulated CPU devices share 2 cores")
    print(f"{'mode':10} {'devices':>7} {'ms/step':>8} {'samples/s':>10} {'vs 1-device jit':>16}")
    for row in rows:
        row["samples_per_s"] = BATCH / row["seconds"]
        row["vs_single_jit"] = row["seconds"] / base
        print(f"{row['mode']:10} {row['devices']:>7} {row['seconds'] * 1e3:>8.2f} "
              f"{row['samples_per_s']:>10.0f} {row['vs_single_jit']:>15.2f}x")
    if not args.quick:
        print("wrote", write_json("distributed.json", {**machine(), "batch": BATCH, "rows": rows}))


if __name__ == "__main__":
    main()
