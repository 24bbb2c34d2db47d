"""dl.accelerator / dl.cuda (jaxdl/_devices.py): torch.accelerator and torch.cuda behaviour on JAX devices.

On this CPU-only machine the real backend shows the no-accelerator behaviour; the
bookkeeping on XLA's counters (peak after a reset, free/total, device names) runs
on stand-in devices whose `memory_stats()` the test sets.
"""

import jax
import jax.numpy as jnp
import pytest

import jaxdl as dl
from jaxdl import _devices

cpu_only = pytest.mark.skipif(jax.default_backend() != "cpu", reason="needs a CPU-only JAX")

NEEDS_DEVICE = [
    dl.accelerator.current_device_index, dl.accelerator.synchronize,
    dl.accelerator.memory.memory_allocated, dl.accelerator.memory.max_memory_allocated,
    dl.accelerator.memory.memory_stats, dl.accelerator.memory.get_memory_info,
    lambda: dl.accelerator.set_device_index(0),
    dl.cuda.current_device, dl.cuda.synchronize, dl.cuda.memory_allocated,
    dl.cuda.max_memory_allocated, dl.cuda.memory_stats, dl.cuda.mem_get_info, dl.cuda.memory_summary,
    dl.cuda.get_device_name, lambda: dl.cuda.set_device(0),
]


@cpu_only
def test_no_accelerator_on_a_cpu_only_jax_as_torch_reports_without_one():
    torch = pytest.importorskip("torch")
    assert not torch.accelerator.is_available()  # the oracle: this machine has none for torch either
    assert dl.accelerator.is_available() is False and dl.cuda.is_available() is False
    assert dl.accelerator.device_count() == torch.accelerator.device_count() == 0
    assert dl.cuda.device_count() == 0
    assert dl.accelerator.current_accelerator() is None
    assert dl.accelerator.current_accelerator(check_available=True) is None
    with pytest.raises(RuntimeError):
        torch.accelerator.current_device_index()


@cpu_only
@pytest.mark.parametrize("fn", NEEDS_DEVICE)
def test_functions_that_need_a_device_raise_and_say_the_backend_is_the_cpu(fn):
    with pytest.raises(RuntimeError, match="none is available.*'cpu'.*no device memory statistics"):
        fn()


@cpu_only
def test_reset_and_empty_cache_are_no_ops_without_an_accelerator():
    dl.accelerator.memory.reset_peak_memory_stats()
    dl.accelerator.empty_cache()
    dl.cuda.reset_peak_memory_stats()
    dl.cuda.empty_cache()
    assert _devices._peak_at_reset == {}


class _Device:
    """Stands in for a jax.Device of an accelerator: id, platform, kind and XLA's counters."""

    def __init__(self, id, stats, platform="gpu"):
        self.id, self.platform, self.device_kind, self.stats = id, platform, "Stand-in GPU", stats

    def memory_stats(self):
        return None if self.stats is None else dict(self.stats)


@pytest.fixture
def gpus(monkeypatch):
    found = [_Device(0, {"bytes_in_use": 100, "peak_bytes_in_use": 500, "bytes_limit": 1000,
                         "num_allocs": 7}),
             _Device(1, {"bytes_in_use": 2 * 2**20, "peak_bytes_in_use": 3 * 2**20,
                         "bytes_limit": 2**30, "largest_alloc_size": 2**20, "num_allocs": 1})]
    monkeypatch.setattr(_devices, "devices",
                        lambda platform=None: [d for d in found if platform in (None, d.platform)])
    monkeypatch.setattr(_devices, "_peak_at_reset", {})
    return found


def test_counts_current_device_and_names_with_an_accelerator(gpus):
    assert dl.accelerator.is_available() and dl.cuda.is_available()
    assert dl.accelerator.device_count() == dl.cuda.device_count() == 2
    assert dl.accelerator.current_accelerator() is gpus[0]
    assert dl.accelerator.current_device_index() == dl.cuda.current_device() == 0
    assert dl.cuda.get_device_name("cuda:1") == "Stand-in GPU"


def test_memory_figures_are_xla_counters(gpus):
    mem = dl.accelerator.memory
    assert mem.memory_allocated() == dl.cuda.memory_allocated(0) == 100
    assert mem.max_memory_allocated() == 500
    assert mem.memory_allocated("gpu:1") == dl.cuda.memory_allocated("cuda:1") == 2 * 2**20
    assert mem.get_memory_info() == dl.cuda.mem_get_info() == (900, 1000)
    stats = mem.memory_stats()
    assert stats["bytes_in_use"] == stats["allocated_bytes.all.current"] == 100
    assert stats["allocated_bytes.all.peak"] == 500 and stats["allocation.all.allocated"] == 7
    summary = dl.cuda.memory_summary(1)
    assert "Stand-in GPU" in summary and "peak_bytes_in_use" in summary and "3.0 MiB" in summary


def test_peak_after_reset_is_reported_only_once_it_is_known(gpus):
    mem = dl.accelerator.memory
    mem.reset_peak_memory_stats()
    gpus[0].stats["bytes_in_use"] = 300  # below the lifetime peak: the peak since the reset is unknown
    with pytest.raises(RuntimeError, match="peak since reset_peak_memory_stats.. is unknown.*500 bytes"):
        mem.max_memory_allocated()
    assert "allocated_bytes.all.peak" not in mem.memory_stats()
    assert mem.max_memory_allocated(1) == 3 * 2**20  # the other device was not reset
    gpus[0].stats["peak_bytes_in_use"] = 800  # a new high after the reset: it is the peak since then
    assert mem.max_memory_allocated() == dl.cuda.max_memory_allocated() == 800
    assert mem.memory_stats()["allocated_bytes.all.peak"] == 800


def test_a_backend_without_counters_says_so(gpus):
    gpus[0].stats = None
    with pytest.raises(RuntimeError, match="keeps no memory statistics"):
        dl.accelerator.memory.memory_allocated()
    del gpus[1].stats["bytes_limit"]
    with pytest.raises(RuntimeError, match="no allocator limit"):
        dl.accelerator.memory.get_memory_info(1)


def test_cuda_is_only_the_gpu_platform(gpus):
    for d in gpus:
        d.platform = "tpu"
    assert dl.accelerator.device_count() == 2
    assert not dl.cuda.is_available() and dl.cuda.device_count() == 0


@pytest.mark.parametrize("device", [2, -1, "gpu:x", "npu:0", 1.0])
def test_bad_device_arguments_name_the_function(gpus, device):
    with pytest.raises(ValueError, match="memory_allocated: "):
        dl.accelerator.memory.memory_allocated(device)


def test_synchronize_waits_for_the_live_arrays_on_the_device():
    x = jnp.ones((256, 256)) @ jnp.ones((256, 256))
    _devices.synchronize(jax.local_devices(), x.devices().pop())  # the CPU devices stand in
    assert x.is_ready()
