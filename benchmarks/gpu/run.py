"""All GPU checks in one go, for a session that is lent a GPU machine.

    python benchmarks/gpu/run.py [--quick]   -> benchmarks/results/gpu.json

Runs, each in its own process (one failing does not stop the others):
softmax.py (kernel correctness and bandwidth), vdnn.py (peak memory and step time
per offload policy) and distributed.py (data-parallel step time), then merges their
JSON results with each script's exit status.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE.parent / "results"
CHECKS = [("softmax", "gpu_ops.json"), ("vdnn", "gpu_vdnn.json"), ("distributed", "gpu_distributed.json")]


def main():
    quick = ["--quick"] if "--quick" in sys.argv[1:] else []
    merged = {"date": time.strftime("%Y-%m-%d"), "checks": {}}
    for name, result in CHECKS:
        args = quick if name != "distributed" else []
        start = time.perf_counter()
        status = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *args]).returncode
        path = RESULTS / result
        merged["checks"][name] = {
            "exit_status": status, "seconds": round(time.perf_counter() - start, 1),
            "results": json.loads(path.read_text()) if status == 0 and path.exists() else None,
        }
        print(f"{name}: exit {status}", flush=True)
    (RESULTS / "gpu.json").write_text(json.dumps(merged, indent=2) + "\n")
    print("wrote", RESULTS / "gpu.json")
    return max(c["exit_status"] for c in merged["checks"].values())


if __name__ == "__main__":
    sys.exit(main())
