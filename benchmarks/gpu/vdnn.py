"""vDNN on a GPU: peak device memory and step time per policy, VGG-16 and GoogLeNet.

Each (model, policy) runs in its own process, so `peak_bytes_in_use` is that
configuration's own peak (allocator preallocation off). A process builds the
model on the GPU, applies `dl.memory.offload`, and trains on synthetic data
with SGD (momentum 0.9, as the paper's Caffe runs) in one `dl.jit` step; it
reports the median step time over `--steps` steps after warm-up, the device's
`peak_bytes_in_use`, and `dl.memory.report`'s planned peak for comparison.
Paper settings: VGG-16 at batch 256, GoogLeNet at batch 128, 224x224, fp32;
"dyn" plans for a 12 GiB budget (the paper's Titan X).

    python benchmarks/gpu/vdnn.py [--full] [--steps 5] [--dry-run] [--out PATH]

Default: VGG-16 at batch 256, every policy, 5 timed steps (sized for run.py's
150 s cap on one H200: about 30 s a process); --full adds GoogLeNet at 128.
--dry-run: the digits CNN at batch 4 on the CPU (planned figures only: the CPU
keeps no device memory counters). Writes benchmarks/results/gpu_vdnn.json (or
--out) after each configuration: per model and policy the peak, the step time,
and the memory cut and slowdown against "none". Target (issue 7): a >= 80% peak
cut on VGG-16 at <= 18% slowdown.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import _part

POLICIES = ("none", "dyn", "all", "conv", "remat")  # "none" first: the baseline
IMAGE = ((3, 224, 224), 1000)  # input shape, classes
CONFIGS = {  # model: (batch, input shape, classes, dyn budget in bytes)
    "lease": {"vgg16": (256, *IMAGE, 12 * 2**30)},
    "full": {"vgg16": (256, *IMAGE, 12 * 2**30), "googlenet": (128, *IMAGE, 12 * 2**30)},
    "dry": {"cnn": (4, (1, 8, 8), 10, None)},  # None: "none"'s planned peak (fits, whatever the planner)
}


def worker(name, policy, config, steps):
    """One configuration in this process; prints one JSON line."""
    import jax
    import jax.numpy as jnp

    import jaxdl as dl
    from jaxdl import models, nn, optim

    batch, shape, classes, budget = config
    dl.manual_seed(0)
    model = models.get_model(name)
    x = jax.random.normal(jax.random.key(1), (batch, *shape), jnp.float32)
    y = jax.random.randint(jax.random.key(2), (batch,), 0, classes)
    options = {}
    if policy == "dyn":
        options = dict(budget_bytes=budget, example_inputs=(jax.ShapeDtypeStruct(x.shape, x.dtype),))
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
    # Its own process: XLA's peak since the start is this configuration's peak.
    peak = dl.accelerator.max_memory_allocated() if dl.accelerator.is_available() else None
    plan = dl.memory.plan_of(model)
    print(json.dumps(dict(
        model=name, policy=policy, configuration=dl.memory.policy_of(model), batch=batch,
        peak_bytes_in_use=peak, step_s=statistics.median(times),
        first_step_s=compile_s, loss=loss, planned_peak_bytes=planned.planned_peak_bytes,
        planned_device_residual_bytes=planned.device_bytes,
        planned_host_residual_bytes=planned.host_bytes,
        plan=None if plan is None else str(plan))))


def run_one(name, policy, config, steps):
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps([name, policy, config, steps])],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return dict(model=name, policy=policy, batch=config[0], error=proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compare(row, base):
    if "error" in row or "error" in base:
        return
    row["slowdown"] = row["step_s"] / base["step_s"] - 1
    if row["peak_bytes_in_use"] is not None:
        row["peak_cut"] = 1 - row["peak_bytes_in_use"] / base["peak_bytes_in_use"]
    peak = row["peak_bytes_in_use"] or row["planned_peak_bytes"]
    print(f"{row['model']:<10} {row['policy']:<6} ({row['configuration']:<5}) peak "
          f"{peak / 2**30:7.3f} GiB{'' if row['peak_bytes_in_use'] else ' (planned)'} "
          f"cut {row.get('peak_cut', float('nan')):6.1%}  step {row['step_s'] * 1e3:8.1f} ms  "
          f"slowdown {row['slowdown']:6.1%}", flush=True)


def main():
    if "--worker" in sys.argv:
        worker(*json.loads(sys.argv[sys.argv.index("--worker") + 1]))
        return

    def options(parser):
        parser.add_argument("--full", action="store_true", help="VGG-16 and GoogLeNet")
        parser.add_argument("--steps", type=int, default=5)

    args = _part.parse_args(__doc__.splitlines()[0], "gpu_vdnn.json", options)
    import jax

    if jax.default_backend() != "gpu" and not args.dry_run:
        sys.exit(f"benchmarks/gpu/vdnn.py needs a GPU (jax backend is {jax.default_backend()!r}); "
                 "--dry-run for the code path on the CPU, benchmarks/memory.py for CPU accounting")
    configs = CONFIGS["dry" if args.dry_run else "full" if args.full else "lease"]
    steps = 2 if args.dry_run else args.steps
    result = dict(device=str(jax.devices()[0]), jax=jax.__version__, dry_run=args.dry_run,
                  steps=steps, results={})
    for name, config in configs.items():
        rows = result["results"][name] = {}
        for policy in POLICIES:
            if config[3] is None and "planned_peak_bytes" in rows.get("none", {}):
                config = (*config[:3], rows["none"]["planned_peak_bytes"])
            rows[policy] = run_one(name, policy, config, steps)
            _compare(rows[policy], rows["none"])
            if "error" in rows[policy]:
                print(f"{name} {policy}: FAILED\n{rows[policy]['error']}", flush=True)
            vgg = result["results"].get("vgg16", {})
            result["vgg16_policies_meeting_target"] = [
                p for p, r in vgg.items() if r.get("peak_cut", 0) >= 0.8 and r.get("slowdown", 1) <= 0.18]
            result["summary"] = "; ".join(
                f"{m} {p}: " + ("FAILED" if "error" in r else
                                f"cut {r['peak_cut']:.0%} slow {r['slowdown']:.0%}" if "peak_cut" in r
                                else f"slow {r.get('slowdown', 0):.0%}")
                for m, model_rows in result["results"].items() for p, r in model_rows.items())
            _part.write(args.out, result)
    print(f"VGG-16 policies with >= 80% peak cut at <= 18% slowdown: "
          f"{result.get('vgg16_policies_meeting_target') or 'none'}")
    print(f"wrote {args.out}")
    failed = [r for rows in result["results"].values() for r in rows.values() if "error" in r]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
