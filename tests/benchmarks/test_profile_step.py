"""benchmarks/profile_step.py's idle gaps, on a trace written by hand, and
benchmarks/wake_latency.py's measurement (structure only; timings are never asserted)."""

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # for their own imports (_timing, models)
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / f"benchmarks/{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def _op(name, ts, dur):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "args": {"hlo_op": name}}


def test_idle_gaps_are_the_times_no_op_covers(tmp_path):
    events = [_op("a", 0, 10), _op("b", 5, 20),  # overlapping: b ends at 25
              {"ph": "X", "name": "PjitFunction", "ts": 0, "dur": 100, "args": {}},  # not an op
              _op("c", 30, 5), _op("d", 50, 1)]
    (tmp_path / "x.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert _load("profile_step").idle_gaps(tmp_path) == [(5, "b"), (15, "c")]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not {0, 1} <= os.sched_getaffinity(0),
                    reason="needs cores 0 and 1")
def test_wake_delays_measures_each_write():
    delays = _load("wake_latency").wake_delays(idle_us=50, reader_core=1, count=30)
    assert len(delays) == 20 and all(d > 0 for d in delays)
