"""First steps (trace + compile + one step) of the working tree against a git revision, each
in a fresh process, side by side.

    python benchmarks/first_step.py --against 4070055 --models vgg11 vgg16 vgg19 --threads 2
    python benchmarks/first_step.py --against HEAD --models resnet18 --sizes 224 --repeats 5

Why fresh processes, alternating: the first compile in a process pays one-time costs, so
`benchmarks/ab.py`'s second side read 0.4-0.9 s faster than fresh processes gave (docs/design.md,
"Where Winograd's first-step time goes"); and this VM's speed drifts by the hour, so a
revision's first steps taken at another time are no baseline (VGG-19 at 64 px, two cores:
4070055 started in 3.8 s at 17:05 UTC on 2026-12-06 and in 3.9-5.0 s at 22:17-22:37). Each repeat
runs every configuration once per side, the side that goes first alternating.

The revision is taken with `git archive` into a temporary folder, and its process imports
jaxdl and `benchmarks/models.py` (`make_batch`, `build_steps`) from there. Prints a table and
writes `benchmarks/results/first_step.json` (`--out` names another file there).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _timing  # noqa: E402
import models  # noqa: E402

# run in the measured tree's process: its own benchmarks/ comes first on sys.path
_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import _timing
name, size, batch, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
_timing.pin_threads(threads)
import numpy as np
import torch
torch.set_num_threads(threads)
import models
inputs, target = models.make_batch(name, size, batch, np.random.default_rng(0))
step = models.build_steps(name, inputs, target, False)["jaxdl"]
start = time.perf_counter()
step()
import jaxdl
print(json.dumps({"first_step_s": time.perf_counter() - start, "jaxdl": jaxdl.__file__}))
"""


def first_step(tree: Path, config, threads: int) -> float:
    """Seconds of the first jaxdl step of `config` (name, size, batch) in a fresh process that
    imports jaxdl from `tree`."""
    name, size, batch = config
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tree), name, str(size),
                           str(batch), str(threads)],
                          cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"first_step.py: {name}@{size} in {tree} failed:\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(report["jaxdl"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"first_step.py: the process for {tree} imported {report['jaxdl']}")
    return report["first_step_s"]


def checkout(revision: str, into: Path) -> str:
    """`revision`'s files extracted into `into`; its full commit hash."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{revision}^{{commit}}"], cwd=ROOT,
                            capture_output=True, text=True)
    if commit.returncode != 0:
        raise SystemExit(f"first_step.py: {revision!r} is not a commit of {ROOT}")
    archive = subprocess.run(["git", "archive", commit.stdout.strip()], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return commit.stdout.strip()


def compare(configs, against: Path, threads: int, repeats: int):
    """Per configuration: the working tree's and `against`'s first steps, every repeat."""
    from tqdm import tqdm

    times = {config: {"tree": [], "against": []} for config in configs}
    with tqdm(total=len(configs) * repeats * 2, desc="fresh processes") as bar:
        for r in range(repeats):
            for config in configs:
                sides = [("tree", ROOT), ("against", against)]
                for side, tree in (sides if r % 2 == 0 else sides[::-1]):
                    bar.set_postfix_str(f"{config[0]}@{config[1]} {side}")
                    times[config][side].append(first_step(tree, config, threads))
                    bar.update()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="a git revision, e.g. 4070055 or HEAD")
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--sizes", nargs="+", type=int, default=list(models.DEFAULT_SIZES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="first_step.json", help="a file name in benchmarks/results")
    args = parser.parse_args()
    configs = models.configurations(args.models, args.sizes, True)
    if not configs:
        raise SystemExit(f"first_step.py: none of {args.models} at {args.sizes} is configured")
    with tempfile.TemporaryDirectory() as folder:
        commit = checkout(args.against, Path(folder))
        times = compare(configs, Path(folder), args.threads, args.repeats)
    rows = [{"model": name, "size": size, "batch": batch, "threads": args.threads,
             "tree_s": statistics.median(t["tree"]), "against_s": statistics.median(t["against"]),
             "ratio": statistics.median(t["tree"]) / statistics.median(t["against"]),
             "tree_all_s": t["tree"], "against_all_s": t["against"]}
            for (name, size, batch), t in times.items()]
    print(f"| model (input, batch), {args.threads} core(s) | working tree, s | {commit[:7]}, s "
          f"| ratio |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['model']} ({row['size']}, {row['batch']}) | {row['tree_s']:.2f} | "
              f"{row['against_s']:.2f} | {row['ratio']:.2f}x |")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    report = {**_timing.machine(), "what": "first step (trace + compile + one step) of each "
              "configuration in fresh processes, medians", "tree_head": head,
              "against": commit, "repeats": args.repeats, "rows": rows}
    print(f"wrote {_timing.write_json(args.out, report)}")


if __name__ == "__main__":
    main()
