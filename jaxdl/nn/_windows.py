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


# XLA's CPU fusion never fuses a concatenate of more than this many operands.
_FUSIBLE_OPERANDS = 8


def stack_windows(views, kernel, axis):
    """The views of `window_views` (row-major kernel order) stacked into new axes (*kernel)
    at `axis`: one stack per kernel axis, nested.

    XLA's CPU fusion leaves a concatenate of more than 8 operands unfused, so a single
    stack of a 3x3 kernel's 9 views materialises every strided slice and then copies it
    again; nested stacks of 3 fuse into one loop that writes the patch matrix in one pass
    (ResNet's 64-channel 3x3 patches at 56x56: 2.3x faster). A kernel axis longer than 8
    keeps the single stack, which nesting would copy a third time."""
    if len(kernel) == 1 or max(kernel) > _FUSIBLE_OPERANDS:
        stacked = jnp.stack(views, axis)
        return stacked.reshape(*stacked.shape[:axis], *kernel, *stacked.shape[axis + 1:])
    inner = len(views) // kernel[0]
    return jnp.stack([stack_windows(views[i * inner:(i + 1) * inner], kernel[1:], axis)
                      for i in range(kernel[0])], axis)


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
