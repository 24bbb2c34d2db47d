"""`fully_shard`: FSDP / ZeRO-3 style parameter and optimizer-state sharding."""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdl._module import Module
from jaxdl.distributed._data_parallel import DATA_AXIS, default_mesh


def _spec(shape, shards: int, axis: str) -> P:
    """Split the first dimension divisible by the shard count; replicate if none is."""
    for dim, size in enumerate(shape):
        if size % shards == 0 and size >= shards:
            return P(*([None] * dim), axis)
    return P()


def fully_shard(model: Module, mesh=None, axis: str = DATA_AXIS) -> Module:
    """Shard every parameter, buffer and optimizer state array of `model`'s store over `mesh`.

    Each array is split along its first dimension divisible by the number of
    devices on `axis` (small or indivisible arrays stay replicated). The store
    remembers the placement, so compiled steps keep updated arrays sharded;
    XLA gathers parameters where a layer needs them whole. Optimizers built on
    the model before or after this call are sharded the same way (their state
    lives in the same store). Training code is unchanged.

    Returns:
        the same model object.
    """
    mesh = default_mesh() if mesh is None else mesh
    if axis not in mesh.axis_names:
        raise ValueError(f"fully_shard: mesh has no axis {axis!r} (axes: {mesh.axis_names})")
    shards = mesh.shape[axis]
    store = model._store
    for index, value in enumerate(store.values):
        if value is None or jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            continue
        sharding = NamedSharding(mesh, _spec(value.shape, shards, axis))
        store.values[index] = jax.device_put(value, sharding)
        store.shardings[index] = sharding
    store.bump()
    return model
