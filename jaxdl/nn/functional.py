"""`torch.nn.functional` on jax arrays: same names, arguments and defaults.

Each functional form lives next to its module, in the file of its layer family
(`_activation.py`, `_loss.py`, `_conv.py`, ...); this module re-exports them all.

Differences from PyTorch, by necessity:
- random functions (`dropout`) take `key=`; without it they draw from the
  global stream, which is refused inside a trace (the key would be frozen
  into the compiled code). Inside `dl.jit` use the `nn.Dropout` module.
"""

from jaxdl.nn._activation import (  # noqa: F401
    celu,
    celu_,
    elu,
    elu_,
    gelu,
    glu,
    gumbel_softmax,
    hardshrink,
    hardsigmoid,
    hardswish,
    hardtanh,
    hardtanh_,
    leaky_relu,
    leaky_relu_,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    relu_,
    rrelu,
    rrelu_,
    selu,
    selu_,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softshrink,
    softsign,
    tanh,
    tanhshrink,
    threshold,
    threshold_,
)
from jaxdl.nn._attention import (  # noqa: F401
    multi_head_attention_forward,
    scaled_dot_product_attention,
)
from jaxdl.nn._conv import (  # noqa: F401
    conv1d,
    conv2d,
    conv3d,
    conv_tbc,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    pad,
)
from jaxdl.nn._ctc import ctc_loss  # noqa: F401
from jaxdl.nn._distance import (  # noqa: F401
    cosine_embedding_loss,
    cosine_similarity,
    gaussian_nll_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    pairwise_distance,
    pdist,
    poisson_nll_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from jaxdl.nn._dropout import (  # noqa: F401
    alpha_dropout,
    dropout,
    dropout1d,
    dropout2d,
    dropout3d,
    feature_alpha_dropout,
)
from jaxdl.nn._embedding import embedding, embedding_bag, one_hot  # noqa: F401
from jaxdl.nn._fold import fold, unfold  # noqa: F401
from jaxdl.nn._linear import (  # noqa: F401
    ScalingType,
    SwizzleType,
    bilinear,
    grouped_mm,
    linear,
    scaled_grouped_mm,
    scaled_mm,
)
from jaxdl.nn._loss import (  # noqa: F401
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    linear_cross_entropy,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from jaxdl.nn._norm import (  # noqa: F401
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    local_response_norm,
    normalize,
    rms_norm,
)
from jaxdl.nn._pool import (  # noqa: F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool1d_with_indices,
    adaptive_max_pool2d,
    adaptive_max_pool2d_with_indices,
    adaptive_max_pool3d,
    adaptive_max_pool3d_with_indices,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
    max_pool3d,
    max_pool3d_with_indices,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
)
from jaxdl.nn._resample import (  # noqa: F401
    interpolate,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
from jaxdl.nn._sampling import affine_grid, grid_sample  # noqa: F401
from jaxdl.nn._shape import (  # noqa: F401
    channel_shuffle,
    native_channel_shuffle,
    pixel_shuffle,
    pixel_unshuffle,
)
