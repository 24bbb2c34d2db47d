"""Importing jaxdl keeps freed memory in the heap (glibc), unless JAXDL_RETAIN_HEAP=0."""

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

# the resident size given back when a touched 128 MiB array is freed after `import jaxdl`,
# allocated by a thread other than the main one (XLA runs steps on its own threads)
_FREED = """
import threading
import numpy as np
import jaxdl

def allocate_and_free(out):
    block = np.ones(1 << 24)
    before = resident()
    del block
    out.append((before - resident()) / 2**20)

given_back = []
worker = threading.Thread(target=allocate_and_free, args=(given_back,))
worker.start()
worker.join()
print(jaxdl.backends.cpu.heap_retained, given_back[0])
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


def _run(retain, script=_FREED):
    env = dict(os.environ)
    env.pop("JAXDL_RETAIN_HEAP", None)
    if not retain:
        env["JAXDL_RETAIN_HEAP"] = "0"
    out = subprocess.run([sys.executable, "-c", _PRELUDE + script], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0] == "True", float(out[1])


def test_freed_memory_stays_in_the_heap():
    retained, given_back_mib = _run(retain=True)
    assert retained
    assert given_back_mib < 16


def test_freed_memory_over_a_gigabyte_stays_in_the_heap():
    # VGG-16's step frees a 522 MiB temporary block beside its other buffers: with 1 GiB kept
    # at the top, glibc gave the whole top back and the next steps faulted 133.6k pages in
    retained, given_back_mib = _run(retain=True, script=_FREED_LARGE)
    assert retained
    assert given_back_mib < 16


def test_opting_out_leaves_malloc_alone():
    retained, given_back_mib = _run(retain=False)
    assert not retained
    assert given_back_mib > 100
