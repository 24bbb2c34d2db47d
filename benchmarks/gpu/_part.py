"""What every part of benchmarks/gpu/run.py shares: its two options and its JSON file.

A part script accepts `--dry-run` (tiny sizes on the CPU, Pallas in interpret
mode: checks the code path, not the figures) and `--out PATH` (where its JSON
goes). It writes that JSON again after each finished measurement, so a part
stopped at its time cap still leaves what it measured. A top-level "summary"
(a short string) is what run.py prints in its table.

Import this module before jax: it puts the repository on sys.path and, for a
dry run, keeps jax on the CPU.
"""

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if "--dry-run" in sys.argv[1:]:  # before jax starts: a dry run never takes a GPU
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()


def benchmark(name: str):
    """The CPU benchmark module benchmarks/<name>.py, loaded from its path."""
    spec = importlib.util.spec_from_file_location(f"cpu_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(description: str, default_out: str, configure=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU (Pallas interpret mode): the code path only")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / default_out,
                        help="the JSON result (default: %(default)s)")
    if configure is not None:
        configure(parser)
    return parser.parse_args()


def write(path: Path, payload: dict) -> None:
    """Replace `path` with `payload` as JSON (via a temporary file: never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    tmp.replace(path)
