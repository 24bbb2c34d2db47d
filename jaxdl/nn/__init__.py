"""`jaxdl.nn`: modules with PyTorch's names, arguments, layouts and initialisation."""

from jaxdl._module import Buffer, Module, Parameter, ShapeError
from jaxdl.nn import functional, init, parallel, utils
from jaxdl.nn._activation import (
    ELU,
    GELU,
    Hardswish,
    LeakyReLU,
    LogSoftmax,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from jaxdl.nn._attention import MultiheadAttention
from jaxdl.nn._container import ModuleDict, ModuleList, Sequential
from jaxdl.nn._conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from jaxdl.nn._distance import CosineSimilarity, PairwiseDistance
from jaxdl.nn._dropout import AlphaDropout, Dropout, Dropout2d, FeatureAlphaDropout
from jaxdl.nn._embedding import Embedding, EmbeddingBag
from jaxdl.nn._fold import Fold, Unfold
from jaxdl.nn._linear import Bilinear, Identity, Linear
from jaxdl.nn._loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    CTCLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    MultiLabelMarginLoss,
    NLLLoss,
    SmoothL1Loss,
    TripletMarginWithDistanceLoss,
)
from jaxdl.nn._norm import (
    BatchNorm1d,
    BatchNorm2d,
    GroupNorm,
    InstanceNorm2d,
    LayerNorm,
    LocalResponseNorm,
    RMSNorm,
    SyncBatchNorm,
)
from jaxdl.nn._pool import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    FractionalMaxPool2d,
    FractionalMaxPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxUnpool1d,
    MaxUnpool2d,
)
from jaxdl.nn._rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from jaxdl.nn._shape import Flatten, Unflatten
from jaxdl.nn._transformer import (
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool1d", "AvgPool2d", "BCELoss",
    "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "Bilinear", "Buffer", "Conv1d", "Conv2d",
    "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "CrossEntropyLoss", "Dropout",
    "Dropout2d", "ELU",
    "Embedding", "EmbeddingBag", "Flatten", "GELU", "GRU", "GRUCell", "GroupNorm", "Hardswish",
    "HuberLoss", "Identity", "InstanceNorm2d", "KLDivLoss", "L1Loss", "LSTM", "LSTMCell", "LayerNorm",
    "LeakyReLU", "Linear", "LocalResponseNorm", "LogSoftmax", "MSELoss", "MaxPool1d", "MaxPool2d",
    "Mish", "Module", "ModuleDict", "ModuleList", "MultiheadAttention", "NLLLoss", "Parameter",
    "RMSNorm", "RNN", "RNNCell", "ReLU", "ReLU6", "Sequential", "ShapeError", "SiLU", "Sigmoid",
    "SmoothL1Loss", "Softmax", "Softplus", "SyncBatchNorm", "Tanh", "TransformerDecoder",
    "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer", "Unflatten",
    "functional", "init", "parallel", "utils",
    # torch.nn layers added after the first release
    "AlphaDropout", "CTCLoss", "CosineSimilarity", "FeatureAlphaDropout", "Fold", "MaxUnpool1d",
    "MaxUnpool2d", "MultiLabelMarginLoss", "PairwiseDistance", "TripletMarginWithDistanceLoss", "Unfold",
    "FractionalMaxPool2d", "FractionalMaxPool3d",
]
