"""dl.interop.from_torch: converted models match torch in structure, outputs and gradients."""


import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn as tnn
from torch_twin import rand, square_loss, torch_cnn

import jaxdl as dl
from jaxdl import nn


class _Custom(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x) * 2


def _layer_zoo():
    """(torch module, input shapes or arrays) for every convertible layer family."""
    x4 = (2, 4, 6, 6)
    return [
        (tnn.Conv1d(4, 6, 3, stride=2, padding="valid", dilation=1), [(2, 4, 9)]),
        (tnn.Conv3d(2, 3, 2, groups=1, padding_mode="zeros"), [(1, 2, 4, 4, 4)]),
        (tnn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1), [x4]),
        (tnn.ConvTranspose1d(4, 2, 3, stride=2), [(2, 4, 5)]),
        (tnn.MaxPool1d(3, stride=2, ceil_mode=True), [(2, 4, 9)]),
        (tnn.AvgPool1d(3, count_include_pad=False, padding=1), [(2, 4, 9)]),
        (tnn.AvgPool2d(3, stride=2, padding=1, divisor_override=4), [x4]),
        (tnn.AdaptiveAvgPool1d(4), [(2, 4, 9)]),
        (tnn.AdaptiveAvgPool2d((3, 2)), [x4]),
        (tnn.AdaptiveMaxPool2d(3), [x4]),
        (tnn.LocalResponseNorm(3, alpha=1e-3), [x4]),
        (tnn.BatchNorm1d(4, momentum=None), [(3, 4)]),
        (tnn.GroupNorm(2, 4, eps=1e-3), [x4]),
        (tnn.RMSNorm([6, 6]), [x4]),
        (tnn.InstanceNorm2d(4, affine=True), [x4]),
        (tnn.LayerNorm(6, elementwise_affine=False), [x4]),
        (tnn.Dropout2d(0.5), [x4]),
        (tnn.Unflatten(1, (2, 2)), [x4]),
        (tnn.Sequential(tnn.ReLU6(), tnn.ELU(0.5), tnn.SiLU(), tnn.Mish(), tnn.Hardswish(),
                        tnn.Softplus(beta=2.0), tnn.Tanh(), tnn.Sigmoid()), [x4]),
        (tnn.Softmax(dim=1), [x4]),
        (tnn.LogSoftmax(dim=-1), [x4]),
        (tnn.Identity(), [x4]),
        (tnn.Embedding(10, 3, padding_idx=2), [np.array([[1, 2, 9]])]),
        (tnn.EmbeddingBag(10, 3, mode="max"), [np.array([[1, 2, 9], [0, 0, 3]])]),
        (tnn.LSTMCell(4, 3), [(2, 4)]),
        (tnn.RNNCell(4, 3, nonlinearity="relu"), [(2, 4)]),
    ]


def test_from_torch_cnn_is_faithful_in_eval_and_train(rng):
    t = torch_cnn()
    j = dl.interop.from_torch(t)
    assert type(j.head[1]) is nn.GELU and j.head[1].approximate == "tanh"
    assert j.pool.ceil_mode and j.conv.bias is None and j.act.negative_slope == 0.2
    assert list(j.state_dict()) == list(t.state_dict())
    x = rand(rng, 2, 3, 7, 7)
    t.eval()
    j.eval()
    report = dl.interop.compare(t, j, x, loss_fn=square_loss)
    assert report.ok, str(report)
    # outputs in execution order (children before their container), then gradients
    paths = [row.path for row in report.rows if row.kind == "output"]
    assert paths == ["conv", "bn", "act", "pool", "drop", "flat", "head.0", "head.1", "head.2",
                     "head.3", "head", "<root>"]
    assert {row.path for row in report.rows if row.kind == "grad"} == {
        name for name, _ in t.named_parameters()}
    # train mode: batch statistics and running-stat updates, dropout switched off on both sides
    t.train()
    t.drop.p = 0.0
    j = dl.interop.from_torch(t)
    report = dl.interop.compare(t, j, x, loss_fn=square_loss)
    assert report.ok, str(report)
    np.testing.assert_allclose(j.bn.running_var, t.bn.running_var.numpy(), rtol=1e-5)
    assert int(j.bn.num_batches_tracked) == int(t.bn.num_batches_tracked)


