"""`torch.accelerator.memory` on XLA's allocator counters (`jax.Device.memory_stats()`).

Without an accelerator every function that reports a figure raises RuntimeError
(as torch.accelerator does); so does a backend that keeps no counters: jaxdl
never returns a number it did not read from the allocator. Two differences from
torch, both from XLA's allocator:
- XLA keeps only the peak since the process started. `reset_peak_memory_stats()`
  remembers that peak; `max_memory_allocated()` afterwards returns the peak once
  it has risen above it (then it is the peak since the reset) and raises while
  it has not (the peak since the reset is then unknown).
- `empty_cache()` does nothing: XLA's allocator keeps its memory pool for the
  process (an array's memory returns to the pool when the array is deleted).
"""

from jaxdl import _devices

__all__ = ["empty_cache", "get_memory_info", "max_memory_allocated", "memory_allocated",
           "memory_stats", "reset_peak_memory_stats"]


def memory_allocated(device_index=None, /) -> int:
    """Bytes of device memory held by live arrays and running computations (`bytes_in_use`)."""
    stats, _ = _devices.xla_stats(_devices.devices(), device_index, "memory_allocated")
    return stats["bytes_in_use"]


def max_memory_allocated(device_index=None, /) -> int:
    """Peak of `memory_allocated()` since the start, or since `reset_peak_memory_stats()` (see above)."""
    return _devices.peak(_devices.devices(), device_index, "max_memory_allocated")


def reset_peak_memory_stats(device_index=None, /) -> None:
    """Start a new peak for `max_memory_allocated()` (no-op without an accelerator, as torch)."""
    _devices.reset_peak(_devices.devices(), device_index)


def memory_stats(device_index=None, /):
    """XLA's allocator counters (`bytes_in_use`, `peak_bytes_in_use`, `bytes_limit`, ...), plus
    torch's `allocated_bytes.all.current`, `allocated_bytes.all.peak`, `allocation.all.allocated`."""
    return _devices.memory_stats(_devices.devices(), device_index)


def get_memory_info(device_index=None, /) -> tuple[int, int]:
    """(free, total) bytes of XLA's allocator: total is its limit (`bytes_limit`: by default 75%
    of the GPU's memory, `XLA_PYTHON_CLIENT_MEM_FRACTION`), not the hardware total as in torch."""
    return _devices.memory_info(_devices.devices(), device_index, "get_memory_info")


def empty_cache() -> None:
    """Nothing to do: XLA's allocator keeps its pool for the process (see the module docs)."""
