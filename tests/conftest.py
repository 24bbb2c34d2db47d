"""Test setup: 8 simulated CPU devices and XLA's lowest backend optimisation level (both set
before jax is imported), fixed torch threads.

Two settings for runs on other machines (benchmarks/gpu/tests.py sets them):
- JAXDL_TEST_WITHOUT=torch,grain: those packages count as absent (there: not the pinned
  torch, no grain); a test or test module that imports one is skipped, naming it.
- JAXDL_TEST_DEADLINE=<unix time>: tests not started by then are skipped, so a run with
  a time budget ends with its report instead of being killed.
"""

import importlib.abc
import os
import sys
import time

# XLA's lowest backend optimisation level (LLVM's code generation; the HLO passes still
# run): the suite compiles thousands of programs and runs each a few times, so the full
# level cost more than it saved (tests/models, tests/interop, tests/memory: 778 s of test
# time at the default level, 553 s at 0, 2026-12-03). jaxdl's code does not depend on it; the
# benchmarks, `make demo` and a user's runs keep XLA's default. A level set in XLA_FLAGS wins.
_flags = os.environ.get("XLA_FLAGS", "")
if "--xla_backend_optimization_level" not in _flags:
    _flags += " --xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

_WITHOUT = {name for name in os.environ.get("JAXDL_TEST_WITHOUT", "").split(",") if name}
_DEADLINE = float(os.environ.get("JAXDL_TEST_DEADLINE", "inf"))


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _WITHOUT:
            pytest.skip(f"needs {name.split('.')[0]} (JAXDL_TEST_WITHOUT)", allow_module_level=True)


if _WITHOUT:
    sys.meta_path.insert(0, _Absent())

try:
    if "torch" in _WITHOUT:
        raise ImportError
    import torch  # noqa: E402

    torch.set_num_threads(1)
except ImportError:  # torch is the `torch` extra; tests that need it import it themselves
    torch = None

assert jax.device_count() == 8, "XLA_FLAGS must be set before jax is imported"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_collection_modifyitems(items):
    """Tests marked `slow` (30 s to 3 min each) first, so that under `pytest -n 2` none of
    them starts last and leaves the other worker idle while it runs."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item):
    if time.time() > _DEADLINE:
        pytest.skip("the run's time budget is spent (JAXDL_TEST_DEADLINE)")
