"""Where a model's compiled training step spends its time, per XLA op (one core by default).

    python benchmarks/profile_step.py --model resnet18 --size 224 --batch 2
    python benchmarks/profile_step.py --model gpt --size 128 --batch 16 --top 40

The step is `benchmarks/models.py`'s (forward, cross-entropy, backward, SGD with momentum),
traced with `jax.profiler` for `--steps` steps after a warm-up; the perfetto trace's events
are summed per op name over the steps and printed largest first, with each op's share of
the step and, for convolution lowerings, what `dl.backends.cpu.choices()` says each traced
convolution runs. Takes about a minute (plus the model's compile).

The warm-up runs until a step faults no fresh memory in (`models.measure`'s rule), and the
pages faulted in while tracing are printed: the profiler's own allocations can take the
room a step's temporary block had in the heap, so that every traced step faults that block
in afresh. VGG-16 at 64 px (2026-12-04, one core): 128,709 faults in each traced step, 3.4 s
a step instead of 1.1 s, all of it charged to the op that first wrote the block (the
classifier's weight gradient read 931 ms; alone, untraced, it takes 39 ms). Such a profile
says where the faults land, not where a step's time goes.
"""

import argparse
import collections
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402
import models as model_bench  # noqa: E402


def op_times(trace_dir: Path) -> tuple[dict, float]:
    """Total microseconds per op name over the XLA op events of the trace, and the span of
    the traced steps' wall time (us)."""
    path = next(trace_dir.rglob("*.trace.json.gz"))
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    totals, first, last = collections.Counter(), float("inf"), 0.0
    for e in events:
        # XLA's CPU runtime names its op events after the HLO instruction; the Python side's
        # events (TraceMe annotations such as "PjitFunction") carry no hlo_op argument.
        if e.get("ph") == "X" and "hlo_op" in e.get("args", {}):
            totals[e["name"]] += e["dur"]
            first, last = min(first, e["ts"]), max(last, e["ts"] + e["dur"])
    return totals, last - first


def idle_gaps(trace_dir: Path) -> list:
    """(us, the op before) for each interval of the traced span that no XLA op covers: the
    runtime handing work between its threads, the tail of an XLA (Eigen) dot, whose work can go
    on in the pool after its traced call returns, and between steps the Python side
    dispatching the next one."""
    path = next(trace_dir.rglob("*.trace.json.gz"))
    events = sorted((e["ts"], e["ts"] + e["dur"], e["name"])
                    for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
                    if e.get("ph") == "X" and "hlo_op" in e.get("args", {}))
    gaps, (_, covered_to, last) = [], events[0]
    for start, end, name in events[1:]:
        if start > covered_to:
            gaps.append((start - covered_to, last))
        if end > covered_to:
            covered_to, last = end, name
    return gaps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    _timing.pin_threads(args.threads)
    import jax
    import numpy as np

    import jaxdl as dl

    inputs, target = model_bench.make_batch(args.model, args.size, args.batch,
                                            np.random.default_rng(0))
    step = model_bench.build_steps(args.model, inputs, target, inductor=False)["jaxdl"]
    for _ in range(model_bench.WARMUP_ROUNDS):
        faults = model_bench.minor_faults()
        step()
        if model_bench.minor_faults() == faults:
            break
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall_ms = 1e3 * (time.perf_counter() - start) / args.steps
    with tempfile.TemporaryDirectory() as tmp:
        faults = model_bench.minor_faults()
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(args.steps):
                step()
        faults = model_bench.minor_faults() - faults
        totals, span = op_times(Path(tmp))
        gaps = idle_gaps(Path(tmp))
    busy = sum(totals.values())
    print(f"{args.model} @ {args.size}, batch {args.batch}, {args.threads} thread(s): "
          f"{wall_ms:.1f} ms a step untraced; ops sum to {busy / 1e3 / args.steps:.1f} ms a "
          f"step ({span / 1e3 / args.steps:.1f} ms span); {faults // args.steps} pages faulted in "
          f"a traced step")
    # A gap of a millisecond or more is the dispatch between steps, one per step.
    within = [(us, op) for us, op in gaps if us < 1000]
    after_dots = [us for us, op in within if op.split(".")[0] == "dot"]
    per_step = lambda values: f"{sum(values) / 1e3 / args.steps:.1f} ms"  # noqa: E731
    print(f"no op ran for {per_step([us for us, _ in within])} a step in "
          f"{len(within) // args.steps} gaps under 1 ms, {per_step(after_dots)} of it after "
          f"XLA's dots (whose work can go on in the pool), the rest hand-offs between XLA's "
          f"threads (benchmarks/wake_latency.py); {per_step([us for us, _ in gaps])} in all")
    if faults:
        print("warning: the traced steps faulted fresh memory in; the op that first wrote it "
              "carries that cost (see this script's docstring)")
    kinds = collections.Counter()
    for name, us in totals.items():
        kinds[name.split(".")[0]] += us
    print(f"{'ms/step':>8} {'share':>6}  op kind (the name without its .N)")
    for kind, us in kinds.most_common(args.top):
        print(f"{us / 1e3 / args.steps:8.2f} {us / busy:6.1%}  {kind}")
    print(f"\n{'ms/step':>8} {'share':>6}  op")
    for name, us in totals.most_common(args.top):
        print(f"{us / 1e3 / args.steps:8.2f} {us / busy:6.1%}  {name}")
    chosen = collections.Counter(str(c) for c in dl.backends.cpu.choices())
    if chosen:
        print("\nconvolution lowerings (dl.backends.cpu.choices()):")
        for what, n in chosen.most_common():
            print(f"{n:4d} x {what}")


if __name__ == "__main__":
    main()
