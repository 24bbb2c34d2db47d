"""The accelerator devices behind `dl.accelerator` and `dl.cuda`, and their memory counters.

An accelerator is a local device of JAX's default backend when that backend is
not the CPU (`dl.cuda` further requires the "gpu" platform: CUDA or ROCm).
Memory figures are XLA's own allocator counters (`jax.Device.memory_stats()`);
a backend without them (the CPU) gets an error, never a made-up number.
"""

import collections

import jax


def _none_available(who: str) -> RuntimeError:
    return RuntimeError(
        f"{who}: cannot access an accelerator device when none is available (JAX's default "
        f"backend is {jax.default_backend()!r}; the CPU keeps no device memory statistics)")


def devices(platform: str | None = None) -> list:
    """This process's accelerator devices ([] on a CPU-only JAX), optionally of one platform."""
    if jax.default_backend() == "cpu":
        return []
    found = jax.local_devices()
    return found if platform is None or found[0].platform == platform else []


def current_index(accelerators, who: str) -> int:
    """Index of JAX's default device (`jax_default_device`) among `accelerators`, else 0."""
    if not accelerators:
        raise _none_available(who)
    default = jax.config.jax_default_device
    return accelerators.index(default) if default in accelerators else 0


def set_current(accelerators, device, who: str) -> None:
    """Make `device` JAX's default device (where arrays and computations go)."""
    jax.config.update("jax_default_device", resolve(accelerators, device, who))


def resolve(accelerators, device, who: str):
    """`device` (None: the current one; an index; "cuda:1"/"gpu:1"; a jax.Device) as a jax.Device."""
    if not accelerators:
        raise _none_available(who)
    if device is None:
        return accelerators[current_index(accelerators, who)]
    if isinstance(device, jax.Device):
        if device not in accelerators:
            raise ValueError(f"{who}: {device} is not one of this process's accelerators "
                             f"{accelerators}")
        return device
    index = device
    if isinstance(device, str):
        kind, _, number = device.partition(":")
        if kind not in ("cuda", "gpu", accelerators[0].platform) or (number and not number.isdigit()):
            raise ValueError(f"{who}: expected a device like '{accelerators[0].platform}:0', "
                             f"got {device!r}")
        index = int(number) if number else current_index(accelerators, who)
    if not isinstance(index, int) or not 0 <= index < len(accelerators):
        raise ValueError(f"{who}: device index must be in [0, {len(accelerators)}), got {device!r}")
    return accelerators[index]


def synchronize(accelerators, device) -> None:
    """Wait until every computation whose results are alive on `device` has finished.

    JAX runs computations asynchronously and exposes no device-wide barrier; a
    computation is observable only through its output arrays, so waiting for all
    live arrays placed on the device waits for all work that can still matter.
    """
    target = resolve(accelerators, device, "synchronize")
    jax.effects_barrier()  # ordered side effects (callbacks, prints) too
    for array in jax.live_arrays():
        if target in array.devices():
            array.block_until_ready()


# XLA's lifetime peak per device id at the last reset_peak_memory_stats (XLA cannot reset it).
_peak_at_reset: dict = {}

# torch's names for the XLA counters that mean the same thing.
_TORCH_NAMES = {"bytes_in_use": "allocated_bytes.all.current", "num_allocs": "allocation.all.allocated"}


def xla_stats(accelerators, device, who: str) -> dict:
    target = resolve(accelerators, device, who)
    stats = target.memory_stats()
    if not stats:
        raise RuntimeError(f"{who}: the {target.platform} backend of {target} keeps no memory "
                           "statistics (jax.Device.memory_stats() is None)")
    return dict(stats), target


def _known_peak(stats, target) -> int | None:
    value, at_reset = stats["peak_bytes_in_use"], _peak_at_reset.get(target.id)
    # A lifetime peak above the one at the reset was reached after it: the max since then.
    return value if at_reset is None or value > at_reset else None


def peak(accelerators, device, who: str) -> int:
    """Peak bytes in use since the process started or since reset_peak_memory_stats()."""
    stats, target = xla_stats(accelerators, device, who)
    value = _known_peak(stats, target)
    if value is None:
        raise RuntimeError(
            f"{who}: the peak since reset_peak_memory_stats() is unknown: XLA keeps only the peak "
            f"since the process started ({stats['peak_bytes_in_use']} bytes), not exceeded since "
            "the reset. Measure the phase in its own process, or read a compiled step's "
            "memory_analysis()")
    return value


def reset_peak(accelerators, device) -> None:
    if not accelerators:
        return  # as torch: nothing to reset without an accelerator
    stats, target = xla_stats(accelerators, device, "reset_peak_memory_stats")
    _peak_at_reset[target.id] = stats["peak_bytes_in_use"]


def memory_stats(accelerators, device) -> collections.OrderedDict:
    """XLA's counters under their own names, plus torch's names where the meaning is the same."""
    stats, target = xla_stats(accelerators, device, "memory_stats")
    out = collections.OrderedDict(sorted(stats.items()))
    for xla_name, torch_name in _TORCH_NAMES.items():
        if xla_name in stats:
            out[torch_name] = stats[xla_name]
    if "peak_bytes_in_use" in stats and _known_peak(stats, target) is not None:
        out["allocated_bytes.all.peak"] = _known_peak(stats, target)  # left out when unknown
    return out


def memory_info(accelerators, device, who: str) -> tuple[int, int]:
    """(free, total) bytes of XLA's allocator: its limit, not the hardware total (see docs)."""
    stats, _ = xla_stats(accelerators, device, who)
    if "bytes_limit" not in stats:
        raise RuntimeError(f"{who}: this backend reports no allocator limit (bytes_limit)")
    return stats["bytes_limit"] - stats["bytes_in_use"], stats["bytes_limit"]


def summary(accelerators, device) -> str:
    stats, target = xla_stats(accelerators, device, "memory_summary")
    lines = [f"XLA allocator of {target} ({target.device_kind})"]
    width = max(map(len, stats))
    for name, value in sorted(stats.items()):
        shown = f"{value / 2**20:,.1f} MiB" if "bytes" in name or name.endswith("_size") else f"{value:,}"
        lines.append(f"  {name:<{width}}  {shown}")
    return "\n".join(lines)
