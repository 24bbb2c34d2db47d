"""Importing jaxdl keeps freed memory in the heap (glibc), unless JAXDL_RETAIN_HEAP=0, and runs
single-device CPU computations on the calling thread, with one malloc arena per thread; where
jax's async dispatch stays (the user's choice, or jax used first), every thread shares one arena
(jaxdl/_heap.py)."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

# each script's start: the process's resident size in bytes
_PRELUDE = """import os
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
"""

# the resident size given back when a touched 128 MiB array is freed after `import jaxdl`, by
# the thread that calls a step (the main one) and by another thread (over 64 MiB a thread
# arena cannot keep); and whether jax's CPU dispatch is async
_FREED = """
import threading
import numpy as np
{before}
import jaxdl
import jax

def allocate_and_free(out):
    block = np.ones(1 << 24)
    before = resident()
    del block
    out.append((before - resident()) / 2**20)

given_back = []
allocate_and_free(given_back)
worker = threading.Thread(target=allocate_and_free, args=(given_back,))
worker.start()
worker.join()
print(jaxdl.backends.cpu.heap_retained, jaxdl.backends.cpu.inline_dispatch,
      jax.config.read("jax_cpu_enable_async_dispatch"), *given_back)
"""

# two touched 640 MiB arrays freed together: 1.25 GiB free at the heap's top, more than any
# trim threshold short of "never" lets stay
_FREED_LARGE = """
import numpy as np
import jaxdl

blocks = [np.ones(80 << 20), np.ones(80 << 20)]
before = resident()
del blocks
print(jaxdl.backends.cpu.heap_retained, (before - resident()) / 2**20)
"""


def _run(script, retain=True, async_dispatch=None):
    env = dict(os.environ)
    for name in ("JAXDL_RETAIN_HEAP", "JAX_CPU_ENABLE_ASYNC_DISPATCH"):
        env.pop(name, None)
    if not retain:
        env["JAXDL_RETAIN_HEAP"] = "0"
    if async_dispatch is not None:
        env["JAX_CPU_ENABLE_ASYNC_DISPATCH"] = async_dispatch
    out = subprocess.run([sys.executable, "-c", _PRELUDE + script], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return [word == "True" if word in ("True", "False") else float(word) for word in out]


def test_steps_run_on_the_calling_thread_whose_freed_memory_stays():
    retained, inline, async_dispatch, main_gave_back, worker_gave_back = _run(
        _FREED.format(before=""))
    assert retained and inline and not async_dispatch
    assert main_gave_back < 16
    assert worker_gave_back > 100  # a thread arena of its own: no lock shared with XLA's threads


def test_with_the_users_async_dispatch_every_thread_shares_one_kept_arena():
    # jax's own thread allocates a step's temporaries then: the arena it shares keeps them
    retained, inline, async_dispatch, main_gave_back, worker_gave_back = _run(
        _FREED.format(before=""), async_dispatch="1")
    assert retained and not inline and async_dispatch
    assert main_gave_back < 16 and worker_gave_back < 16


def test_jax_used_before_jaxdl_keeps_its_dispatch():
    # its CPU client exists and read the option already (and its threads made their arenas:
    # glibc fixes the arena limit at the first thread's, so one arena can no longer be set)
    retained, inline, async_dispatch, main_gave_back, _ = _run(
        _FREED.format(before="import jax; jax.numpy.ones(1).block_until_ready()"))
    assert retained and not inline and async_dispatch
    assert main_gave_back < 16


def test_freed_memory_over_a_gigabyte_stays_in_the_heap():
    # VGG-16's step frees a 522 MiB temporary block beside its other buffers: with 1 GiB kept
    # at the top, glibc gave the whole top back and the next steps faulted 133.6k pages in
    retained, given_back_mib = _run(_FREED_LARGE)
    assert retained
    assert given_back_mib < 16


def test_opting_out_leaves_malloc_alone():
    retained, inline, _, main_gave_back, _ = _run(_FREED.format(before=""), retain=False)
    assert not retained and inline
    assert main_gave_back > 100
