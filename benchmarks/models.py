"""Every registered model's training step: jaxdl `dl.jit` against torch eager (and torch.compile).

    python benchmarks/models.py                      # default set (runtime: see below)
    python benchmarks/models.py --models resnet18,mobilenet_v2 --sizes 64 --threads 1

One step = forward, loss (cross-entropy; BCE-with-logits for ncf), backward, SGD with
momentum 0.9. Both sides start from the torch twin's weights and see the same batch.
Each model runs at each input size and thread count in its own worker process (XLA's
thread count is fixed when jax starts; `torch.set_num_threads` on the torch side; see
`run_worker`). Per configuration: the first step of each side is timed alone (compile
time for jaxdl and torch.compile), then both sides step in turn until a round faults no
fresh memory in (at most `WARMUP_ROUNDS`), then `--rounds` interleaved rounds of
`--steps` steps each, or more where a round would be shorter than `--min-round-seconds`
(the order alternates every round; a round that faulted fresh memory in is taken again,
at most `MAX_RETAKES` times, see `measure`); the figure is the median over rounds of the
mean step time.

torch.compile (inductor) is a third column for the configurations in `INDUCTOR`
(`--inductor all|none|default`): on this 2-core machine inductor needs minutes for a
CNN's training graph, so the default keeps it to the small models.

Writes benchmarks/results/models.json and models.png, and prints the README table.
Bounded runtime: every configuration stops its timed rounds after `--max-seconds`
(at least 3 rounds); compile (first step) time is not bounded. The default set took 10 min
on an AMD EPYC Zen 5 VM, 31 min on an AMD EPYC (family 23) one (2026-12-01) and 25 min on
an AMD EPYC Zen 4 one (2026-12-02; 18-21 min on 2026-12-05).
"""

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402

CNNS = ["alexnet", "overfeat", "vgg11", "vgg16", "vgg19", "googlenet", "resnet18", "resnet50",
        "mobilenet_v2"]
# Batch per (CNN, input size): small where a 1-thread step would take seconds.
BATCH = {32: 16, 64: 8, 224: 2}
HEAVY_AT_224 = {"vgg11", "vgg16", "vgg19", "overfeat", "googlenet"}  # seconds a step: --heavy
# The stride-4 stems and pools take a small input down to nothing: AlexNet's (torchvision's too)
# at 32 pixels, OverFeat's below 71 (its last 2x2 pool needs a 2x2 map).
MIN_SIZE = {"alexnet": 64, "overfeat": 71}
# Every model at its sizes; CNNs at 32, 64 and 224 (except HEAVY_AT_224 at 224).
DEFAULT_SIZES = (32, 64, 224)
INDUCTOR = {"mlp", "cnn", "ncf"}
WARMUP_ROUNDS = 10
MAX_RETAKES = 4


def configurations(models, sizes, heavy):
    from jaxdl import models as zoo

    configs = []
    for name in models or zoo.list_models():
        if name in CNNS:
            configs += [(name, size, BATCH[size]) for size in sizes
                        if size >= MIN_SIZE.get(name, 0)
                        and (size != 224 or heavy or name not in HEAVY_AT_224)]
        elif name in ("mlp", "cnn"):
            configs.append((name, 8, 64))
        elif name == "gpt":
            configs.append((name, 128, 16))
        elif name == "gnmt":
            configs.append((name, 32, 32))
        elif name == "ncf":
            configs.append((name, 1, 4096))
        else:
            raise SystemExit(f"benchmarks/models.py: no batch defined for model {name!r}")
    return configs


def make_batch(name, size, batch, rng):
    """Numpy inputs (a tuple) and targets for one step."""
    import numpy as np

    if name in CNNS:
        return ((rng.standard_normal((batch, 3, size, size), dtype=np.float32),),
                rng.integers(0, 1000, batch))
    if name in ("mlp", "cnn"):
        return (rng.standard_normal((batch, 1, 8, 8), dtype=np.float32),), rng.integers(0, 10, batch)
    if name == "gpt":
        tokens = rng.integers(0, 256, (batch, size + 1))
        return (tokens[:, :-1],), tokens[:, 1:]
    if name == "gnmt":
        return (rng.integers(1, 256, (batch, size)), rng.integers(1, 256, (batch, size))), \
            rng.integers(1, 256, (batch, size))
    if name == "ncf":
        return (rng.integers(0, 6040, batch), rng.integers(0, 3706, batch)), \
            rng.integers(0, 2, batch).astype(np.float32)
    raise ValueError(name)


def _losses(name, F):  # noqa: N803
    if name == "ncf":
        return F.binary_cross_entropy_with_logits
    if name in ("gpt", "gnmt"):
        return lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy


