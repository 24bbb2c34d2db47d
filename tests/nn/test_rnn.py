"""RNN, LSTM, GRU and cells against torch: same weights, same inputs, same outputs and gradients."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_grads
from torch_twin import check_twin, rand

import jaxdl as dl
from jaxdl import nn
from jaxdl.nn import _lstm_scan, _rnn

SEQ_CLASSES = {"RNN": (nn.RNN, torch.nn.RNN), "LSTM": (nn.LSTM, torch.nn.LSTM),
               "GRU": (nn.GRU, torch.nn.GRU)}


CELL_CLASSES = {"RNNCell": (nn.RNNCell, torch.nn.RNNCell),
                "LSTMCell": (nn.LSTMCell, torch.nn.LSTMCell),
                "GRUCell": (nn.GRUCell, torch.nn.GRUCell)}


# Without dropout, train and eval mode compute the same thing, so one mode suffices; compiling
# the whole step (jit=True) is faster than eager op-by-op; test_eager_matches_torch runs eagerly.
twin = functools.partial(check_twin, modes=("train",), jit=True)


def _pair(kind, *args, **kwargs):
    ours, theirs = {**SEQ_CLASSES, **CELL_CLASSES}[kind]
    torch.manual_seed(0)
    return theirs(*args, **kwargs), ours(*args, **kwargs)


class _StatefulLSTM(torch.nn.Module):
    """Takes (x, h_0, c_0) as separate inputs, so the harness differentiates both states."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, h, c):
        return self.inner(x, (h, c))


class _JStatefulLSTM(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, h, c):
        return self.inner(x, (h, c))


@pytest.mark.parametrize("kind", list(SEQ_CLASSES))
@pytest.mark.parametrize("num_layers, bidirectional, batch_first, bias", [
    (1, False, False, True),
    (2, True, True, True),
    (3, False, True, False),
    (2, True, False, False),
])
def test_sequence_layer_matches_torch(kind, num_layers, bidirectional, batch_first, bias, rng):
    t, j = _pair(kind, 5, 7, num_layers=num_layers, bias=bias, batch_first=batch_first,
                 bidirectional=bidirectional)
    assert list(j.state_dict()) == list(t.state_dict())
    shape = (3, 4, 5) if batch_first else (4, 3, 5)
    twin(t, j, [rand(rng, *shape)])


@pytest.mark.parametrize("kind", list(SEQ_CLASSES))
def test_initial_state_and_unbatched_input(kind, rng):
    t, j = _pair(kind, 4, 6, num_layers=2, bidirectional=True)
    h0 = rand(rng, 4, 2, 6)
    hx = (h0, rand(rng, 4, 2, 6)) if kind == "LSTM" else h0
    # input and initial state are both differentiated, so they are passed positionally;
    # LSTM takes (h_0, c_0) as one argument: wrap both sides to unpack it
    if kind == "LSTM":
        class Wrap(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x, h, c):
                return self.inner(x, (h, c))

        class JWrap(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x, h, c):
                return self.inner(x, (h, c))

        t, j = Wrap(t), JWrap(j)
        unbatched = [hx[0][:, 0], hx[1][:, 0]]
    else:
        hx, unbatched = [hx], [hx[:, 0]]
    twin(t, j, [rand(rng, 3, 2, 4), *hx])
    twin(t, j, [rand(rng, 3, 4), *unbatched])


def test_relu_rnn_and_length_one_batch_one(rng):
    t, j = _pair("RNN", 3, 5, nonlinearity="relu", num_layers=2)
    twin(t, j, [rand(rng, 1, 1, 3)])
    twin(t, j, [rand(rng, 6, 1, 3)])
    assert "nonlinearity=relu" in repr(j)


@pytest.mark.parametrize("kind", list(CELL_CLASSES))
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_torch(kind, bias, rng):
    t, j = _pair(kind, 5, 3, bias=bias)
    assert list(j.state_dict()) == list(t.state_dict())
    twin(t, j, [rand(rng, 4, 5)])
    twin(t, j, [rand(rng, 5)])
    if kind != "LSTMCell":
        twin(t, j, [rand(rng, 4, 5), rand(rng, 4, 3)])


