"""Part 1 of benchmarks/gpu/run.py: the tests that need neither the pinned torch nor grain.

Runs pytest on this machine's JAX (there: jax 0.11 on Python 3.12) on 8 simulated
CPU devices, as CI does (JAX_PLATFORMS=cpu: the suite is written for them; the
GPU itself is exercised by the other parts). torch and grain count as absent
(JAXDL_TEST_WITHOUT): a test that imports either is skipped. The compatibility
tests go first, then the rest of tests/ in its usual order until the budget
(--budget-s, default 150 s) is spent; tests not started by then are reported
as skipped, so the run ends with its report. --dry-run: only the first files.

    python benchmarks/gpu/tests.py [--dry-run] [--out PATH] [--budget-s S]
"""

import collections
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from _part import ROOT, parse_args, write  # noqa: I001 - first: sets up sys.path

FIRST = ["tests/test_jax_compat.py", "tests/test_devices.py"]  # what a new JAX release breaks first
NOT_HERE = "tests/benchmarks/test_gpu_dry_run.py"  # runs this script: never from inside it
OPTIONAL = ("nbformat", "nbclient", "orbax", "sklearn", "tqdm", "matplotlib")


def _report(junit_path):
    counts, reasons, failures = collections.Counter(), collections.Counter(), []
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            counts["skipped"] += 1
            reasons[(outcome.get("message") or "").split(": ", 1)[-1][:120]] += 1
        else:
            counts["failed"] += 1
            failures.append({"test": name, "message": (outcome.get("message") or "")[:500]})
    return dict(counts), dict(reasons), failures


def main():
    args = parse_args(__doc__.splitlines()[0], "gpu_tests.json",
                      lambda p: p.add_argument("--budget-s", type=float, default=150.0))
    paths = [p for p in FIRST if (ROOT / p).exists()] + ([] if args.dry_run else ["tests"])
    # Never the pinned torch or grain there; other optional packages the tests import (notebook
    # runners, the data extra) count as absent where they are not installed.
    without = ["torch", "grain"] + [name for name in OPTIONAL if importlib.util.find_spec(name) is None]
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAXDL_TEST_WITHOUT=",".join(without),
               JAXDL_TEST_DEADLINE=str(time.time() + args.budget_s),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={junit}", f"--ignore={NOT_HERE}", *paths],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        counts, reasons, failures = _report(junit) if os.path.exists(junit) else ({}, {}, [])
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no report"
    write(args.out, {"summary": summary, "pytest_exit": proc.returncode, "seconds": seconds,
                     "jax": importlib.metadata.version("jax"), "python": sys.version.split()[0],
                     "paths": paths, "without": without,
                     "counts": counts, "skip_reasons": reasons, "failures": failures,
                     "output_tail": proc.stdout[-3000:] + proc.stderr[-2000:]})
    print(summary)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
