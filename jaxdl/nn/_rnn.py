"""RNN, LSTM, GRU and their single-step cells, with PyTorch's weights, gate order and biases.

Each layer and direction projects the whole input sequence at once
(x W_ih^T + b_ih, one big matmul) and then runs the recurrence with
`jax.lax.scan`, so compiled code does not grow with the sequence length.
Gate order is PyTorch's: LSTM (i, f, g, o), GRU (r, z, n) with
n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).
"""

import functools
import math
import warnings

import jax
import jax.numpy as jnp

from jaxdl import _random
from jaxdl._convert import as_dtype
from jaxdl._module import Module, Parameter
from jaxdl._random import KeyStream
from jaxdl.nn import _lstm_scan
from jaxdl.nn import functional as F

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---- one time step, given the input projection xp = x W_ih^T + b_ih --------------------------
# The state is a tuple: (h,) for RNN and GRU, (h, c) for LSTM.


def _hidden_proj(h, w_hh, b_hh):
    out = h @ w_hh.T
    return out if b_hh is None else out + b_hh


def _rnn_step(activation):
    def step(xp, state, w_hh, b_hh):
        return (activation(xp + _hidden_proj(state[0], w_hh, b_hh)),)

    return step


def _lstm_step(xp, state, w_hh, b_hh, w_hr=None):
    """One LSTM step; with a projection (proj_size > 0) h = (o * tanh(c)) W_hr^T."""
    h, c = state
    i, f, g, o = jnp.split(xp + _hidden_proj(h, w_hh, b_hh), 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (h if w_hr is None else h @ w_hr.T), c


def _lstm_scan_autodiff(xp, h0, c0, w_hh, b_hh, reverse):
    """The LSTM recurrence as plain `lax.scan` of `_lstm_step`, differentiated by JAX: the
    form `_lstm_scan.lstm_scan` replaced, kept as its reference (tests, benchmarks/lstm.py)."""
    def body(carry, x):
        carry = _lstm_step(x, carry, w_hh, b_hh)
        return carry, carry[0]

    final, hs = jax.lax.scan(body, (h0, c0), xp, reverse=reverse)
    return hs, final


def _gru_step(xp, state, w_hh, b_hh):
    (h,) = state
    x_r, x_z, x_n = jnp.split(xp, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(_hidden_proj(h, w_hh, b_hh), 3, axis=-1)
    r = jax.nn.sigmoid(x_r + h_r)
    z = jax.nn.sigmoid(x_z + h_z)
    n = jnp.tanh(x_n + r * h_n)
    return ((1 - z) * n + z * h,)


_STEPS = {
    "RNN_TANH": _rnn_step(jnp.tanh),
    "RNN_RELU": _rnn_step(jax.nn.relu),
    "LSTM": _lstm_step,
    "GRU": _gru_step,
}


def _uniform_init(keys, shape, hidden_size, dtype):
    """PyTorch's RNN init for every weight and bias: U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    return Parameter(_random.uniform(keys(), shape, dtype, -bound, bound))


def _check_proj_size(mode, proj_size, hidden_size):
    """torch's checks and messages for LSTM projections."""
    if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable projections")
    if proj_size and mode != "LSTM":
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")


def _check_sizes(input_size, hidden_size, num_layers=1):
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size),
                        ("num_layers", num_layers)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


# ---- sequence layers ---------------------------------------------------------------------------


class RNNBase(Module):
    """Shared machinery of RNN, LSTM and GRU (PyTorch's `nn.RNNBase`)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None,
                 *, key=None):
        super().__init__()
        _check_sizes(input_size, hidden_size, num_layers)
        if not (0.0 <= dropout <= 1.0) or isinstance(dropout, bool):
            raise ValueError(f"dropout should be a number in range [0, 1], got {dropout!r}")
        _check_proj_size(mode, proj_size, hidden_size)
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout={dropout} has no effect with num_layers=1: dropout is "
                          "applied between recurrent layers only", stacklevel=3)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        dtype = as_dtype(dtype, jnp.float32)
        keys = KeyStream(key)
        gate_size = _GATES[mode] * hidden_size
        directions = 2 if bidirectional else 1

        def init(shape):
            return _uniform_init(keys, shape, hidden_size, dtype)

        # torch's registration order (and so its state_dict order and init draws):
        # w_ih, w_hh, b_ih, b_hh, then the projection w_hr.
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else self._output_size * directions
            for suffix in ("", "_reverse")[:directions]:
                setattr(self, f"weight_ih_l{layer}{suffix}", init((gate_size, layer_input)))
                setattr(self, f"weight_hh_l{layer}{suffix}", init((gate_size, self._output_size)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", init((gate_size,)))
                    setattr(self, f"bias_hh_l{layer}{suffix}", init((gate_size,)))
                if proj_size:
                    setattr(self, f"weight_hr_l{layer}{suffix}", init((proj_size, hidden_size)))
        self._register_rng("_rng", keys())

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    @property
    def _output_size(self):
        """Size of h (and of each direction's output): proj_size when projecting."""
        return self.proj_size or self.hidden_size

    def _weights(self, layer, direction):
        """(w_ih, w_hh, b_ih, b_hh, w_hr), None for what the layer does not have."""
        suffix = "_reverse" if direction else ""
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
        present = (True, True, self.bias, self.bias, self.proj_size > 0)
        return tuple(getattr(self, f"{n}_l{layer}{suffix}") if p else None
                     for n, p in zip(names, present))

    def _initial_state(self, hx, batch, batched, dtype):
        """(layers*directions, N, H) zeros or the checked user state: (h_0,) or (h_0, c_0).

        With a projection h has size proj_size, c keeps hidden_size.
        """
        sizes = (self._output_size, self.hidden_size)[:2 if self.mode == "LSTM" else 1]
        expected = [(self.num_layers * self._directions, batch, size) for size in sizes]
        if hx is None:
            return tuple(jnp.zeros(shape, dtype) for shape in expected)
        states = tuple(hx) if self.mode == "LSTM" else (hx,)
        if len(states) != len(sizes):
            raise self._input_error("hx as a tuple (h_0, c_0)", "", f"{len(states)} arrays")
        out = []
        for name, state, shape in zip(("h_0", "c_0"), states, expected):
            want = shape if batched else (shape[0], shape[2])
            if tuple(state.shape) != want:
                kind = "batched" if batched else "unbatched"
                raise self._input_error(f"{name} of shape", want,
                                        f"{tuple(state.shape)} (for {kind} input)")
            out.append(state if batched else state[:, None])
        return tuple(out)

    def _run_direction(self, xs, carry, layer, direction):
        w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
        projected = F.linear(xs, w_ih, b_ih)  # the whole sequence in one matmul
        if self.mode == "LSTM" and w_hr is None:  # the backward written out: _lstm_scan.py
            hs, final = _lstm_scan.lstm_scan(projected, *carry, w_hh, b_hh, direction == 1)
            return final, hs
        step = functools.partial(_lstm_step, w_hr=w_hr) if w_hr is not None else _STEPS[self.mode]

        def body(carry, xp):
            carry = step(xp, carry, w_hh, b_hh)
            return carry, carry[0]

        return jax.lax.scan(body, carry, projected, reverse=direction == 1)

    def forward(self, input, hx=None):
        self._check_input(input, (2, 3), -1, self.input_size)
        self._check_floating(input)
        batched = input.ndim == 3
        xs = input if batched else input[:, None]
        if batched and self.batch_first:
            xs = jnp.swapaxes(xs, 0, 1)  # scan runs over the leading (time) axis
        states = self._initial_state(hx, xs.shape[1], batched, xs.dtype)
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self._directions):
                index = layer * self._directions + direction
                carry, ys = self._run_direction(xs, tuple(s[index] for s in states), layer,
                                                direction)
                finals.append(carry)
                outputs.append(ys)
            xs = jnp.concatenate(outputs, axis=-1) if len(outputs) > 1 else outputs[0]
            if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                xs = F.dropout(xs, self.dropout, True, key=self._next_key())
        output = xs if not batched else (jnp.swapaxes(xs, 0, 1) if self.batch_first else xs)
        final = [jnp.stack(parts) for parts in zip(*finals)]
        if not batched:
            output = output[:, 0]
            final = [f[:, 0] for f in final]
        return output, (tuple(final) if self.mode == "LSTM" else final[0])

    def flatten_parameters(self):
        """No-op kept for ported code (cuDNN weight packing has no meaning here)."""

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu).

    Returns `(output, h_n)`: output (L, N, D*H) (batch_first: (N, L, D*H)),
    h_n (D*num_layers, N, H); unbatched (L, H_in) input drops the N axis.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None, dtype=None,
                 *, key=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}': use 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype, key=key)

    def extra_repr(self):
        s = super().extra_repr()
        return s if self.nonlinearity == "tanh" else s + f", nonlinearity={self.nonlinearity}"


