"""`jaxdl.distributed`: multi-device and multi-process training on JAX's own runtime."""

from jaxdl.distributed import launch
from jaxdl.distributed._data_parallel import DATA_AXIS, data_parallel, default_mesh
from jaxdl.distributed._fully_shard import fully_shard
from jaxdl.distributed._init import init

__all__ = ["DATA_AXIS", "data_parallel", "default_mesh", "fully_shard", "init", "launch"]
