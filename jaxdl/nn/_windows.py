"""One strided slice per kernel offset: the building block of max-pooling, unfold and the
patch matrices of `_conv_cpu`. Slices (rather than a gather) keep gradients as pads and adds
that XLA fuses."""

import itertools

import jax
import jax.numpy as jnp


def window_views(x, lead, k, d, s, outs, trail=0):
    """One strided slice of the (already padded) x per kernel offset, in row-major kernel
    order. The spatial axes are the len(k) axes after `lead` leading axes (and before `trail`
    trailing ones): view[..., o, ...] is the element at that offset of output o's window."""
    rest = x.shape[x.ndim - trail:]
    for offset in itertools.product(*(range(ki) for ki in k)):
        start = (0,) * lead + tuple(o * di for o, di in zip(offset, d)) + (0,) * trail
        limit = (x.shape[:lead]
                 + tuple(st + (o - 1) * si + 1 for st, o, si in zip(start[lead:], outs, s))
                 + rest)
        yield jax.lax.slice(x, start, limit, (1,) * lead + tuple(s) + (1,) * trail)


def interleave_phases(phases, lead, stride):
    """Undo a split into stride phases: `phases` in row-major phase order (one per
    combination of a < s along each spatial axis), each (*lead axes, *cells, *trailing)
    -> (*lead, *(cells * s), *trailing), where spatial index s*q + a comes from phase a's
    cell q. One stack and one transpose (the per-phase gradients of the depthwise
    convolution and of max pooling)."""
    n, first = len(stride), phases[0]
    stacked = jnp.stack(phases).reshape(*stride, *first.shape)
    order = (tuple(range(n, n + lead))
             + tuple(a for k in range(n) for a in (n + lead + k, k))  # each phase after its cell
             + tuple(range(2 * n + lead, stacked.ndim)))
    cells = first.shape[lead:lead + n]
    return stacked.transpose(order).reshape(
        *first.shape[:lead], *(c * s for c, s in zip(cells, stride)), *first.shape[lead + n:])
