"""Keep freed memory in the process heap, so a compiled step does not fault its buffers in
again at every call.

XLA's CPU runtime allocates a step's temporary buffers when the step runs and frees them
when it returns. glibc serves blocks above its mmap threshold (128 KiB, adapting up to
32 MiB) with fresh pages and gives them back on free, so every step pays a page fault
and a page of zeroing per 4 KiB it touches. Measured 2026-12-01 on this project's 2-core
machine, one core, the converted GPT of `benchmarks/interop.py`: 54 ms a step, 39 ms with
the heap kept (torch eager in the same process: 42 ms, 38 ms). Whether the faults cost
that much depends on the kernel (an earlier run on the same machine ran 35 ms without).

The cost: the process keeps its peak heap (up to 1 GiB of free memory at the top of the
heap is not returned). Set JAXDL_RETAIN_HEAP=0 before importing jaxdl to leave malloc as
it is. Only glibc has these settings; elsewhere this does nothing.
"""

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_LIMIT = 1 << 30  # blocks up to 1 GiB come from the heap, and up to 1 GiB free stays there


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; True when they were set."""
    if not sys.platform.startswith("linux") or os.environ.get("JAXDL_RETAIN_HEAP") == "0":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _LIMIT)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, _LIMIT))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
