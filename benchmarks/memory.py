"""Activation residuals kept for backward, on the device and on the host, per vDNN policy.

The paper's settings (Rhu et al. 2016): AlexNet (227x227), OverFeat fast (231x231),
GoogLeNet (224x224) at batch 128, VGG-16 (224x224) at batch 256, fp32. Everything
is accounted on abstract inputs with `dl.memory.report` (nothing runs, no weights
are drawn), so this runs on a CPU in seconds. It also records the "dyn" planner's
choice for VGG-16 at batch 256 on a 12 GiB card.

    python benchmarks/memory.py            # the paper's networks and batch sizes
    python benchmarks/memory.py --quick    # smoke test: small widths, batch 8

Writes benchmarks/results/memory.json (memory.quick.json with --quick) and a bar
chart memory.png (memory.quick.png).
"""

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import jaxdl as dl  # noqa: E402
from benchmarks._timing import RESULTS, machine, write_json  # noqa: E402
from jaxdl import models, nn  # noqa: E402

POLICIES = ("none", "conv", "all", "remat")
# name, input size, batch, builder kwargs
FULL = [("alexnet", 227, 128, {}), ("overfeat", 231, 128, {}), ("googlenet", 224, 128, {}),
        ("vgg16", 224, 256, {})]
QUICK = [("alexnet", 64, 8, dict(width=0.125)), ("googlenet", 32, 8, dict(width=0.125)),
         ("vgg16", 32, 8, dict(width=0.125))]
BUDGET = 12 * 2**30
GIB = 2**30


def _loss(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def measure(name, size, batch, kwargs):
    model = dl.memory.abstract_model(models.get_model, name, **kwargs)
    x = jax.ShapeDtypeStruct((batch, 3, size, size), jnp.float32)
    y = jax.ShapeDtypeStruct((batch,), jnp.int32)
    rows = {}
    for policy in POLICIES:
        r = dl.memory.report(_loss, dl.memory.offload(model, policy), x, y, compiled=False)
        rows[policy] = dict(device_residual_bytes=r.device_bytes, host_residual_bytes=r.host_bytes,
                            planned_peak_bytes=r.planned_peak_bytes, step_flops=r.step_flops,
                            parts=r.peak_parts())
    none = rows["none"]
    for row in rows.values():
        row["device_residual_cut"] = 1 - row["device_residual_bytes"] / none["device_residual_bytes"]
        row["planned_peak_cut"] = 1 - row["planned_peak_bytes"] / none["planned_peak_bytes"]
        row["extra_flops"] = row["step_flops"] / none["step_flops"] - 1
    result = dict(input=[batch, 3, size, size], builder_kwargs=kwargs, policies=rows)
    if name == "vgg16":
        plan = dl.memory.plan(model, (x,), budget_bytes=BUDGET)
        result["dyn_12GiB"] = dict(configuration=plan.configuration, reason=plan.reason,
                                   text=str(plan))
    return result


def print_table(results):
    print(f"{'model':<10} {'policy':<6} {'dev resid GiB':>13} {'host GiB':>9} {'cut':>6} "
          f"{'planned peak GiB':>16} {'peak cut':>8} {'extra FLOPs':>11}")
    for name, result in results.items():
        for policy, row in result["policies"].items():
            print(f"{name:<10} {policy:<6} {row['device_residual_bytes'] / GIB:>13.3f} "
                  f"{row['host_residual_bytes'] / GIB:>9.3f} {row['device_residual_cut']:>6.1%} "
                  f"{row['planned_peak_bytes'] / GIB:>16.3f} {row['planned_peak_cut']:>8.1%} "
                  f"{row['extra_flops']:>11.1%}")
        if "dyn_12GiB" in result:
            print(result["dyn_12GiB"]["text"])


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results), 3.6))
    for ax, (name, result) in zip(axes, results.items()):
        rows = result["policies"]
        device = [rows[p]["device_residual_bytes"] / GIB for p in POLICIES]
        host = [rows[p]["host_residual_bytes"] / GIB for p in POLICIES]
        ax.bar(POLICIES, device, label="device")
        ax.bar(POLICIES, host, bottom=device, label="host (pinned)")
        ax.set_title(f"{name} (batch {result['input'][0]})")
        ax.set_ylabel("residuals kept for backward (GiB)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small widths, batch 8")
    args = parser.parse_args()
    configs = QUICK if args.quick else FULL
    results = {name: measure(name, size, batch, kwargs) for name, size, batch, kwargs in configs}
    print_table(results)
    suffix = ".quick" if args.quick else ""
    png = RESULTS / f"memory{suffix}.png"
    plot(results, png)
    path = write_json(f"memory{suffix}.json", dict(
        machine=machine(), jax=jax.__version__, budget_bytes=BUDGET,
        method="dl.memory.report on abstract inputs (residual accounting, nothing runs)",
        results=results))
    print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
