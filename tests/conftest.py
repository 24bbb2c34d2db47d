"""Test setup: 8 simulated CPU devices (set before jax is imported), fixed torch threads."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

try:
    import torch  # noqa: E402

    torch.set_num_threads(1)
except ImportError:  # torch is the `torch` extra; tests that need it import it themselves
    torch = None

assert jax.device_count() == 8, "XLA_FLAGS must be set before jax is imported"


@pytest.fixture
def rng():
    return np.random.default_rng(0)
