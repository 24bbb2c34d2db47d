"""`jaxdl.optim`: PyTorch's optimizers, state kept in the model's store."""

from jaxdl.optim import lr_scheduler
from jaxdl.optim._adadelta import Adadelta
from jaxdl.optim._adagrad import Adagrad
from jaxdl.optim._adam import Adam, AdamW
from jaxdl.optim._adamax import Adamax
from jaxdl.optim._lion import Lion
from jaxdl.optim._nadam import NAdam
from jaxdl.optim._optimizer import Optimizer
from jaxdl.optim._radam import RAdam
from jaxdl.optim._rmsprop import RMSprop
from jaxdl.optim._sgd import SGD

__all__ = [
    "SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "Lion", "NAdam", "Optimizer",
    "RAdam", "RMSprop", "lr_scheduler",
]
