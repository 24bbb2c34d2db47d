"""One strided slice per kernel offset: the building block of max-pooling, unfold and the
patch matrices of `_conv_cpu`. Slices (rather than a gather) keep gradients as pads and adds
that XLA fuses."""

import itertools

import jax


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
