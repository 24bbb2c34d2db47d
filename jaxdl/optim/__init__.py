"""`jaxdl.optim`: PyTorch's optimizers, state kept in the model's store."""

from jaxdl.optim._adam import Adam, AdamW
from jaxdl.optim._optimizer import Optimizer
from jaxdl.optim._sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]
