"""`jaxdl.nn`: modules with PyTorch's names, arguments, layouts and initialisation."""

from jaxdl._module import Buffer, Module, Parameter, ShapeError
from jaxdl.nn import functional, init
from jaxdl.nn._activation import LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from jaxdl.nn._container import ModuleDict, ModuleList, Sequential
from jaxdl.nn._dropout import Dropout
from jaxdl.nn._linear import Identity, Linear
from jaxdl.nn._loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss

__all__ = [
    "Buffer", "CrossEntropyLoss", "Dropout", "Identity", "L1Loss", "Linear", "LogSoftmax",
    "MSELoss", "Module", "ModuleDict", "ModuleList", "NLLLoss", "Parameter", "ReLU",
    "Sequential", "ShapeError", "Sigmoid", "Softmax", "Tanh", "functional", "init",
]
