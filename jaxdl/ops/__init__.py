"""Online-normalizer softmax family (Milakov & Gimelshein 2018) and flash attention on it:
Pallas kernels and XLA."""

from jaxdl.ops._attention import attention
from jaxdl.ops._dispatch import (
    cross_entropy,
    log_softmax,
    logsumexp,
    softmax,
    softmax_topk,
)

__all__ = ["attention", "cross_entropy", "log_softmax", "logsumexp", "softmax", "softmax_topk"]