def test_from_torch_recurrent_attention_and_transformer(rng):
    torch.manual_seed(0)
    t = tnn.ModuleDict({
        "lstm": tnn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True),
        "proj": tnn.LSTM(4, 6, num_layers=2, proj_size=3, batch_first=True),
        "gru": tnn.GRU(4, 5, bias=False),
        "rnn": tnn.RNN(4, 3, nonlinearity="relu"),
        "cell": tnn.GRUCell(4, 3),
        "attn": tnn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True),
        "enc": tnn.TransformerEncoder(
            tnn.TransformerEncoderLayer(8, 2, dim_feedforward=16, activation="gelu",
                                        norm_first=True, batch_first=True),
            num_layers=2, norm=tnn.LayerNorm(8), enable_nested_tensor=False),
        "blocks": tnn.ModuleList([tnn.Embedding(10, 4, padding_idx=0), tnn.Identity()]),
    })
    j = dl.interop.from_torch(t)
    assert list(j.state_dict()) == list(t.state_dict())
    assert j["gru"].bias is False and j["rnn"].nonlinearity == "relu"
    assert j["attn"].kdim == 4 and j["attn"].bias_k is not None
    assert j["enc"].layers[1].norm_first and j["blocks"][0].padding_idx == 0
    t.eval()
    j.eval()
    x = rand(rng, 2, 5, 4)
    for name in ("lstm", "proj", "gru", "rnn"):
        report = dl.interop.compare(t[name], j[name], x, loss_fn=lambda out: (out[0] ** 2).sum())
        assert report.ok, str(report)
    lstm_rows = [row.path for row in report.rows if row.kind == "output"]
    assert lstm_rows == ["<root>[0]", "<root>[1]"]  # (output, h_n) leaves
    seq = rand(rng, 2, 5, 8)
    report = dl.interop.compare(t["enc"], j["enc"], seq, loss_fn=square_loss)
    assert report.ok, str(report)
    q, k, v = rand(rng, 3, 2, 8), rand(rng, 4, 2, 4), rand(rng, 4, 2, 6)
    report = dl.interop.compare(t["attn"], j["attn"], (q, k, v),
                                loss_fn=lambda out: (out[0] ** 2).sum())
    assert report.ok, str(report)


def test_from_torch_keeps_modes_and_frozen_parameters():
    t = torch_cnn()
    t.head.eval()
    t.conv.weight.requires_grad_(False)
    j = dl.interop.from_torch(t)
    assert j.training and j.bn.training and not j.head.training and not j.head[0].training
    grads = dl.grad(lambda m: m(jnp.ones((1, 3, 7, 7))).sum())(j)
    assert "conv.weight" not in grads and "bn.weight" in grads


def test_unsupported_modules_raise_naming_path_and_type():
    with pytest.raises(NotImplementedError, match=r"1 \(.*_Custom\) is a custom Module"):
        dl.interop.from_torch(tnn.Sequential(tnn.ReLU(), _Custom()))
    with pytest.raises(NotImplementedError, match=r"0\.1 \(torch.*PixelShuffle\) has no jaxdl"):
        dl.interop.from_torch(tnn.Sequential(tnn.Sequential(tnn.ReLU(), tnn.PixelShuffle(2))))
    with pytest.raises(NotImplementedError, match=r"bn \(.*BatchNorm2d\) uses bias=False"):
        dl.interop.from_torch(tnn.ModuleDict({"bn": tnn.BatchNorm2d(3, bias=False)}))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        dl.interop.from_torch(nn.Linear(2, 2))


def test_from_torch_layer_zoo(rng):
    torch.manual_seed(0)
    for t, shapes in _layer_zoo():
        t.eval()
        j = dl.interop.from_torch(t)
        assert type(j).__name__ == type(t).__name__
        assert list(j.state_dict()) == list(t.state_dict()), type(t).__name__
        inputs = tuple(s if isinstance(s, np.ndarray) else rand(rng, *s) for s in shapes)
        report = dl.interop.compare(t, j, inputs, jit=False)
        assert report.rows and report.ok, f"{type(t).__name__}\n{report}"


@pytest.mark.parametrize("loss, target", [
    (lambda: tnn.CrossEntropyLoss(weight=torch.rand(5), label_smoothing=0.1, ignore_index=1),
     lambda rng: rng.integers(0, 5, (4,))),
    (lambda: tnn.BCEWithLogitsLoss(pos_weight=torch.rand(5)),
     lambda rng: rng.random((4, 5)).astype(np.float32)),
    (lambda: tnn.HuberLoss(delta=0.5, reduction="sum"), lambda rng: rand(rng, 4, 5)),
    (lambda: tnn.KLDivLoss(reduction="batchmean", log_target=True), lambda rng: rand(rng, 4, 5)),
])
def test_from_torch_losses(loss, target, rng):
    torch.manual_seed(0)
    t = loss()
    j = dl.interop.from_torch(t)
    report = dl.interop.compare(t, j, (rand(rng, 4, 5), target(rng)), jit=False)
    assert len(report.rows) == 1 and report.ok, str(report)


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
