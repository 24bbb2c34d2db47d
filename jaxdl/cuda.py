"""`torch.cuda`'s names for `dl.accelerator`, on JAX's GPU devices (CUDA or ROCm).

The same functions as `dl.accelerator` (see there and `dl.accelerator.memory`
for what XLA's allocator can and cannot report), plus `memory_summary()`. One
difference from torch.cuda: without a GPU the memory functions raise
RuntimeError (torch.cuda returns 0) rather than report figures of no device.
"""

from jaxdl import _devices

__all__ = [
    "current_device", "device_count", "empty_cache", "get_device_name", "is_available",
    "max_memory_allocated", "mem_get_info", "memory_allocated", "memory_stats", "memory_summary",
    "reset_peak_memory_stats", "set_device", "synchronize",
]


def _gpus() -> list:
    return _devices.devices("gpu")


def is_available() -> bool:
    """Whether JAX's default backend is a GPU."""
    return bool(_gpus())


def device_count() -> int:
    """Number of GPUs this process can use (0 without one)."""
    return len(_gpus())


def current_device() -> int:
    """Index of the current GPU: JAX's default device (`jax_default_device`), else 0."""
    return _devices.current_index(_gpus(), "current_device")


def set_device(device) -> None:
    """Make `device` (an index, "cuda:1", a jax.Device) JAX's default device."""
    _devices.set_current(_gpus(), device, "set_device")


def get_device_name(device=None) -> str:
    """The GPU's name as JAX reports it (`jax.Device.device_kind`, e.g. "NVIDIA H200")."""
    return _devices.resolve(_gpus(), device, "get_device_name").device_kind


def synchronize(device=None) -> None:
    """Wait for the GPU's computations (see `dl.accelerator.synchronize`)."""
    _devices.synchronize(_gpus(), device)


def memory_allocated(device=None) -> int:
    """Bytes held by live arrays and running computations (XLA's `bytes_in_use`)."""
    stats, _ = _devices.xla_stats(_gpus(), device, "memory_allocated")
    return stats["bytes_in_use"]


def max_memory_allocated(device=None) -> int:
    """Peak bytes since the start or since `reset_peak_memory_stats()` (see dl.accelerator.memory)."""
    return _devices.peak(_gpus(), device, "max_memory_allocated")


def reset_peak_memory_stats(device=None) -> None:
    """Start a new peak for `max_memory_allocated()` (no-op without a GPU, as torch)."""
    _devices.reset_peak(_gpus(), device)


def memory_stats(device=None):
    """XLA's allocator counters plus torch's names for the ones that mean the same."""
    return _devices.memory_stats(_gpus(), device)


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of XLA's allocator (its limit, not the hardware total)."""
    return _devices.memory_info(_gpus(), device, "mem_get_info")


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A readable table of `memory_stats()` (XLA's counters); `abbreviated` is accepted for torch."""
    del abbreviated
    return _devices.summary(_gpus(), device)


def empty_cache() -> None:
    """Nothing to do: XLA's allocator keeps its pool for the process."""
