"""dl.interop.from_torch for the layers added with the rest of torch.nn.functional (fold,
unpooling, CTC, alpha dropout, distance losses): structure and outputs match torch."""

import numpy as np
import pytest
import torch
import torch.nn as tnn
from torch_twin import rand

import jaxdl as dl
from jaxdl import nn


def _compare(t, inputs):
    j = dl.interop.from_torch(t)
    assert type(j).__name__ == type(t).__name__
    assert [p for p, _ in j.named_modules()] == [p for p, _ in t.named_modules()]
    report = dl.interop.compare(t, j, inputs, jit=False)
    assert report.rows and report.ok, str(report)
    return j


def test_fold_unfold_unpool_and_dropouts():
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 3, 6, 7)
    _compare(tnn.Unfold((2, 3), dilation=(2, 1), padding=1, stride=2), (x,))
    _compare(tnn.Fold((5, 4), 2, stride=(1, 2)), (rand(rng, 1, 12, 8),))
    _compare(tnn.Sequential(tnn.MaxPool2d(2, return_indices=False), tnn.AlphaDropout(0.2),
                            tnn.FeatureAlphaDropout(0.3)).eval(), (x,))
    _, idx = torch.nn.functional.max_pool2d(torch.tensor(x[..., :6]), 2, return_indices=True)
    j = _compare(tnn.MaxUnpool2d(2), (rand(rng, 2, 3, 3, 3), idx.numpy()))
    assert j.kernel_size == (2, 2) and j.stride == (2, 2)
    _, idx = torch.nn.functional.max_pool1d(torch.tensor(x[0]), 3, 2, return_indices=True)
    _compare(tnn.MaxUnpool1d(3, 2), (rand(rng, *idx.shape), idx.numpy()))
    assert dl.interop.from_torch(tnn.MaxPool1d(2, return_indices=True)).return_indices


def test_losses():
    rng = np.random.default_rng(1)
    log_probs = torch.tensor(rand(rng, 8, 2, 5)).log_softmax(-1).numpy()
    targets, lengths = np.array([[1, 2, 2], [3, 4, 0]]), (np.array([8, 7]), np.array([3, 2]))
    j = _compare(tnn.CTCLoss(blank=0, reduction="sum", zero_infinity=True),
                 (log_probs, targets, *lengths))
    assert j.zero_infinity and j.reduction == "sum"
    _compare(tnn.MultiLabelMarginLoss(reduction="none"),
             (rand(rng, 2, 4), np.array([[3, 0, -1, 1], [2, -1, 0, 0]])))
    triplet = rand(rng, 3, 4), rand(rng, 3, 4), rand(rng, 3, 4)
    j = _compare(tnn.TripletMarginWithDistanceLoss(margin=0.5, swap=True), triplet)
    assert isinstance(j.distance_function, nn.PairwiseDistance)
    j = _compare(tnn.TripletMarginWithDistanceLoss(distance_function=tnn.PairwiseDistance(p=1.0)),
                 triplet)
    assert j.distance_function.norm == 1.0
    _compare(tnn.CosineSimilarity(dim=1, eps=1e-6), triplet[:2])
    with pytest.raises(NotImplementedError, match=r"<root> \(.*TripletMarginWithDistanceLoss\) "
                                                  r"uses distance_function=.*Python callable"):
        dl.interop.from_torch(tnn.TripletMarginWithDistanceLoss(distance_function=lambda a, b: a - b))
