"""Data-parallel step time on real accelerators (run when a GPU machine is lent).

Run:  python benchmarks/gpu/distributed.py   -> benchmarks/results/gpu_distributed.json

Same MLP step as benchmarks/distributed.py, at every power-of-two device count
up to the number of GPUs present, for dl.jit and data_parallel (shard_map, pmap).
"""

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

sys.path.insert(0, str(Path(__file__).parents[1]))
import distributed as bench  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import optim  # noqa: E402


def run(mode: str, n: int, gpus) -> dict:
    dl.manual_seed(0)
    model = bench.mlp()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((bench.BATCH * n, 64)), jnp.float32)
    y = jnp.zeros(bench.BATCH * n, jnp.int32)
    mesh = Mesh(np.array(gpus[:n]), ("data",))
    step = dl.jit(bench.train_step) if mode == "jit" else dl.distributed.data_parallel(
        bench.train_step, mesh=mesh, mode=mode)
    start = time.perf_counter()
    step(model, opt, x, y).block_until_ready()
    compile_s = time.perf_counter() - start
    seconds = bench.median_seconds(lambda: step(model, opt, x, y).block_until_ready(), 200, 5)
    return {"mode": mode, "devices": n, "per_device_batch": bench.BATCH, "step_ms": seconds * 1e3,
            "compile_s": compile_s, "samples_per_s": bench.BATCH * n / seconds}


def main():
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        sys.exit("benchmarks/gpu/distributed.py needs a GPU (jax.devices() has none)")
    counts = [n for n in (1, 2, 4, 8) if n <= len(gpus)]
    rows = [run("jit", 1, gpus)] + [run(mode, n, gpus) for mode in ("shard_map", "pmap") for n in counts]
    for row in rows:
        print(row)
    out = Path(__file__).parents[1] / "results" / "gpu_distributed.json"
    out.write_text(json.dumps({"device": gpus[0].device_kind, "gpus": len(gpus), "rows": rows}, indent=2))
    print("wrote", out)


if __name__ == "__main__":
    main()
