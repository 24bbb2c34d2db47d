"""jaxdl/_cpu_features.py: reading the CPU's vector width from /proc/cpuinfo."""

from pathlib import Path

import pytest

from jaxdl import _cpu_features


@pytest.fixture
def cpuinfo(monkeypatch):
    """Point the reader at a given /proc/cpuinfo text (None: the file cannot be read)."""
    def use(text):
        def read_text(self, *args, **kwargs):
            if text is None:
                raise FileNotFoundError(self)
            return text

        monkeypatch.setattr(Path, "read_text", read_text)
        _cpu_features.has_avx512.cache_clear()

    yield use
    _cpu_features.has_avx512.cache_clear()


@pytest.mark.parametrize("text, expected", [
    ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n", True),
    ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512_vnni\n", False),  # no AVX-512F itself
    ("processor\t: 0\nFeatures\t: fp asimd\n", False),  # an Arm CPU
    (None, False),  # no /proc (macOS, Windows)
])
def test_has_avx512_reads_the_flags_line(cpuinfo, text, expected):
    cpuinfo(text)
    assert _cpu_features.has_avx512() is expected
