"""What the host CPU offers that a lowering rule depends on."""

import functools
from pathlib import Path


@functools.cache
def has_avx512() -> bool:
    """Whether the CPU has 512-bit vectors (AVX-512F), from /proc/cpuinfo; False where that
    file does not exist (macOS, Windows) or cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "avx512f" in line.split() for line in text.splitlines())
