"""benchmarks/profile_step.py's idle gaps, on a trace written by hand, and
benchmarks/wake_latency.py's measurement (structure only; timings are never asserted)."""

import gzip
import json
import os

import pytest


def _op(name, ts, dur):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "args": {"hlo_op": name}}


def test_idle_gaps_are_the_times_no_op_covers(tmp_path, load_script):
    events = [_op("a", 0, 10), _op("b", 5, 20),  # overlapping: b ends at 25
              {"ph": "X", "name": "PjitFunction", "ts": 0, "dur": 100, "args": {}},  # not an op
              _op("c", 30, 5), _op("d", 50, 1)]
    (tmp_path / "x.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert load_script("profile_step").idle_gaps(tmp_path) == [(5, "b"), (15, "c")]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not {0, 1} <= os.sched_getaffinity(0),
                    reason="needs cores 0 and 1")
def test_wake_delays_measures_each_write(load_script):
    delays = load_script("wake_latency").wake_delays(idle_us=50, reader_core=1, count=30)
    assert len(delays) == 20 and all(d > 0 for d in delays)
