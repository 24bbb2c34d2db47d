"""benchmarks/ab.py: B's step runs with the overridden constants, and only B's; the script
runs end to end and prints its JSON (structure only; timings are never asserted)."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_b_runs_with_the_overrides_and_they_are_restored_after_each_call(load_script):
    ab = load_script("ab")
    module = types.ModuleType("rule")
    module.THRESHOLD = 256
    seen = []
    step = ab.with_overrides(lambda: seen.append(module.THRESHOLD), [(module, "THRESHOLD", 0)])
    step()
    assert module.THRESHOLD == 256
    step()
    assert seen == [0, 0] and module.THRESHOLD == 256


def test_override_names_a_module_attribute_or_fails_with_the_offending_text(load_script):
    ab = load_script("ab")
    module, name, value = ab.parse_override("jaxdl.nn._conv_cpu._TRANSPOSED_PIXELS=2**4")
    assert (module.__name__, name, value) == ("jaxdl.nn._conv_cpu", "_TRANSPOSED_PIXELS", 16)
    with pytest.raises(SystemExit, match="no attribute '_NO_SUCH'"):
        ab.parse_override("jaxdl.nn._conv_cpu._NO_SUCH=1")
    with pytest.raises(SystemExit, match="module.NAME=value"):
        ab.parse_override("_TRANSPOSED_PIXELS")
    # a class attribute (read when B's optimizer is built, which ab.py does under the overrides)
    from jaxdl.optim._optimizer import Optimizer
    owner, name, value = ab.parse_override("jaxdl.optim._optimizer.Optimizer._flat_state=False")
    assert (owner, name, value) == (Optimizer, "_flat_state", False)
    with pytest.raises(SystemExit, match="Optimizer has no attribute '_NO_SUCH'"):
        ab.parse_override("jaxdl.optim._optimizer.Optimizer._NO_SUCH=1")


def test_ab_runs_a_small_model_and_prints_both_sides_and_torch():
    proc = subprocess.run([sys.executable, "benchmarks/ab.py", "mlp", "--rounds", "3",
                           "--max-seconds", "1", "--set", "jaxdl.nn._conv_cpu._TRANSPOSED_PIXELS=0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["model"] == "mlp" and report["threads"] == 1
    assert report["overrides"] == ["jaxdl.nn._conv_cpu._TRANSPOSED_PIXELS=0"]
    for side in ("A", "B", "torch"):
        assert report[side]["step_ms"] > 0 and report[side]["first_step_s"] >= 0
    assert report["A"]["first_step_s"] > 0 and report["B"]["first_step_s"] > 0  # compiles
    assert report["B_over_A"] > 0
