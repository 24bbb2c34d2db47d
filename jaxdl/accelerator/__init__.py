"""`torch.accelerator` on JAX devices.

The accelerator is JAX's default backend when that is not the CPU (a GPU or a
TPU); its devices are this process's devices of that backend. On a CPU-only
JAX, `is_available()` is False, `device_count()` is 0, `current_accelerator()`
is None, and the functions that need a device raise RuntimeError, as in torch.
Unlike torch, `current_accelerator()` returns the current `jax.Device` itself.
Memory functions are in `dl.accelerator.memory` (and re-exported here).
"""

import jax

from jaxdl import _devices
from jaxdl.accelerator import memory
from jaxdl.accelerator.memory import (
    empty_cache,
    get_memory_info,
    max_memory_allocated,
    memory_allocated,
    memory_stats,
    reset_peak_memory_stats,
)

__all__ = [
    "current_accelerator", "current_device_index", "device_count", "empty_cache", "get_memory_info",
    "is_available", "max_memory_allocated", "memory", "memory_allocated", "memory_stats",
    "reset_peak_memory_stats", "set_device_index", "synchronize",
]


def is_available() -> bool:
    """Whether JAX's default backend is an accelerator (not the CPU)."""
    return bool(_devices.devices())


def device_count() -> int:
    """Number of accelerator devices this process can use (0 without an accelerator)."""
    return len(_devices.devices())


def current_accelerator(check_available: bool = False) -> jax.Device | None:
    """The current accelerator device (a `jax.Device`), or None where there is none.

    `check_available` is accepted for torch's signature; the answer is always checked.
    """
    del check_available
    accelerators = _devices.devices()
    return accelerators[_devices.current_index(accelerators, "current_accelerator")] if accelerators else None


def current_device_index() -> int:
    """Index of the current device: JAX's default device (`jax_default_device`), else 0."""
    return _devices.current_index(_devices.devices(), "current_device_index")


def set_device_index(device, /) -> None:
    """Make `device` (an index, "gpu:1", a jax.Device) the current one: JAX's default device."""
    _devices.set_current(_devices.devices(), device, "set_device_index")


def synchronize(device=None, /) -> None:
    """Wait for the device's computations: all whose result arrays are still alive.

    JAX has no device-wide barrier; computations whose outputs are all gone can no
    longer be observed, so waiting for the live arrays on the device is the same.
    """
    _devices.synchronize(_devices.devices(), device)
