"""`nn.parallel.DistributedDataParallel`: PyTorch's wrapper, for ported code."""

from jaxdl._module import Module


class DistributedDataParallel(Module):
    """Wraps a model for data-parallel training, as torch's DDP does.

    Forward delegates to the wrapped model (`.module`), which shares its
    arrays with the wrapper, so training through the wrapper updates it.
    Gradients are averaged across the data axis when the step runs under
    `dl.distributed.data_parallel` (one compiled step over all devices and
    processes); called outside it, the wrapper is a single replica.
    state_dict keys carry torch's "module." prefix.
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, find_unused_parameters: bool = False, **kwargs):
        super().__init__()
        if dim != 0:
            raise NotImplementedError(f"DistributedDataParallel(dim={dim}): only dim=0 batches")
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
