"""Data-parallel step time on real accelerators: dl.jit and data_parallel (shard_map, pmap).

    python benchmarks/gpu/distributed.py [--dry-run] [--out PATH]

Same MLP step as benchmarks/distributed.py, at every power-of-two device count
up to the number of GPUs present (one on the lent H200: then it shows the cost
of the data-parallel wrapper, not a speed-up); about 15 s there. --dry-run: the
same code path on 1 and 2 simulated CPU devices with a few steps. Writes
benchmarks/results/gpu_distributed.json (or --out) after each row.
"""

import sys
import time

import _part
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

import jaxdl as dl
from jaxdl import optim

bench = _part.benchmark("distributed")  # its model, step and timing


def run(mode: str, n: int, devices, steps: int, repeats: int) -> dict:
    dl.manual_seed(0)
    model = bench.mlp()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((bench.BATCH * n, 64)), jnp.float32)
    y = jnp.zeros(bench.BATCH * n, jnp.int32)
    mesh = Mesh(np.array(devices[:n]), ("data",))
    step = dl.jit(bench.train_step) if mode == "jit" else dl.distributed.data_parallel(
        bench.train_step, mesh=mesh, mode=mode)
    start = time.perf_counter()
    step(model, opt, x, y).block_until_ready()
    compile_s = time.perf_counter() - start
    seconds = bench.median_seconds(lambda: step(model, opt, x, y).block_until_ready(), steps, repeats)
    return {"mode": mode, "devices": n, "per_device_batch": bench.BATCH, "step_ms": seconds * 1e3,
            "compile_s": compile_s, "samples_per_s": bench.BATCH * n / seconds}


def main():
    args = _part.parse_args(__doc__.splitlines()[0], "gpu_distributed.json")
    devices = jax.devices() if args.dry_run else [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        sys.exit("benchmarks/gpu/distributed.py needs a GPU (jax.devices() has none); "
                 "--dry-run runs it on simulated CPU devices")
    steps, repeats = (3, 1) if args.dry_run else (200, 5)
    counts = [n for n in ((1, 2) if args.dry_run else (1, 2, 4, 8)) if n <= len(devices)]
    result = {"device": devices[0].device_kind, "devices": len(devices), "dry_run": args.dry_run,
              "rows": []}
    for mode, n in [("jit", 1)] + [(m, n) for m in ("shard_map", "pmap") for n in counts]:
        row = run(mode, n, devices, steps, repeats)
        print(row, flush=True)
        result["rows"].append(row)
        result["summary"] = ", ".join(f"{r['mode']}x{r['devices']} {r['step_ms']:.2f} ms"
                                      for r in result["rows"])
        _part.write(args.out, result)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
