"""Keep freed memory in the process heap, so a compiled step does not fault its buffers in
again at every call.

XLA's CPU runtime allocates a step's temporary buffers when the step runs and frees them
when it returns. glibc serves blocks above its mmap threshold (128 KiB, adapting up to
32 MiB) with fresh pages and gives them back on free; so does every block over 64 MiB
that a thread other than the main one asks for (it cannot fit in a thread arena's heap).
Either way every step pays a page fault and a page of zeroing per 4 KiB it touches.
So: one arena (the main heap, which can grow), blocks up to 1 GiB from it, and no trimming:
free memory at the heap's top stays there. glibc trims the whole top once it exceeds the
threshold, not the excess: with 1 GiB, VGG-16's step (a 522 MiB temporary block freed beside
its other buffers) gave the top back and faulted 133.6k pages (522 MiB) in again every few
steps, 1.8-1.9 s a step on one core against 1.3-1.4 s without (2026-12-02).

What remains: with async dispatch, a step's temporary block is freed just after its outputs
are ready, so the next step's block may be allocated while it is still live; the heap then
grows by one block, a few times in a run (VGG-16 at 64 px: in 2 of the first 30 steps after
warm-up, none with `jax_cpu_enable_async_dispatch` off).

Measured 2026-12-01 on this project's 2-core machine, one core: the converted GPT of
`benchmarks/interop.py` 54 ms a step, 39 ms with the heap kept (torch eager in the same
process: 42 ms, 38 ms); the GNMT training step 179 ms and 27,864 page faults a step,
146 ms and none with one arena as well. How much the faults cost depends on the kernel
(an earlier run on the same machine ran the GPT step in 35 ms without any of this).

The cost: the process keeps its peak heap, and threads share one malloc lock. It is
set when jaxdl is imported, so threads that jax started before (`import jax` first) may
keep arenas of their own. Set JAXDL_RETAIN_HEAP=0 before importing jaxdl to leave malloc
as it is. Only glibc has these settings; elsewhere this does nothing.
"""

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_LIMIT = 1 << 30  # blocks up to 1 GiB come from the heap
_NEVER = -1  # M_TRIM_THRESHOLD -1: never trim (mallopt(3))


def retain_freed_memory() -> bool:
    """One arena, a raised mmap threshold and no trimming; True when they were set."""
    if not sys.platform.startswith("linux") or os.environ.get("JAXDL_RETAIN_HEAP") == "0":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return all([libc.mallopt(_M_ARENA_MAX, 1), libc.mallopt(_M_MMAP_THRESHOLD, _LIMIT),
                    libc.mallopt(_M_TRIM_THRESHOLD, _NEVER)])
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


# before jaxdl imports jax: a thread that already has an arena of its own keeps it
RETAINED = retain_freed_memory()
