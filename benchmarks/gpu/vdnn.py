"""vDNN on a GPU: peak device memory and step time per policy, VGG-16 and GoogLeNet.

Each (model, policy) runs in its own process, so `peak_bytes_in_use` is that
configuration's own peak (allocator preallocation off). A process builds the
model on the GPU, applies `dl.memory.offload`, and trains on synthetic data
with SGD (momentum 0.9, as the paper's Caffe runs) in one `dl.jit` step; it
reports the median step time over `--steps` steps after warm-up, the device's
`peak_bytes_in_use`, and `dl.memory.report`'s planned peak for comparison.
Paper settings: VGG-16 at batch 256, GoogLeNet at batch 128, 224x224, fp32;
"dyn" plans for a 12 GiB budget (the paper's Titan X).

    python benchmarks/gpu/vdnn.py [--quick] [--steps 10]

Writes benchmarks/results/gpu_vdnn.json: per model and policy the peak, the step
time, and the memory cut and slowdown against "none". Target (issue 7): a
>= 80% peak cut on VGG-16 at <= 18% slowdown. Refuses to run without a GPU.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "gpu_vdnn.json"
POLICIES = ("none", "conv", "all", "remat", "dyn")
BUDGET = 12 * 2**30
FULL = {"vgg16": 256, "googlenet": 128}
QUICK = {"vgg16": 16, "googlenet": 16}


def worker(name, policy, batch, steps):
    """One configuration in this process; prints one JSON line."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT))
    import jaxdl as dl
    from jaxdl import models, nn, optim

    dl.manual_seed(0)
    model = models.get_model(name)
    x = jax.random.normal(jax.random.key(1), (batch, 3, 224, 224), jnp.float32)
    y = jax.random.randint(jax.random.key(2), (batch,), 0, 1000)
    options = {}
    if policy == "dyn":
        options = dict(budget_bytes=BUDGET, example_inputs=(jax.ShapeDtypeStruct(x.shape, x.dtype),))
    dl.memory.offload(model, policy, **options)

    def loss_fn(m, x, y):
        return nn.functional.cross_entropy(m(x), y)

    planned = dl.memory.report(loss_fn, model, jax.ShapeDtypeStruct(x.shape, x.dtype),
                               jax.ShapeDtypeStruct(y.shape, y.dtype), compiled=False)
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    @dl.jit
    def step(model, opt, x, y):
        loss, grads = dl.value_and_grad(loss_fn)(model, x, y)
        opt.step(grads)
        return loss

    start = time.perf_counter()
    float(step(model, opt, x, y))
    compile_s = time.perf_counter() - start
    float(step(model, opt, x, y))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = float(step(model, opt, x, y))
        times.append(time.perf_counter() - start)
    stats = jax.devices()[0].memory_stats() or {}
    plan = dl.memory.plan_of(model)
    print(json.dumps(dict(
        model=name, policy=policy, configuration=dl.memory.policy_of(model), batch=batch,
        peak_bytes_in_use=stats.get("peak_bytes_in_use"), step_s=statistics.median(times),
        first_step_s=compile_s, loss=loss, planned_peak_bytes=planned.planned_peak_bytes,
        planned_device_residual_bytes=planned.device_bytes,
        planned_host_residual_bytes=planned.host_bytes,
        plan=None if plan is None else str(plan))))


def run_one(name, policy, batch, steps):
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    proc = subprocess.run([sys.executable, __file__, "--worker", name, policy, str(batch),
                           str(steps)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return dict(model=name, policy=policy, batch=batch, error=proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 16, 3 steps")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--worker", nargs=4, metavar=("MODEL", "POLICY", "BATCH", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, policy, batch, steps = args.worker
        worker(name, policy, int(batch), int(steps))
        return
    import jax

    if jax.default_backend() != "gpu":
        sys.exit(f"benchmarks/gpu/vdnn.py needs a GPU (jax backend is {jax.default_backend()!r}); "
                 "for CPU-side accounting run benchmarks/memory.py")
    batches, steps = (QUICK, 3) if args.quick else (FULL, args.steps)
    results = {}
    for name, batch in batches.items():
        rows = {p: run_one(name, p, batch, steps) for p in POLICIES}
        base = rows["none"]
        for row in rows.values():
            if "error" in row or "error" in base:
                continue
            row["peak_cut"] = 1 - row["peak_bytes_in_use"] / base["peak_bytes_in_use"]
            row["slowdown"] = row["step_s"] / base["step_s"] - 1
            print(f"{name:<10} {row['policy']:<6} ({row['configuration']:<5}) peak "
                  f"{row['peak_bytes_in_use'] / 2**30:7.2f} GiB (planned "
                  f"{row['planned_peak_bytes'] / 2**30:6.2f}) cut {row['peak_cut']:6.1%}  step "
                  f"{row['step_s'] * 1e3:8.1f} ms  slowdown {row['slowdown']:6.1%}")
        for row in rows.values():
            if "error" in row:
                print(f"{name} {row['policy']}: FAILED\n{row['error']}")
        results[name] = rows
    vgg = results.get("vgg16", {})
    target = [p for p, r in vgg.items() if r.get("peak_cut", 0) >= 0.8 and r.get("slowdown", 1) <= 0.18]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(dict(
        device=str(jax.devices()[0]), jax=jax.__version__, quick=args.quick, steps=steps,
        results=results, vgg16_policies_meeting_target=target), indent=2) + "\n")
    print(f"VGG-16 policies with >= 80% peak cut at <= 18% slowdown: {target or 'none'}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