def build_steps(name, inputs, target, inductor):
    """The three contenders' step functions (each blocks until its step is done)."""
    import jax.numpy as jnp
    import torch

    import jaxdl as dl
    from jaxdl import models, nn, optim

    entry = models.model_entry(name)
    dl.manual_seed(0)
    torch.manual_seed(0)
    twin = entry.torch_twin().train()
    model = entry.build().train()
    model.load_state_dict(twin.state_dict())
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    jax_loss = _losses(name, nn.functional)

    @dl.jit
    def jax_step(model, opt, inputs, target):
        loss, grads = dl.value_and_grad(lambda m: jax_loss(m(*inputs), target))(model)
        opt.step(grads)
        return loss

    j_inputs, j_target = tuple(jnp.asarray(x) for x in inputs), jnp.asarray(target)
    torch_loss = _losses(name, torch.nn.functional)
    t_inputs, t_target = tuple(torch.as_tensor(x) for x in inputs), torch.as_tensor(target)

    def torch_stepper(module):
        t_opt = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)

        def step():
            t_opt.zero_grad(set_to_none=True)
            loss = torch_loss(module(*t_inputs), t_target)
            loss.backward()
            t_opt.step()
            return loss.item()

        return step

    steps = {"jaxdl": lambda: float(jax_step(model, opt, j_inputs, j_target)),
             "torch": torch_stepper(twin)}
    if inductor:
        steps["torch.compile"] = torch_stepper(torch.compile(twin))
    return steps


