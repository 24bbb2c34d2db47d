"""How long this machine takes to wake a thread that sleeps on another core.

    python benchmarks/wake_latency.py

XLA's CPU runtime hands work between its threads many times a step: a loop split in two
halves wakes a second thread, and an op whose inputs were made on another thread starts
there. Each hand-off to a sleeping thread costs the wake-up time measured here. On a VM an
idle virtual core halts, and waking it goes through the hypervisor. torch's OpenMP threads
spin between parallel regions instead of sleeping, which this cost does not touch.

Two processes, pinned to cores 0 and 1: this one writes its clock into a pipe every
`--idle` microseconds, a child process blocks reading it and records how long after the write
it woke. Python adds a few microseconds to each side; a pinned same-core reader gives that
floor ("same core"). Prints the median and 90th percentile per idle time, in microseconds,
and writes them to benchmarks/results/wake_latency.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402


def _read(core: int, count: int):
    """The reader's side (run as a child process): block on stdin for `count` clocks."""
    os.sched_setaffinity(0, {core})
    delays = []
    for _ in range(count):
        sent = int.from_bytes(os.read(0, 8), "little")
        delays.append((time.perf_counter_ns() - sent) / 1e3)
    print(json.dumps(delays))


def wake_delays(idle_us: float, reader_core: int, count: int = 300) -> list:
    """Microseconds from a write into a pipe to the reader on `reader_core` having it. The
    reader is a fresh Python process (forking this one, which may run jax's threads, could
    deadlock the child)."""
    reader = subprocess.Popen([sys.executable, __file__, "--read-on", str(reader_core),
                               "--count", str(count)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        time.sleep(0.5)  # let the reader start and block
        for _ in range(count):
            time.sleep(idle_us / 1e6)
            reader.stdin.write(time.perf_counter_ns().to_bytes(8, "little"))
        out, _ = reader.communicate()
    finally:
        os.sched_setaffinity(0, saved)
    return json.loads(out)[10:]  # the first wake-ups include the reader's start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=lambda s: [float(v) for v in s.split(",")],
                        default=[20, 100, 1000, 5000], help="microseconds between writes")
    parser.add_argument("--read-on", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=300, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_on is not None:
        return _read(args.read_on, args.count)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2 or cores[:2] != [0, 1]:
        raise SystemExit("wake_latency.py needs cores 0 and 1 (taskset -c 0,1)")
    print(f"{'idle us':>8} {'same core':>18} {'other core':>18}   (median / p90, us)")
    rows = []
    for idle in args.idle:
        row = {"idle_us": idle}
        for core, side in ((0, "same_core"), (1, "other_core")):
            d = sorted(wake_delays(idle, core))
            row[side] = {"median_us": round(statistics.median(d), 1),
                         "p90_us": round(d[int(0.9 * len(d))], 1)}
        rows.append(row)
        print(f"{idle:8.0f}" + "".join(f"{row[k]['median_us']:10.1f} / {row[k]['p90_us']:6.1f}"
                                       for k in ("same_core", "other_core")))
    _timing.write_json("wake_latency.json", {
        **_timing.machine(),
        "what": "microseconds from a write into a pipe to a reader blocked on it, pinned to "
                "the writer's core or to another, after the writer idled idle_us",
        "rows": rows})


if __name__ == "__main__":
    main()