def test_lstm_cell_with_state(rng):
    t, j = _pair("LSTMCell", 5, 3)
    j.load_state_dict(t.state_dict())
    x, h, c = rand(rng, 2, 5), rand(rng, 2, 3), rand(rng, 2, 3)
    h_t, c_t = t(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
    h_j, c_j = j(jnp.asarray(x), (jnp.asarray(h), jnp.asarray(c)))
    np.testing.assert_allclose(h_j, h_t.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(c_j, c_t.detach().numpy(), atol=1e-6)


def test_default_init_is_uniform_in_torch_bound():
    dl.manual_seed(0)
    lstm = nn.LSTM(10, 64, num_layers=2)
    bound = 1 / np.sqrt(64)
    values = np.concatenate([np.ravel(p) for p in lstm.parameters()])
    assert values.min() >= -bound and values.max() <= bound
    # a uniform sample fills the interval: its std is bound / sqrt(3)
    assert abs(values.std() - bound / np.sqrt(3)) < 0.02 * bound


def test_inter_layer_dropout_is_train_only_and_advances_under_jit(rng):
    t, j = _pair("GRU", 4, 8, num_layers=2, dropout=0.5)
    j.load_state_dict(t.state_dict())
    x = rand(rng, 5, 3, 4)
    j.eval()
    t.eval()
    out_eval, _ = j(jnp.asarray(x))
    np.testing.assert_allclose(out_eval, t(torch.tensor(x))[0].detach().numpy(), atol=1e-5)
    j.train()
    step = dl.jit(lambda m, x: m(x)[0])
    first, second = np.asarray(step(j, jnp.asarray(x))), np.asarray(step(j, jnp.asarray(x)))
    assert not np.allclose(first, out_eval, atol=1e-4)
    assert not np.allclose(first, second)
    # the last layer sees no dropout: dropout=0 in the 1-layer case changes nothing
    with pytest.warns(UserWarning, match="no effect"):
        nn.LSTM(4, 8, dropout=0.3)


def test_eager_matches_torch(rng):
    t, j = _pair("LSTM", 4, 6, num_layers=2, bidirectional=True, batch_first=True)
    check_twin(t, j, [rand(rng, 2, 9, 4)], modes=("train",))


def test_bad_inputs_name_module_and_shapes():
    model = nn.Sequential(nn.LSTM(4, 6, num_layers=2))
    with pytest.raises(ValueError, match=r"0 \(LSTM\).*size 4 on axis 2.*\(3, 2, 5\)"):
        model(jnp.zeros((3, 2, 5)))
    with pytest.raises(ValueError, match=r"0 \(LSTM\).*rank 2-d or 3-d"):
        model(jnp.zeros((1, 3, 2, 4)))
    lstm = model[0]
    with pytest.raises(ValueError, match=r"h_0 of shape \(2, 2, 6\).*\(1, 2, 6\)"):
        lstm(jnp.zeros((3, 2, 4)), (jnp.zeros((1, 2, 6)), jnp.zeros((2, 2, 6))))
    with pytest.raises(ValueError, match=r"GRUCell.*hidden state of shape \(3, 5\)"):
        nn.GRUCell(2, 5)(jnp.zeros((3, 2)), jnp.zeros((3, 4)))
    for bad, message in [(6, "smaller than hidden_size"), (-1, "positive integer or zero")]:
        with pytest.raises(ValueError, match=message):
            torch.nn.LSTM(4, 6, proj_size=bad)
        with pytest.raises(ValueError, match=message):
            nn.LSTM(4, 6, proj_size=bad)
    with pytest.raises(ValueError, match=r"c_0 of shape \(1, 2, 6\).*\(1, 2, 3\)"):
        nn.LSTM(4, 6, proj_size=3)(jnp.zeros((5, 2, 4)), (jnp.zeros((1, 2, 3)), jnp.zeros((1, 2, 3))))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(4, 6, nonlinearity="gelu")


def test_explicit_key_reproduces_weights():
    a = nn.GRU(3, 4, key=jax.random.key(1))
    b = nn.GRU(3, 4, key=jax.random.key(1))
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("num_layers, bidirectional, batch_first, bias", [
    (1, False, False, True),
    (2, True, True, True),
    (3, False, False, False),
])
@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_lstm_projection_matches_torch(num_layers, bidirectional, batch_first, bias, rng):
    t, j = _pair("LSTM", 5, 7, num_layers=num_layers, bias=bias, batch_first=batch_first,
                 bidirectional=bidirectional, proj_size=3)
    assert list(j.state_dict()) == list(t.state_dict())
    assert all(j.state_dict()[k].shape == tuple(v.shape) for k, v in t.state_dict().items())
    assert repr(j) == repr(t)
    shape = (2, 4, 5) if batch_first else (4, 2, 5)
    twin(t, j, [rand(rng, *shape)])
    # given initial states: h_0 (D * layers, N, proj_size), c_0 (D * layers, N, hidden_size)
    states = num_layers * (2 if bidirectional else 1)
    h0, c0 = rand(rng, states, 2, 3), rand(rng, states, 2, 7)
    out = twin(_StatefulLSTM(t), _JStatefulLSTM(j), [rand(rng, *shape), h0, c0])
    assert out[0].shape[-1] == 3 * (2 if bidirectional else 1)
    assert out[1].shape == (states, 2, 3) and out[2].shape == (states, 2, 7)
    twin(_StatefulLSTM(t), _JStatefulLSTM(j), [rand(rng, 4, 5), h0[:, 0], c0[:, 0]])


# ---- the LSTM recurrence's written-out derivative (jaxdl/nn/_lstm_scan.py) --------------------


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_recurrence_derivatives_match_autodiff(reverse, bias, rng):
    t, n, h = 7, 3, 5
    args = [jnp.asarray(rng.normal(size=s), jnp.float32)
            for s in ((t, n, 4 * h), (n, h), (n, h), (4 * h, h), (4 * h,))]
    if not bias:
        args[-1] = None
    ours = functools.partial(_lstm_scan.lstm_scan, reverse=reverse)
    reference = functools.partial(_rnn._lstm_scan_autodiff, reverse=reverse)
    tangents = [None if a is None else jnp.asarray(rng.normal(size=a.shape), jnp.float32)
                for a in args]
    out, tangent_out = jax.jvp(ours, args, tangents)
    expected, expected_tangent = jax.jvp(reference, args, tangents)
    cotangent = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), out)
    grads = jax.vjp(ours, *args)[1](cotangent)
    expected_grads = jax.vjp(reference, *args)[1](cotangent)
    for a, b in zip(jax.tree.leaves((out, tangent_out, grads)),
                    jax.tree.leaves((expected, expected_tangent, expected_grads))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_lstm_second_derivatives(rng):
    args = [jnp.asarray(rng.normal(size=s) * 0.5, jnp.float32)
            for s in ((4, 2, 12), (2, 3), (2, 3), (12, 3), (12,))]
    # Compiled: check_grads run eagerly dispatches the scan's second derivatives op by op (~30 s).
    loss = jax.jit(lambda *a: _lstm_scan.lstm_scan(*a, False)[0].sum())
    check_grads(loss, args, order=2, modes=("fwd", "rev"), atol=5e-2, rtol=5e-2, eps=1e-2)
