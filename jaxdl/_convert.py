"""Dtypes and devices as a PyTorch user writes them, turned into JAX's; `Module.to`.

Every argument that takes a dtype goes through `as_dtype`, so `torch.bfloat16`,
`jnp.bfloat16`, `np.float16` and `"float32"` all work wherever a dtype is
taken. torch objects are recognised by their type's name and module, never by
importing torch: a program that does not use torch never loads it.
"""

import jax
import jax.numpy as jnp

from jaxdl._store import BUFFER, PARAM, is_array

# Names PyTorch accepts as a device type; "cuda" is JAX's "gpu" platform.
_DEVICE_TYPES = {"cpu", "cuda", "gpu", "tpu", "mps", "xpu", "meta", "hip"}


def _is_torch(value, type_name: str) -> bool:
    cls = type(value)
    return cls.__name__ == type_name and cls.__module__.split(".")[0] == "torch"


def as_dtype(dtype, default=None):
    """The numpy/JAX dtype for `dtype` (a JAX, numpy or torch dtype, or its name);
    `default` when `dtype` is None."""
    if dtype is None:
        return None if default is None else jnp.dtype(default)
    if _is_torch(dtype, "dtype"):
        name = str(dtype).removeprefix("torch.")  # torch.float -> "torch.float32"
        try:
            return jnp.dtype(name)
        except TypeError:
            raise TypeError(f"torch dtype {dtype} has no JAX equivalent") from None
    try:
        return jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"expected a dtype (e.g. jnp.float32 or torch.float32), got {dtype!r}") \
            from None


def _is_placement(value) -> bool:
    return (isinstance(value, jax.Device | jax.sharding.Sharding | int) or _is_torch(value, "device")
            or isinstance(value, str) and value.split(":")[0] in _DEVICE_TYPES)


def as_placement(spec):
    """A `jax.Device` or `jax.sharding.Sharding` for `spec`: one of those, a torch
    device, an int (CUDA index, as torch) or a name like "cpu", "cuda", "cuda:1"."""
    if isinstance(spec, jax.Device | jax.sharding.Sharding):
        return spec
    if _is_torch(spec, "device"):
        spec = str(spec)
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = f"cuda:{spec}"
    if not isinstance(spec, str):
        raise TypeError(f"expected a device (e.g. 'cpu', 'cuda:0', a jax.Device) or a "
                        f"jax.sharding.Sharding, got {type(spec).__name__}")
    kind, _, index = spec.partition(":")
    platform = "gpu" if kind in ("cuda", "hip") else kind
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        available = ", ".join(str(d) for d in jax.devices())
        raise RuntimeError(f"device '{spec}' is not available: JAX sees no {kind} device "
                           f"(available: {available})") from None
    number = int(index) if index else 0
    if not 0 <= number < len(devices):
        raise RuntimeError(f"device '{spec}' is not available: JAX sees {len(devices)} "
                           f"{kind} device(s)")
    return devices[number]


def module_to(module, args, device=None, dtype=None):
    """`Module.to(*args, device=, dtype=)`: cast floating parameters and buffers to
    `dtype`, place every array of the module (key streams too) on `device`."""
    for arg in args:
        if is_array(arg):  # to(tensor): its dtype and placement
            dtype = arg.dtype if jnp.issubdtype(arg.dtype, jnp.inexact) else dtype
            device = getattr(arg, "sharding", device)
        elif _is_placement(arg):
            device = arg
        else:
            dtype = arg
    requested, dtype = dtype, as_dtype(dtype)
    if dtype is not None and not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, "
                        f"but got desired dtype={requested}")
    placement = None if device is None else as_placement(device)
    store = module._store
    seen, placed_before = set(), dict(store.shardings)
    for sub in module.modules():
        for name, index in sub._slots.items():
            if index is None or index in seen:
                continue
            seen.add(index)
            value = getattr(sub, name)
            if (dtype is not None and store.kinds[index] in (PARAM, BUFFER)
                    and jnp.issubdtype(value.dtype, jnp.inexact)):
                value = value.astype(dtype)
            if placement is not None:
                value = jax.device_put(value, placement)
                # Slots placed on a sharding keep it through compiled steps (as fully_shard's).
                if isinstance(placement, jax.sharding.Sharding):
                    store.shardings[index] = placement
                else:
                    store.shardings.pop(index, None)
            setattr(sub, name, value)
    if store.shardings != placed_before:
        store.bump()  # compiled steps constrain sharded slots: trace again
    return module

