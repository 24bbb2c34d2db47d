"""Shared timing helpers for benchmarks: thread pinning, warm-up, median of repeats."""

import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def pin_threads(n: int = 1):
    """Give this process (jax and torch alike) n cores; call before importing either.

    CPU affinity is what bounds XLA: its CPU client sizes its thread pools from the cores
    the process may run on, and `--xla_cpu_multi_thread_eigen=false` alone still left it
    running on two cores (measured 2026-11-30: a 1024^2 matmul used 1.9 cores of CPU time
    per second of wall time with that flag, and ran 1.6x slower under `taskset -c 0`).
    """
    cores = sorted(os.sched_getaffinity(0))[:n]
    os.sched_setaffinity(0, cores)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    # jaxdl first, as its README advises: its malloc settings (jaxdl/_heap.py) then precede
    # every thread jax and torch start; they apply to torch in this process as well
    import jaxdl  # noqa: F401
    return cores


@contextlib.contextmanager
def overridden(overrides):
    """[(module or class, NAME, value)] set for the `with` block, the old values restored after."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in overrides]
    try:
        for owner, name, value in overrides:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def median_seconds(fn, steps: int, repeats: int, warmup: int = 3) -> float:
    """Median over `repeats` of the mean time of `steps` calls of `fn` (which must block)."""
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        runs.append((time.perf_counter() - start) / steps)
    return statistics.median(runs)


def _cpu() -> str:
    """The CPU's name, family/model and widest vector unit from /proc/cpuinfo: the ratios
    depend on it (the same code read 0.90x torch's attention on this project's Intel Xeon
    VM and 2.06x on an AMD EPYC Zen 5 one, 2026-12-01)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "cpu"
    field = {k.strip(): v.strip() for k, _, v in
             (line.partition(":") for line in text.split("\n\n")[0].splitlines())}
    from jaxdl._cpu_features import has_avx512  # here: importing jaxdl imports jax, after pin_threads

    vector = "avx512" if has_avx512() else "no avx512"
    return (f"{field.get('model name', 'cpu')} (family {field.get('cpu family', '?')}, "
            f"model {field.get('model', '?')}, {vector})")


def machine() -> dict:
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {_cpu()}",
        "python": platform.python_version(),
    }


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def interleaved_seconds(calls, min_time, min_rounds=5):
    """Time contenders side by side: each round calls every one once, in a shuffled order.

    On a shared machine a slow spell then hits every contender alike. Returns per
    contender the median seconds and the median over rounds of (its time / the first
    contender's time in the same round), so ratios compare calls made moments apart.
    """
    for fn, sync in calls:
        sync(fn())  # warm-up (and compilation for jax)
    times = [[] for _ in calls]
    order = list(range(len(calls)))
    random = np.random.default_rng(1)
    while len(times[0]) < min_rounds or min(map(sum, times)) < min_time:
        random.shuffle(order)
        for i in order:
            fn, sync = calls[i]
            start = time.perf_counter()
            sync(fn())
            times[i].append(time.perf_counter() - start)
    base = np.asarray(times[0])
    return [(float(np.median(t)), float(np.median(np.asarray(t) / base))) for t in times]
