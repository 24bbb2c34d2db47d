"""The LSTM recurrence with its derivative written out, so the backward has cuDNN's shape.

Differentiating `lax.scan` of an LSTM step makes every backward step accumulate the
recurrent weight's gradient dz_t^T h_{t-1} in the loop carry: a small matrix product per
step that XLA's CPU backend runs in Eigen (its left operand contracts its major axis), and
a copy of the (4H, H) accumulator per step. Here the tangent is written so that the
weight and bias enter once, outside the loop (h_{t-1} dW^T for all steps in one product);
the tangent loop carries only (dh, dc) with the primal weight. Its transpose, the
backward, is then a loop emitting each step's gate gradient dz_t, and one product and one
sum over all steps for the weight and bias gradients. Forward mode works as before.

Shapes: xp (T, N, 4H) is the input projection x W_ih^T + b_ih, gates in PyTorch's order
(i, f, g, o); h0 and c0 (N, H); w_hh (4H, H); b_hh (4H,) or None. `reverse` runs the
sequence from its end (the second direction of a bidirectional layer).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxdl.nn._linear import _weight_tangent


def _forward(xp, h0, c0, w_hh, b_hh, reverse):
    """Every step's h and c and its gate activations (i, f, g, o), in sequence order.

    Each step's activations are written over its row of xp, which nothing reads after
    this loop: XLA updates xp's buffer in place, where a scan's stacked output is a fresh
    (T, N, 4H) array that XLA's CPU backend fills by copying a shared array of zeros
    (0.2-0.3 ms for GNMT's (32, 32, 512) in a step's profile; the GNMT step 3% faster,
    docs/design.md).

    A step is a few microseconds of arithmetic around one small product, so its cost is
    the product's form and the number of XLA ops (about 1.5 us each here). The weight is
    transposed once, before the loop: `h @ w_hh.T` on (32, 128) x (512, 128) took 40 us a
    step, the same product against a (128, 512) array 31. All four gates come from one
    tanh, as sigmoid(z) = tanh(z / 2) / 2 + 1 / 2, so that one XLA op computes them
    (four did); and rows are read and written with dynamic slices, which need no bounds
    check (`.at[k].set` added a select and a reduction per stack)."""
    steps, hidden = xp.shape[0], h0.shape[-1]
    w_t = w_hh.T
    half = jnp.full((hidden,), 0.5, xp.dtype)
    scale = jnp.concatenate([half, half, jnp.ones((hidden,), xp.dtype), half])  # i, f, g, o

    def step(t, carry):
        h, c, acts, hs, cs = carry
        k = steps - 1 - t if reverse else t
        z = lax.dynamic_index_in_dim(acts, k, keepdims=False) + h @ w_t
        if b_hh is not None:
            z = z + b_hh
        gates = jnp.tanh(z * scale) * scale + (1 - scale)
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c, lax.dynamic_update_index_in_dim(acts, gates, k, 0),
                lax.dynamic_update_index_in_dim(hs, h, k, 0),
                lax.dynamic_update_index_in_dim(cs, c, k, 0))

    states = jnp.zeros((steps,) + h0.shape, h0.dtype)
    _, _, acts, hs, cs = lax.fori_loop(0, steps, step, (h0, c0, xp, states, states))
    return hs, cs, acts


def _previous(seq, first, reverse):
    """The state each step started from: `first`, then `seq` one step behind."""
    if reverse:
        return jnp.concatenate([seq[1:], first[None]])
    return jnp.concatenate([first[None], seq[:-1]])


def _outputs(hs, cs, reverse):
    last = 0 if reverse else -1
    return hs, (hs[last], cs[last])


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def lstm_scan(xp, h0, c0, w_hh, b_hh, reverse):
    """Every step's h (T, N, H) and the final (h, c)."""
    hs, cs, _ = _forward(xp, h0, c0, w_hh, b_hh, reverse)
    return _outputs(hs, cs, reverse)


@lstm_scan.defjvp
def _lstm_scan_jvp(reverse, primals, tangents):
    xp, h0, c0, w_hh, b_hh = primals
    dxp, dh0, dc0, dw_hh, db_hh = tangents
    hs, cs, acts = _forward(xp, h0, c0, w_hh, b_hh, reverse)
    # the weight's and bias's share of every step's gate tangent, all steps at once, as
    # a linear layer's weight term on (T*N, H) rows, whose transpose is the product form
    # that runs fastest here (`_linear._weight_tangent`). Written over (T, N, H), the
    # weight gradient contracted two axes, and XLA's CPU backend first copied the
    # (T, N, 4H) gradient transposed to make them one (docs/design.md).
    prev = _previous(hs, h0, reverse)
    dz_in = dxp + _weight_tangent(prev.reshape(-1, prev.shape[-1]), dw_hh).reshape(dxp.shape)
    if b_hh is not None:
        dz_in = dz_in + db_hh
    # every step's coefficients, computed for all steps at once, so the loop below is
    # linear and stores nothing per step: dc = sum(gate coefficients * gate tangents)
    # + f dc_prev and dh = o'-term + o (1 - tanh(c)^2) dc
    i, f, g, o = jnp.split(acts, 4, axis=-1)
    tanh_c = jnp.tanh(cs)
    gate_coefs = jnp.concatenate([i * (1 - i) * g, f * (1 - f) * _previous(cs, c0, reverse),
                                  i * (1 - g * g), o * (1 - o) * tanh_c], axis=-1)
    dc_coef = o * (1 - tanh_c * tanh_c)

    def step(carry, xs):
        dh, dc = carry
        dz, coefs, forget, to_h = xs
        # dh w_hh^T as a dot of w_hh itself: its transpose, the backward's product, is then
        # dz_t w_hh against the (4H, H) weight (23% faster a step than against the
        # forward's transposed copy, which `w_hh.T` here made XLA share)
        recurrent = lax.dot_general(dh, w_hh, (((1,), (1,)), ((), ())))
        di, df, dg, do = jnp.split((dz + recurrent) * coefs, 4, axis=-1)
        dc = di + df + dg + forget * dc
        dh = do + to_h * dc
        return (dh, dc), dh

    (dh_last, dc_last), dhs = lax.scan(step, (dh0, dc0), (dz_in, gate_coefs, f, dc_coef),
                                       reverse=reverse)
    return _outputs(hs, cs, reverse), (dhs, (dh_last, dc_last))
