"""benchmarks/winograd.py runs end to end and prints one table row per layer, with errors
against torch that are rounding only (timings are never asserted)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_winograd_benchmark_prints_a_row_per_layer_with_the_rules_lowering():
    proc = subprocess.run([sys.executable, "benchmarks/winograd.py", "--layers", "2,64,8,64",
                           "1,64,20,64", "--max-seconds", "0.05"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| (")]
    assert [row.split(" |")[0] for row in rows] == ["| (2, 64, 8x8) -> 64", "| (1, 64, 20x20) -> 64"]
    # (2, 64, 8x8): 32 2x2 blocks, too few for Winograd; (1, 64, 20x20): 100 2x2, 25 4x4
    assert "(winograd)" not in rows[0] and "(winograd)" in rows[1]
    for row in rows:
        errors = [float(e) for e in re.findall(r"\d\.\de-\d\d", row.split("|")[-2])]
        assert len(errors) == 3 and max(errors) < 1e-4, row


def test_a_layer_that_is_not_four_integers_is_refused_with_the_offending_text():
    proc = subprocess.run([sys.executable, "benchmarks/winograd.py", "--layers", "8,64,64"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "N,C,H,O (four integers), got '8,64,64'" in proc.stderr
