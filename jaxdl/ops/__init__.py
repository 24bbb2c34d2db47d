"""Online-normalizer softmax family (Milakov & Gimelshein 2018): Pallas kernels and XLA."""

from jaxdl.ops._dispatch import (
    cross_entropy,
    log_softmax,
    logsumexp,
    softmax,
    softmax_topk,
)

__all__ = ["cross_entropy", "log_softmax", "logsumexp", "softmax", "softmax_topk"]
