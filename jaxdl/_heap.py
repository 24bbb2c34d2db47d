"""Keep freed memory in the process heap, so a compiled step does not fault its buffers in
again at every call; and run single-device CPU computations on the calling thread.

XLA's CPU runtime allocates a step's temporary buffers when the step runs and frees them
when it returns. glibc serves blocks above its mmap threshold (128 KiB, adapting up to
32 MiB) with fresh pages and gives them back on free; so does every block over 64 MiB
that a thread other than the main one asks for (it cannot fit in a thread arena's heap).
Either way every step pays a page fault and a page of zeroing per 4 KiB it touches.
So: blocks up to 1 GiB from the heap, and no trimming: free memory at the heap's top stays
there. glibc trims the whole top once it exceeds the threshold, not the excess: with 1 GiB,
VGG-16's step (a 522 MiB temporary block freed beside its other buffers) gave the top back
and faulted 133.6k pages (522 MiB) in again every few steps, 1.8-1.9 s a step on one core
against 1.3-1.4 s without (2026-12-02).

Which thread allocates a step's temporary block: with jax's async dispatch on CPU, a thread
of jax's own, so that block came from a thread arena (not kept) unless every thread shared
the main arena; but one arena for all threads made XLA's threads queue for its lock: on two
cores the GEMM under XLA's own products allocates a 74 KiB buffer per call, 1649 a step in
ResNet-18's at 224 px, 13.6 us each against 3.4 us on one core. So jaxdl turns async dispatch
off (`jax_cpu_enable_async_dispatch`: single-device computations then run on the calling
thread, whose heap keeps the block) and leaves glibc's arenas per thread. ResNet-18's step at
224 px, two cores, 151-157 ms -> 132-147 ms; MobileNetV2's at 32 px, one core, 48 -> 42 ms
(fresh processes, 2026-12-07, docs/design.md, "One arena per thread, steps on the calling
thread"). Multi-device computations still run on jax's threads.

Where jaxdl cannot make the dispatch inline (JAX_CPU_ENABLE_ASYNC_DISPATCH set by the user, or
jax's backends started before jaxdl was imported), it keeps the one shared arena as before.

The cost: the process keeps its peak heap. It is set when jaxdl is imported, so import jaxdl
before using jax. Set JAXDL_RETAIN_HEAP=0 before importing jaxdl to leave malloc as it is (the
dispatch setting stays; JAX_CPU_ENABLE_ASYNC_DISPATCH=1 keeps jax's). Only glibc has these
settings; elsewhere this does nothing.
"""

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_LIMIT = 1 << 30  # blocks up to 1 GiB come from the heap
_NEVER = -1  # M_TRIM_THRESHOLD -1: never trim (mallopt(3))
_ASYNC_DISPATCH = "jax_cpu_enable_async_dispatch"


def _dispatch_can_be_inline() -> bool:
    """Whether jaxdl may still choose jax's CPU dispatch: the user has not (by its environment
    variable) and jax's backends, which read the option when they start, have not started."""
    if _ASYNC_DISPATCH.upper() in os.environ:
        return False
    if "jax" not in sys.modules:
        return True
    from jaxdl._jax_compat import backends_started
    return not backends_started()


def _mallopt(*settings) -> bool:
    """glibc's mallopt for each (parameter, value); True when every one took."""
    if not sys.platform.startswith("linux") or os.environ.get("JAXDL_RETAIN_HEAP") == "0":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return all([libc.mallopt(name, value) for name, value in settings])
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


def _run_inline() -> bool:
    """Turn jax's async CPU dispatch off; False where this jax has no such option."""
    import jax

    try:
        jax.config.update(_ASYNC_DISPATCH, False)
    except AttributeError:  # pragma: no cover - a jax release that dropped the option
        return False
    return True


# Before jaxdl imports jax: with one shared arena, a thread that allocated before keeps an
# arena of its own (jax's thread pools start with its backends, at the first computation).
INLINE_DISPATCH = _dispatch_can_be_inline()
RETAINED = _mallopt((_M_MMAP_THRESHOLD, _LIMIT), (_M_TRIM_THRESHOLD, _NEVER))
if not (INLINE_DISPATCH and _run_inline()):
    INLINE_DISPATCH = False
    _mallopt((_M_ARENA_MAX, 1))  # jax's thread then allocates a step's block: share the kept heap