class LSTM(RNNBase):
    """LSTM with gates (i, f, g, o); returns `(output, (h_n, c_n))`.

    With `proj_size > 0` (torch's LSTMP): h_t = (o_t * tanh(c_t)) W_hr^T, so h_n and
    output have size proj_size and c_n keeps hidden_size; weights `weight_hr_l{k}`
    of shape (proj_size, hidden_size), and `weight_hh` (4H, proj_size).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None, *, key=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype, key=key)


class GRU(RNNBase):
    """GRU with gates (r, z, n); returns `(output, h_n)`."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, key=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype, key=key)


# ---- single-step cells -------------------------------------------------------------------------


class RNNCellBase(Module):
    """One time step: input (N, H_in) or (H_in,), state (N, H) or (H,)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True,
                 device=None, dtype=None, *, key=None):
        super().__init__()
        _check_sizes(input_size, hidden_size)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        dtype = as_dtype(dtype, jnp.float32)
        keys = KeyStream(key)
        gate_size = _GATES[mode] * hidden_size
        self.weight_ih = _uniform_init(keys, (gate_size, input_size), hidden_size, dtype)
        self.weight_hh = _uniform_init(keys, (gate_size, hidden_size), hidden_size, dtype)
        if bias:
            self.bias_ih = _uniform_init(keys, (gate_size,), hidden_size, dtype)
            self.bias_hh = _uniform_init(keys, (gate_size,), hidden_size, dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)

    def forward(self, input, hx=None):
        self._check_input(input, (1, 2), -1, self.input_size)
        self._check_floating(input)
        batched = input.ndim == 2
        x = input if batched else input[None]
        want = (x.shape[0], self.hidden_size)
        count = 2 if self.mode == "LSTM" else 1
        if hx is None:
            states = (jnp.zeros(want, x.dtype),) * count
        else:
            states = tuple(hx) if self.mode == "LSTM" else (hx,)
            if len(states) != count:
                raise self._input_error("hx as a tuple (h_0, c_0)", "", f"{len(states)} arrays")
            for state in states:
                if tuple(state.shape) != (want if batched else want[1:]):
                    raise self._input_error("hidden state of shape",
                                            want if batched else want[1:], tuple(state.shape))
            states = states if batched else tuple(s[None] for s in states)
        xp = F.linear(x, self.weight_ih, self.bias_ih)
        carry = _STEPS[self.mode](xp, states, self.weight_hh, self.bias_hh)
        carry = carry if batched else tuple(c[0] for c in carry)
        return carry if self.mode == "LSTM" else carry[0]

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        return s if self.bias else s + ", bias=False"


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None, *, key=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, bias, device,
                         dtype, key=key)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    """Returns `(h', c')`."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None, *, key=None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype, key=key)


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None, *, key=None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype, key=key)
