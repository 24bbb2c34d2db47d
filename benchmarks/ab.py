"""A/B of one model's training step in one process: jaxdl as it is (A) against jaxdl with
module constants overridden (B), and torch eager beside them.

    python benchmarks/ab.py mobilenet_v2@224 --set jaxdl.nn._conv_cpu._TRANSPOSED_PIXELS=0
    python benchmarks/ab.py vgg16@64 --threads 2 --set jaxdl.nn._conv_cpu._WINOGRAD_BLOCKS=10**9
    python benchmarks/ab.py resnet18@224 --set jaxdl.optim._optimizer.Optimizer._flat_state=False

A lowering rule's constants are read when a step is traced, so B's model and optimizer are
built, and every call of B's step runs, with the `--set` values in place (each
`module.NAME=python expression`, or `module.Class.NAME=...`), restored after each;
A is built, traced and runs with the values as they are. A constant read only inside a function
under its own `jax.jit` (such as `_winograd.conv`) does not reach B: that jit's cache returns
the trace A made; compare such a change in fresh processes instead. The three steps come from
`models.build_steps` (same weights, same batch) and are timed by `models.measure`: each one's
first step alone (compile time), warm-up, then interleaved rounds whose order alternates. A and B
share one process, one heap and one VM state, which is what the README's A/B figures need: across
separate runs on this shared VM the step times of one model moved by up to 20% (docs/design.md).
Prints one JSON object (each side's median step ms and first step s, and the ratios of the
medians) and writes nothing.
"""

import argparse
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402
import models  # noqa: E402


def parse_override(text):
    """'package.module.NAME=expression' (or 'package.module.Class.NAME=...') -> (owner, NAME,
    value)."""
    target, sep, expression = text.partition("=")
    module_name, _, attribute = target.rpartition(".")
    if not sep or not module_name:
        raise SystemExit(f"ab.py: --set takes module.NAME=value, got {text!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:  # a class attribute
        module_name, _, class_name = module_name.rpartition(".")
        module = getattr(importlib.import_module(module_name), class_name)
    if not hasattr(module, attribute):
        owner = target.rpartition(".")[0]
        raise SystemExit(f"ab.py: {owner} has no attribute {attribute!r} (--set {text!r})")
    return module, attribute, eval(expression, {})  # a number or a tuple, from the command line


def with_overrides(step, overrides):
    """`step`, each call of it run with `overrides` in place: its first call traces it with
    them, and so would any later retrace (a few microseconds a call)."""
    def run():
        with _timing.overridden(overrides):
            return step()

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="name@input size, e.g. resnet18@224")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="module.NAME=value for B (repeatable)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=None,
                        help="default: benchmarks/models.py's batch for that model and size")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    args = parser.parse_args()
    name, _, size = args.model.partition("@")
    if not args.overrides:
        raise SystemExit("ab.py: give B at least one --set")
    configs = models.configurations([name], (int(size),) if size else models.DEFAULT_SIZES, True)
    if not configs:
        raise SystemExit(f"ab.py: {args.model} is not one of benchmarks/models.py's configurations")
    name, size, batch = configs[0]

    _timing.pin_threads(args.threads)
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    batch = args.batch or batch
    overrides = [parse_override(text) for text in args.overrides]
    inputs, target = models.make_batch(name, size, batch, np.random.default_rng(0))
    a = models.build_steps(name, inputs, target, inductor=False)
    with _timing.overridden(overrides):
        b = models.build_steps(name, inputs, target, inductor=False)
    steps = {"A": a["jaxdl"], "B": with_overrides(b["jaxdl"], overrides), "torch": a["torch"]}
    result = models.measure(steps, args.rounds, 2, args.max_seconds, 0.25)
    print(json.dumps({
        "model": name, "size": size, "batch": batch, "threads": args.threads,
        "overrides": args.overrides, **_timing.machine(),
        **{side: {"step_ms": round(r["step_ms"], 2), "first_step_s": round(r["first_step_s"], 4)}
           for side, r in result.items()},
        "B_over_A": round(result["B"]["step_ms"] / result["A"]["step_ms"], 3),
        "torch_over_A": round(result["torch"]["step_ms"] / result["A"]["step_ms"], 3),
        "torch_over_B": round(result["torch"]["step_ms"] / result["B"]["step_ms"], 3)}))


if __name__ == "__main__":
    main()