def minor_faults() -> int:
    """Pages this process has faulted in so far: a change means the heap took fresh memory."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(steps, rounds, per_round, max_seconds, min_round_seconds):
    first, warm, times = {}, {}, {name: [] for name in steps}
    for name, step in steps.items():
        start = time.perf_counter()
        step()
        first[name] = time.perf_counter() - start
    # Warm up until the heap stops growing: a round of one step per side with no page fault
    # (at most WARMUP_ROUNDS). The two sides share one malloc heap, and until it has room for
    # both a step faults its fresh pages in: VGG-19's jaxdl step took 800 ms instead of 350
    # while it faulted 300 MB in, up to five steps after the first (2026-12-01).
    warmup_rounds, faulted = 0, True
    while faulted and warmup_rounds < WARMUP_ROUNDS:
        faults = minor_faults()
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            warm[name] = time.perf_counter() - start
        warmup_rounds += 1
        faulted = minor_faults() != faults
    # Rounds of a few milliseconds measure the switch between the sides (caches, and the
    # other side's thread pool still spinning) more than the steps: a 2 ms step timed 2 at
    # a time read 0.77x torch at 2 threads, 20 at a time 1.14x (2026-12-01).
    per_round = max(per_round, math.ceil(min_round_seconds / min(warm.values())))
    deadline = time.perf_counter() + max_seconds
    order = list(steps)
    # A round in which the heap grew times the VM's first touch of fresh memory, not the
    # step: VGG-11 at 32 px took 3.4-4.6 s for such a step instead of 0.4 s (111-115k page
    # faults, 2026-12-03). With async dispatch (jaxdl's until stop 57; JAX_CPU_ENABLE_ASYNC_DISPATCH=1
    # keeps it) the heap can still grow after the warm-up (a step's temporaries allocated
    # before the last step's are freed), so such a round is taken again, at most MAX_RETAKES
    # times per configuration, and counted.
    retaken = {name: 0 for name in steps}
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            while True:
                faults = minor_faults()
                start = time.perf_counter()
                for _ in range(per_round):
                    steps[name]()
                seconds = time.perf_counter() - start
                grew = minor_faults() != faults
                if not grew or sum(retaken.values()) >= MAX_RETAKES:
                    break
                retaken[name] += 1
            times[name].append(seconds / per_round)
        if time.perf_counter() > deadline and r >= 2:
            break
    return {name: {"step_ms": 1e3 * statistics.median(t), "first_step_s": first[name],
                   "warmup_rounds": warmup_rounds, "rounds": len(t), "steps_per_round": per_round,
                   "retaken_rounds": retaken[name]}
            for name, t in times.items()}


def worker(args):
    threads = args.threads[0]
    _timing.pin_threads(threads)
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    results = []
    for name, size, batch in configurations(args.models, args.sizes, args.heavy):
        tag = f"{name}@{size}"
        inductor = args.inductor == "all" or (args.inductor == "default"
                                              and (name in INDUCTOR or tag in INDUCTOR))
        row = {"model": name, "size": size, "batch": batch, "threads": threads}
        try:
            inputs, target = make_batch(name, size, batch, np.random.default_rng(0))
            steps = build_steps(name, inputs, target, inductor)
            row.update(measure(steps, args.rounds, args.steps, args.max_seconds,
                               args.min_round_seconds))
            row["speedup_vs_torch"] = row["torch"]["step_ms"] / row["jaxdl"]["step_ms"]
        except Exception as err:  # e.g. an input too small for the model: recorded, not fatal
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        if not inductor:
            row["torch.compile"] = ("not run: not in --inductor's set (inductor takes minutes "
                                    "to compile the larger training graphs on 2 cores)")
        print(json.dumps(row), flush=True)
        results.append(row)
    Path(args.out).write_text(json.dumps(results))


def table(rows):
    lines = ["| model | input | batch | threads | jaxdl ms | torch ms | torch.compile ms | "
             "torch / jaxdl | jaxdl first step s | torch first step s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['size']} | {r['batch']} | {r['threads']} | "
                         f"{r['error']} | | | | | |")
            continue
        compiled = r.get("torch.compile")
        compiled = f"{compiled['step_ms']:.1f}" if isinstance(compiled, dict) else "-"
        lines.append(f"| {r['model']} | {r['size']} | {r['batch']} | {r['threads']} | "
                     f"{r['jaxdl']['step_ms']:.1f} | {r['torch']['step_ms']:.1f} | {compiled} | "
                     f"{r['speedup_vs_torch']:.2f}x | {r['jaxdl']['first_step_s']:.1f} | "
                     f"{r['torch']['first_step_s']:.2f} |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    good = [r for r in rows if "error" not in r]
    labels = [f"{r['model']}@{r['size']} t{r['threads']}" for r in good]
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(good)), 4))
    ax.bar(range(len(good)), [r["speedup_vs_torch"] for r in good], color="tab:blue")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(good)), labels, rotation=90, fontsize=7)
    ax.set_ylabel("torch eager step time / jaxdl step time")
    ax.set_title("Training step, jaxdl dl.jit vs torch eager (CPU; >1: jaxdl faster)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_worker(args, threads, name, size):
    """One model at one input size and thread count in a fresh process, as a user runs one
    model. In one process for all models, the 0.4 ms mlp step took 0.9 ms after GoogLeNet
    and GPT had run (and torch's 1.0 ms stayed): the big models' steps leave the retained
    heap fragmented (jaxdl/_heap.py; 2026-12-01). In one process per model, VGG-19 at 64 px
    took 2327 and 2572 ms a step (one core) after its 32 px run, 1643 ms on its own
    (2026-12-02, the Zen 4 EPYC)."""
    part = Path(args.out).with_suffix(f".{name}.{size}.t{threads}.part")
    cmd = [sys.executable, __file__, "--worker", "--threads", str(threads), "--out", str(part),
           "--models", name, "--sizes", str(size),
           "--rounds", str(args.rounds), "--steps", str(args.steps),
           "--max-seconds", str(args.max_seconds),
           "--min-round-seconds", str(args.min_round_seconds),
           "--inductor", args.inductor] + (["--heavy"] if args.heavy else [])
    subprocess.run(cmd, check=True)
    rows = json.loads(part.read_text())
    part.unlink()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=lambda s: s.split(","), default=None,
                        help="comma-separated registered names (default: all)")
    parser.add_argument("--sizes", type=lambda s: tuple(int(v) for v in s.split(",")),
                        default=DEFAULT_SIZES, help="CNN input sizes (default 32,64,224)")
    parser.add_argument("--heavy", action="store_true", help="also VGG/OverFeat at 224")
    parser.add_argument("--threads", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="steps per round and side (at least)")
    parser.add_argument("--min-round-seconds", type=float, default=0.25,
                        help="more steps per round where a round would be shorter than this")
    parser.add_argument("--max-seconds", type=float, default=5.0,
                        help="stop a configuration's rounds after this (at least 3 rounds)")
    parser.add_argument("--inductor", choices=("default", "all", "none"), default="default")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(_timing.RESULTS / "models.json"))
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    rows, start = [], time.perf_counter()
    for threads in args.threads:
        for name, size, _ in configurations(args.models, args.sizes, args.heavy):
            rows += run_worker(args, threads, name, size)
    ratios = [r["speedup_vs_torch"] for r in rows if "error" not in r]
    geomean = statistics.geometric_mean(ratios) if ratios else None
    payload = {**_timing.machine(), "seconds": round(time.perf_counter() - start),
               "what": "training step (SGD momentum 0.9, cross-entropy), torch eager step time "
                       "/ jaxdl step time; first steps (compile) reported apart",
               "geomean_speedup_vs_torch": geomean, "rows": rows}
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
    plot(rows, Path(args.out).with_suffix(".png"))
    print(table(rows))
    print(f"geometric mean torch/jaxdl: {geomean:.2f}x; {payload['seconds']} s" if geomean else "")


if __name__ == "__main__":
    main()
