"""benchmarks/first_step.py: both sides run in fresh processes and are reported per
configuration; a revision that is not a commit fails with its name (structure only; timings
are never asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    return subprocess.run([sys.executable, "benchmarks/first_step.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_first_step_runs_each_side_in_fresh_processes_and_writes_its_report(tmp_path):
    out = tmp_path / "first_step.json"
    proc = _run("--against", "HEAD", "--models", "mlp", "--repeats", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert report["against"] == head and report["repeats"] == 2
    (row,) = report["rows"]
    assert (row["model"], row["size"], row["batch"], row["threads"]) == ("mlp", 8, 64, 1)
    assert len(row["tree_all_s"]) == len(row["against_all_s"]) == 2
    assert min(row["tree_all_s"] + row["against_all_s"]) > 0
    assert "| mlp (8, 64) |" in proc.stdout


def test_a_revision_that_is_not_a_commit_is_named_in_the_error(tmp_path):
    proc = _run("--against", "no-such-revision", "--models", "mlp", "--out",
                str(tmp_path / "x.json"))
    assert proc.returncode != 0
    assert "'no-such-revision' is not a commit" in proc.stderr
    assert not (tmp_path / "x.json").exists()
