"""Every GPU check in one command that fits a 15-minute lease of one H200: at most 9 minutes.

    PYTHONPATH=. python benchmarks/gpu/run.py              # on the GPU machine, no pip install
    python benchmarks/gpu/run.py --dry-run                 # here: tiny sizes on the CPU, <= 5 minutes

Needs only what that machine has (jax 0.11 with the CUDA plugin, optax, numpy;
no grain, no pinned torch). Parts, each a script in this folder run in its own
process with its own time cap, so a failure or a hang costs only that part:

    tests        tests that need neither the pinned torch nor grain, on jax 0.11 (tests.py)
    softmax      the online-softmax family's Pallas kernels: correctness, speed, memory
    attention    flash attention kernels (attention.py)
    vdnn         peak device memory and slowdown per offload policy (VGG-16, batch 256)
    models       the models of Table 1 (models.py)
    distributed  data-parallel steps

Every part script takes `--dry-run` and `--out PATH` (see _part.py) and
rewrites its JSON after each measurement, so a part stopped at its cap keeps
what it measured. A missing script is reported as missing. The caps add up to
515 s, and a part never gets more than what is left of 525 s. Results: one
JSON (benchmarks/results/gpu.json, or --out; kept under 16 MB) and a table.
Exit status: 0 when every part that exists finished with status 0.
"""

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOTAL_S = 525  # 9 minutes less a margin for the runner itself
DRY_TOTAL_S = 290  # the dry run's promise is 5 minutes
MAX_PART_BYTES = 2 * 2**20  # 6 parts x 2 MiB + tails: well under 16 MB


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    script: str
    cap_s: int  # on the GPU
    dry_cap_s: int  # --dry-run on the CPU
    result: str  # its JSON in benchmarks/results/ (a GPU run keeps it there too; notebooks read it)
    args: tuple = ()  # on the GPU only: a part's own time budget, inside its cap


PARTS = [
    Part("tests", "tests.py", 150, 90, "gpu_tests.json", ("--budget-s", "135")),
    Part("softmax", "softmax.py", 55, 60, "gpu_ops.json"),
    Part("attention", "attention.py", 55, 60, "gpu_attention.json", ("--budget-s", "35")),
    Part("vdnn", "vdnn.py", 150, 90, "gpu_vdnn.json"),
    Part("models", "models.py", 70, 90, "gpu_models.json", ("--budget-s", "45")),
    Part("distributed", "distributed.py", 35, 45, "gpu_distributed.json"),
]


def _tail(text: str, n: int = 3000) -> str:
    return text[-n:]


def run_part(part: Part, dry_run: bool, cap_s: float, workdir: Path) -> dict:
    script = HERE / part.script
    if not script.exists():
        return {"status": "missing", "script": str(script.relative_to(ROOT))}
    out = (workdir if dry_run else ROOT / "benchmarks" / "results") / part.result
    out.unlink(missing_ok=True)  # a stale file must not pass for this run's result
    command = [sys.executable, str(script), "--out", str(out),
               *(["--dry-run"] if dry_run else part.args)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    # Its own session: a part's worker processes are stopped with it at the cap.
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=cap_s)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        status = f"timed out at {cap_s:.0f} s"
    record = {"status": status, "seconds": round(time.perf_counter() - start, 1),
              "cap_s": round(cap_s), "command": " ".join(command[1:]), "output_tail": _tail(output)}
    if out.exists():
        size = out.stat().st_size
        record["result"] = (json.loads(out.read_text()) if size <= MAX_PART_BYTES
                            else {"left out": f"{size} bytes (over {MAX_PART_BYTES})"})
    return record


def summary_of(record: dict) -> str:
    result = record.get("result") or {}
    summary = result.get("summary") if isinstance(result, dict) else None
    if summary:
        return str(summary)
    lines = [line for line in record.get("output_tail", "").splitlines() if line.strip()]
    return lines[-1][:100] if lines else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="every part at tiny sizes on the CPU (Pallas interpret mode)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu.json")
    parser.add_argument("--only", nargs="+", choices=[p.name for p in PARTS],
                        help="run only these parts")
    parser.add_argument("--cap-scale", type=float, default=1.0,
                        help="multiply every time cap (the test suite's dry run on a busy machine)")
    args = parser.parse_args()
    total = (DRY_TOTAL_S if args.dry_run else TOTAL_S) * args.cap_scale
    start = time.perf_counter()
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "dry_run": args.dry_run,
              "python": sys.version.split()[0], "parts": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for part in PARTS:
            if args.only and part.name not in args.only:
                continue
            left = total - (time.perf_counter() - start)
            cap = min((part.dry_cap_s if args.dry_run else part.cap_s) * args.cap_scale, left)
            if cap < 5:
                record = {"status": "skipped: no time left"}
            else:
                print(f"[{time.perf_counter() - start:5.0f} s] {part.name} (cap {cap:.0f} s)",
                      flush=True)
                record = run_part(part, args.dry_run, cap, Path(tmp))
            report["parts"][part.name] = record
    report["seconds"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")

    print(f"\n{'part':<12} {'status':<22} {'seconds':>8}  summary")
    for name, record in report["parts"].items():
        seconds = record.get("seconds", "")
        print(f"{name:<12} {record['status']:<22} {seconds!s:>8}  {summary_of(record)}")
    print(f"total {report['seconds']} s; wrote {args.out}")
    bad = [r for r in report["parts"].values() if r["status"] not in ("ok", "missing")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
