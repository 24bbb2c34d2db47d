"""Every Conv2d layer of the reference CNNs, forward+backward, jaxdl against torch (issue 12's
target: no layer below 0.8x torch).

    python benchmarks/conv_layers.py                 # default set, one thread (runtime: below)
    python benchmarks/conv_layers.py --models resnet18 --sizes 64 --threads 2
    python benchmarks/conv_layers.py --quick         # smoke test: two layers of resnet18 at 32

The layers are collected by running each model's torch twin once (train mode, the batch of
benchmarks/models.py for that input size) with forward hooks on its Conv2d modules;
identical configurations (input shape, out channels, kernel, stride, padding, dilation,
groups, bias) are timed once and list every (model, size, layer) that uses them.
Per configuration, on the same data: `jaxdl.nn.functional.conv2d` under `jax.jit` with
`dl.xla_compiler_options()` (jaxdl's per-shape CPU lowering, `dl.backends.cpu.benchmark`
as set: True by default), against `torch.nn.functional.conv2d` + autograd; both return the
output and the gradients of input, weight and bias for a fixed random cotangent. Timed in
interleaved rounds (`_timing.interleaved_seconds`) until each side has `--max-seconds` of
timing and at least 3 rounds; compilation is the untimed warm-up. The lowering jaxdl chose
per pass comes from `dl.backends.cpu.choices()`.

Writes benchmarks/results/conv_layers.json (or --out) and a PNG beside it (torch/jaxdl per
configuration, sorted, a line at 0.8), and prints the per-(model, size) summary and the 15
worst configurations as markdown.

Runtime (estimate, not measured on the full set): the default set is 352 unique
configurations (595 layer uses). On the shared 2-core machine, resnet18 + mobilenet_v2 at
64 pixels (41 configurations) took 135 s of wall time but 50 s of CPU time, about 1.2 s a
configuration on an idle core (compilation plus 2 x 0.5 s of timing); the 224-pixel layers
are heavier (266 GFLOP for one forward+backward of every configuration, and each side runs
at least 4 passes). Expect 10-15 minutes at one thread on an idle machine; --quick takes
about 10 s. Isolated layers include the NCHW<->NHWC transposes that jaxdl's channels-last
lowerings put around each convolution (between layers of a model XLA cancels most of them).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402
from models import BATCH, MIN_SIZE  # noqa: E402 (benchmarks/models.py imports no jax/torch)

DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "vgg16", "alexnet", "googlenet")
TARGET = 0.8  # issue 12: no layer below 0.8x torch


def collect_layers(models, sizes):
    """{configuration: [(model, size, layer name), ...]} over every Conv2d each model runs."""
    import torch

    from jaxdl import models as zoo

    unknown = set(models) - set(zoo.list_models())
    if unknown:
        raise SystemExit(f"conv_layers.py: unknown models {sorted(unknown)}; "
                         f"registered: {zoo.list_models()}")
    configs = {}
    for name in models:
        torch.manual_seed(0)
        twin = zoo.model_entry(name).torch_twin().train()
        for size in sizes:
            if size < MIN_SIZE.get(name, 0):
                continue
            handles = []
            for layer, module in twin.named_modules():
                if isinstance(module, torch.nn.Conv2d):
                    if module.padding_mode != "zeros" or isinstance(module.padding, str):
                        raise SystemExit(f"conv_layers.py: {name}.{layer} pads with "
                                         f"{module.padding_mode!r}/{module.padding!r}; only zeros "
                                         "with integer padding are benchmarked")

                    def hook(module, inputs, output, name=name, size=size, layer=layer):
                        key = (tuple(inputs[0].shape), module.out_channels, module.kernel_size,
                               module.stride, module.padding, module.dilation, module.groups,
                               module.bias is not None)
                        configs.setdefault(key, []).append((name, size, layer))

                    handles.append(module.register_forward_hook(hook))
            with torch.no_grad():
                twin(torch.zeros(BATCH[size], 3, size, size))
            for handle in handles:
                handle.remove()
    return configs


def describe(key):
    shape, out, kernel, stride, padding, dilation, groups, bias = key
    return {"input": list(shape), "out_channels": out, "kernel": list(kernel),
            "stride": list(stride), "padding": list(padding), "dilation": list(dilation),
            "groups": groups, "bias": bias}


def time_configuration(key, max_seconds, seed=0):
    """(jaxdl seconds, torch seconds, median torch/jaxdl ratio, jaxdl's lowering per pass)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import jaxdl as dl
    from jaxdl.nn import functional as F

    shape, out, kernel, stride, padding, dilation, groups, bias = key
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((out, shape[1] // groups, *kernel), dtype=np.float32) * 0.1
    b = rng.standard_normal(out, dtype=np.float32) if bias else None
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y_shape = torch.nn.functional.conv2d(torch.as_tensor(x), torch.as_tensor(w), **geometry).shape
    dy = rng.standard_normal(y_shape, dtype=np.float32)

    def jax_pass(x, w, b, dy):
        y, vjp = jax.vjp(lambda x, w, b: F.conv2d(x, w, b, **geometry), x, w, b)
        return y, *vjp(dy)  # y returned too: else XLA would drop the forward convolution

    jitted = jax.jit(jax_pass, compiler_options=dl.xla_compiler_options())
    j_args = [jnp.asarray(a) if a is not None else None for a in (x, w, b, dy)]
    t_x, t_w = (torch.tensor(a, requires_grad=True) for a in (x, w))
    t_b = torch.tensor(b, requires_grad=True) if bias else None
    t_dy = torch.as_tensor(dy)
    wrt = [t for t in (t_x, t_w, t_b) if t is not None]

    def torch_pass():
        y = torch.nn.functional.conv2d(t_x, t_w, t_b, **geometry)
        return y, *torch.autograd.grad(y, wrt, t_dy)

    (j_s, _), (t_s, ratio) = _timing.interleaved_seconds(
        [(lambda: jitted(*j_args), jax.block_until_ready), (torch_pass, lambda r: r)],
        max_seconds, min_rounds=3)
    pads = tuple((p, p) for p in padding)
    lowering = [{k: c[k] for k in ("forward", "input_grad", "weight_grad")}
                for c in dl.backends.cpu.choices()
                if c["input"] == shape and c["weight"] == w.shape and c["stride"] == stride
                and c["padding"] == pads and c["dilation"] == dilation and c["groups"] == groups]
    return j_s, t_s, ratio, lowering[0] if lowering else None


def summarize(results):
    """Per (model, size): conv layers, the worst layer's ratio and name, layers below TARGET."""
    per = {}
    for record in results:
        for model, size, layer in record["layers"]:
            per.setdefault((model, size), []).append((record["ratio_torch_over_jaxdl"], layer))
    summary = []
    for (model, size), layers in sorted(per.items()):
        worst = min(layers)
        summary.append({"model": model, "size": size, "batch": BATCH[size],
                        "conv_layers": len(layers), "worst_ratio": worst[0], "worst_layer": worst[1],
                        "below_target": sum(r < TARGET for r, _ in layers)})
    return summary


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = sorted(r["ratio_torch_over_jaxdl"] for r in results)
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(range(len(ratios)), ratios, color=["tab:red" if r < TARGET else "tab:blue"
                                              for r in ratios])
    ax.axhline(TARGET, color="black", linestyle="--", label=f"target {TARGET}x")
    ax.set_yscale("log")
    ax.set_xlabel("convolution configuration (sorted)")
    ax.set_ylabel("torch time / jaxdl time (forward+backward)")
    ax.set_title("Conv2d layers of the reference CNNs: above the line jaxdl is within target")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_tables(summary, results, worst=15):
    print("\n| model | input (batch) | conv layers | worst torch/jaxdl | worst layer | below 0.8x |")
    print("|---|---|---|---|---|---|")
    for s in summary:
        print(f"| {s['model']} | {s['size']}x{s['size']} ({s['batch']}) | {s['conv_layers']} | "
              f"{s['worst_ratio']:.2f}x | {s['worst_layer']} | {s['below_target']} |")
    print(f"\n{worst} worst configurations:\n")
    print("| input | out | k / s / p / d / g | jaxdl ms | torch ms | torch/jaxdl | lowering "
          "(fwd, dx, dw) | used by |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(results, key=lambda r: r["ratio_torch_over_jaxdl"])[:worst]:
        c, low = r["config"], r["lowering"] or {}
        geometry = "/".join(str(c[k][0]) if isinstance(c[k], list) else str(c[k])
                            for k in ("kernel", "stride", "padding", "dilation", "groups"))
        users = ", ".join(f"{m}@{s}:{layer}" for m, s, layer in r["layers"][:3])
        users += f" (+{len(r['layers']) - 3})" if len(r["layers"]) > 3 else ""
        print(f"| {'x'.join(map(str, c['input']))} | {c['out_channels']} | {geometry} | "
              f"{r['jaxdl_ms']:.2f} | {r['torch_ms']:.2f} | {r['ratio_torch_over_jaxdl']:.2f}x | "
              f"{low.get('forward')}, {low.get('input_grad')}, {low.get('weight_grad')} | {users} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(DEFAULT_MODELS))
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                        default=[32, 64, 224])
    parser.add_argument("--threads", type=int, default=1, help="on each side")
    parser.add_argument("--max-seconds", type=float, default=0.5,
                        help="timing per configuration and side (at least 3 rounds)")
    parser.add_argument("--limit", type=int, default=None, help="time only the first N configs")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: resnet18 at 32 pixels, two configurations, brief timing")
    parser.add_argument("--out", default=str(_timing.RESULTS / "conv_layers.json"))
    args = parser.parse_args()
    if args.quick:
        args.models, args.sizes, args.limit, args.max_seconds = ["resnet18"], [32], 2, 0.02

    _timing.pin_threads(args.threads)  # before jax and torch are imported
    import torch
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    configs = collect_layers(args.models, args.sizes)
    keys = list(configs)[:args.limit]
    results = []
    for key in tqdm(keys, desc="conv configurations", file=sys.stderr):
        j_s, t_s, ratio, lowering = time_configuration(key, args.max_seconds)
        results.append({"config": describe(key), "layers": [list(u) for u in configs[key]],
                        "jaxdl_ms": j_s * 1e3, "torch_ms": t_s * 1e3,
                        "ratio_torch_over_jaxdl": ratio, "lowering": lowering})
    summary = summarize(results)
    out = Path(args.out)
    payload = {**_timing.machine(), "threads": args.threads, "max_seconds": args.max_seconds,
               "models": args.models, "sizes": args.sizes, "batch": BATCH, "target": TARGET,
               "configurations": results, "summary": summary}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    plot(results, out.with_suffix(".png"))
    print_tables(summary, results)
    print(f"\nwrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
