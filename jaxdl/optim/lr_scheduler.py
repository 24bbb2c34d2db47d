"""`optim.lr_scheduler`: PyTorch's learning-rate schedulers, usable inside and outside `dl.jit`
(the design notes are in `_scheduler.py`)."""

from jaxdl.optim._plateau import ReduceLROnPlateau
from jaxdl.optim._scheduler import LRScheduler
from jaxdl.optim._scheduler_lists import ChainedScheduler, SequentialLR
from jaxdl.optim._schedules import (
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    MultiStepLR,
    OneCycleLR,
    StepLR,
)

__all__ = [
    "ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
    "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR", "OneCycleLR",
    "ReduceLROnPlateau", "SequentialLR", "StepLR",
]
