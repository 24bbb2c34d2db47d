"""Pooling: max/avg (with ceil_mode, padding, dilation), adaptive avg/max, fractional max, and
their modules.

Windows run over the trailing `n` axes of (N, C, *spatial) or unbatched
(C, *spatial) inputs. Max pooling takes one strided slice per window offset, with its
gradient written per stride phase (`_max_pool.py`); average pooling and very large max
windows use `jax.lax.reduce_window`.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._dtypes import accumulation_dtype
from jaxdl._module import Module
from jaxdl._random import KeyStream
from jaxdl._tracing import is_traced
from jaxdl.nn._conv import _tuple
from jaxdl.nn._keys import fresh_key
from jaxdl.nn._max_pool import sliced_max
from jaxdl.nn._windows import window_views


def _out_size(length, k, s, p, d, ceil_mode):
    """PyTorch's pooling output length; in ceil mode the last window must start inside
    the input or its left padding."""
    span = length + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1
    return out


def _window_geometry(input, n, kernel_size, stride, padding, dilation, ceil_mode):
    k = _tuple(kernel_size, n, "kernel_size")
    s = k if stride is None or stride == [] or stride == () else _tuple(stride, n, "stride")
    p = _tuple(padding, n, "padding")
    d = _tuple(dilation, n, "dilation")
    for pi, ki, di in zip(p, k, d):
        if pi * 2 > di * (ki - 1) + 1:
            raise ValueError(f"pad should be at most half of effective kernel size, got "
                             f"padding={p}, kernel_size={k}, dilation={d}")
    spatial = input.shape[input.ndim - n:]
    outs = [_out_size(L, ki, si, pi, di, ceil_mode) for L, ki, si, pi, di in
            zip(spatial, k, s, p, d)]
    if any(o <= 0 for o in outs):
        raise ValueError(f"pooling output size {tuple(outs)} is too small for input of "
                         f"spatial shape {tuple(spatial)}")
    # Right padding that makes the last (ceil-mode) window fit.
    pairs = [(pi, max(pi, (o - 1) * si + di * (ki - 1) + 1 - L - pi))
             for L, o, ki, si, pi, di in zip(spatial, outs, k, s, p, d)]
    return k, s, pairs, d, outs


# Windows larger than this are reduced with reduce_window (one select per element of the
# window would make very long fusions).
_MAX_SLICED_WINDOW = 64


def _reduce(input, n, init, op, k, s, pairs):
    lead = input.ndim - n
    # A Python scalar init keeps reduce_window differentiable inside shard_map as well.
    return jax.lax.reduce_window(input, init, op, (1,) * lead + k,
                                 (1,) * lead + s, [(0, 0)] * lead + pairs)


def _max_poolnd(n, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    k, s, pairs, d, outs = _window_geometry(input, n, kernel_size, stride, padding, dilation,
                                            ceil_mode)
    if return_indices:
        return _max_pool_with_indices(input, n, k, s, pairs, d, outs)
    if math.prod(k) > _MAX_SLICED_WINDOW and all(di == 1 for di in d):
        return _reduce(input, n, -jnp.inf, jax.lax.max, k, s, pairs)
    # One strided slice per kernel offset, kept by a select when strictly greater (or NaN):
    # the gradient then goes to torch's element, the first maximum in window order. It is
    # written per stride phase (`_max_pool.py`). reduce_window's gradient (select_and_scatter)
    # is lowered on CPU to index arrays and a scatter that took 40% of a small CNN's step
    # (docs/design.md); for dilated windows JAX has no reduce_window gradient at all.
    return sliced_max(input, input.ndim - n, k, d, s, tuple(map(tuple, pairs)), tuple(outs))


def _max_pool_with_indices(input, n, k, s, pairs, d, outs):
    """(max, flat index of the max within each input plane), PyTorch's choice on ties: the
    first maximum in row-major window order (a NaN always wins, as in PyTorch's kernel).

    The values are gathered back at the indices so that the gradient goes to exactly the
    element torch picks (and that max_unpool puts back)."""
    lead = input.ndim - n
    spatial = input.shape[lead:]
    x = jnp.pad(input, [(0, 0)] * lead + pairs, constant_values=-jnp.inf)
    plane = jnp.pad(jnp.arange(int(np.prod(spatial)), dtype=jnp.int32).reshape(spatial), pairs,
                    constant_values=-1)
    best = best_index = None
    for view, index in zip(window_views(x, lead, k, d, s, outs),
                           window_views(plane, 0, k, d, s, outs)):
        if best is None:
            best, best_index = view, jnp.broadcast_to(index, view.shape)
            continue
        take = (view > best) | jnp.isnan(view)
        best, best_index = jnp.where(take, view, best), jnp.where(take, index, best_index)
    return _gather_plane(input, lead, best_index), best_index


def _gather_plane(input, lead, index):
    """input's elements at flat plane indices `index` (shape lead + output spatial): a gather, so
    the gradient goes to exactly those elements, as torch's backward scatters to its indices."""
    flat = input.reshape(input.shape[:lead] + (-1,))
    values = jnp.take_along_axis(flat, index.reshape(index.shape[:lead] + (-1,)), axis=-1)
    return values.reshape(index.shape)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_poolnd(1, input, kernel_size, stride, padding, dilation, ceil_mode,
                       return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_poolnd(2, input, kernel_size, stride, padding, dilation, ceil_mode,
                       return_indices)


def _unpool_size(input, n, kernel_size, stride, padding, output_size, where):
    """PyTorch's output size: (L - 1) * stride - 2 * padding + kernel, or output_size (its last
    n entries) when it lies strictly within one stride of that."""
    k = _tuple(kernel_size, n, "kernel_size")
    s = k if stride is None else _tuple(stride, n, "stride")
    p = _tuple(padding, n, "padding")
    default = [(L - 1) * si - 2 * pi + ki
               for L, ki, si, pi in zip(input.shape[input.ndim - n:], k, s, p)]
    if output_size is None:
        return tuple(default)
    size = tuple(int(o) for o in output_size)
    if len(size) in (n + 1, n + 2):  # (C, *spatial) or (N, C, *spatial), as torch accepts
        size = size[-n:]
    if len(size) != n:
        raise ValueError(f"{where}: output_size must have {n} or {n + 2} elements, got "
                         f"{tuple(output_size)}")
    for o, dflt, si in zip(size, default, s):
        if not dflt - si < o < dflt + si:
            raise ValueError(f"{where}: invalid output_size {tuple(output_size)} (each spatial "
                             f"size must lie strictly between {[a - b for a, b in zip(default, s)]}"
                             f" and {[a + b for a, b in zip(default, s)]})")
    return size


def _max_unpoolnd(n, input, indices, kernel_size, stride, padding, output_size):
    """Scatters each value to its flat index in a zero (.., *output_size) plane."""
    where = f"max_unpool{n}d"
    input, indices = jnp.asarray(input), jnp.asarray(indices)
    if input.ndim not in (n + 1, n + 2):
        raise ValueError(f"{where}: expected a {n + 1}-d or {n + 2}-d input, got shape "
                         f"{tuple(input.shape)}")
    if indices.shape != input.shape or not jnp.issubdtype(indices.dtype, jnp.integer):
        raise ValueError(f"{where}: expected integer indices of the input's shape "
                         f"{tuple(input.shape)}, got {indices.dtype} {tuple(indices.shape)}")
    size = _unpool_size(input, n, kernel_size, stride, padding, output_size, where)
    plane = int(np.prod(size))
    if not is_traced(indices) and indices.size:
        concrete = np.asarray(indices)  # numpy: no traced ops even when called under jit
        low, high = int(concrete.min()), int(concrete.max())
        if low < 0 or high >= plane:  # JAX would silently drop such writes
            raise ValueError(f"{where}: indices must lie in [0, {plane}) for output size {size}, "
                             f"got values in [{low}, {high}]")
    lead = input.shape[:input.ndim - n]
    rows = int(np.prod(lead))
    out = _scatter_rows(input.reshape(rows, -1), indices.reshape(rows, -1).astype(jnp.int32), plane)
    return out.reshape(lead + size)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _scatter_rows(values, index, plane):
    """out[r, index[r, j]] = values[r, j] in a zero (rows, plane) array."""
    rows = jnp.arange(values.shape[0])[:, None]
    return jnp.zeros((values.shape[0], plane), values.dtype).at[rows, index].set(values)


def _scatter_rows_fwd(values, index, plane):
    return _scatter_rows(values, index, plane), index


def _scatter_rows_bwd(plane, index, grad):
    # PyTorch's backward gathers the output gradient at every index, also where overlapping
    # windows sent several values to one position (only one of them landed); autodiff of the
    # scatter would give the overwritten ones no gradient.
    return jnp.take_along_axis(grad, index, axis=1), None


_scatter_rows.defvjp(_scatter_rows_fwd, _scatter_rows_bwd)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpoolnd(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpoolnd(2, input, indices, kernel_size, stride, padding, output_size)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    """torch's always-with-indices form: (values, int32 flat indices)."""
    return _max_poolnd(1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    return _max_poolnd(2, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=False):
    return _max_poolnd(3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpoolnd(3, input, indices, kernel_size, stride, padding, output_size)


def _avg_divisor(length, out, k, s, p, count_include_pad):
    """Per-output window sizes along one axis: PyTorch counts explicit padding (when asked)
    but never the ceil-mode overhang."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, length + p)
    if not count_include_pad:
        start, end = np.maximum(start, 0), np.minimum(end, length)
    return end - start


def _avg_poolnd(n, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
    k, s, pairs, _, outs = _window_geometry(input, n, kernel_size, stride, padding, 1,
                                            ceil_mode)
    total = _reduce(input, n, 0, jax.lax.add, k, s, pairs)
    if divisor_override:
        return total / divisor_override
    spatial = input.shape[input.ndim - n:]
    divisor = np.ones(())
    for L, o, ki, si, (pi, _) in zip(spatial, outs, k, s, pairs):
        divisor = np.multiply.outer(divisor, _avg_divisor(L, o, ki, si, pi, count_include_pad))
    return (total / divisor.astype(accumulation_dtype(input.dtype))).astype(input.dtype)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    return _avg_poolnd(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_poolnd(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_poolnd(3, input, kernel_size, stride, padding, dilation, ceil_mode,
                       return_indices)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_poolnd(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)


def lp_pool1d(input, norm_type: float, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p), as PyTorch (no padding)."""
    return _lp_poolnd(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type: float, kernel_size, stride=None, ceil_mode=False):
    return _lp_poolnd(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type: float, kernel_size, stride=None, ceil_mode=False):
    return _lp_poolnd(3, input, norm_type, kernel_size, stride, ceil_mode)


def _lp_poolnd(n, input, norm_type, kernel_size, stride, ceil_mode):
    k = _tuple(kernel_size, n, "kernel_size")
    window = float(np.prod(k))
    mean = _avg_poolnd(n, input ** norm_type, kernel_size, stride, 0, ceil_mode, True, None)
    # PyTorch: sign(s) * relu(|s|) ** (1/p) on the window sum s = mean * window.
    total = mean * window
    return jnp.sign(total) * jax.nn.relu(jnp.abs(total)) ** (1.0 / norm_type)


def _adaptive_bins(length, out):
    """Membership (out, length) of PyTorch's adaptive bins [floor(i L/o), ceil((i+1) L/o))."""
    i = np.arange(out)
    start, end = (i * length) // out, -((-(i + 1) * length) // out)
    j = np.arange(length)
    return (j >= start[:, None]) & (j < end[:, None])


def adaptive_averaging(length, out):
    """The (out, length) float64 matrix of PyTorch's adaptive average over one axis: each
    bin's members weighted by one over its size."""
    bins = _adaptive_bins(length, out)
    return bins / bins.sum(1, keepdims=True)


def _adaptive_sizes(input, n, output_size):
    sizes = _tuple(output_size, n, "output_size")
    spatial = input.shape[input.ndim - n:]
    return [L if o is None else o for L, o in zip(spatial, sizes)]


def _average_bins(input, n, sizes):
    x = input
    for axis, o in zip(range(input.ndim - n, input.ndim), sizes):
        weights = adaptive_averaging(x.shape[axis], o)  # float64, cast to the input's dtype
        x = jnp.moveaxis(jnp.tensordot(x, weights.T.astype(x.dtype), axes=([axis], [0])), -1,
                         axis)
    return x


@functools.partial(jax.jit, static_argnums=(1, 2))
def expanding_adaptive_avg_pool(input, n, sizes):
    """A pool with more outputs than inputs, as one named call in a traced step: a linear
    layer that reads it flattened is reassociated there (`_pooled_linear.py`)."""
    return _average_bins(input, n, sizes)


def _adaptive_avg(input, n, output_size):
    sizes = tuple(_adaptive_sizes(input, n, output_size))
    if math.prod(sizes) > math.prod(input.shape[input.ndim - n:]):
        return expanding_adaptive_avg_pool(input, n, sizes)
    return _average_bins(input, n, sizes)


def _torch_pick(x, member):
    """Position along the last axis of x (..., 1, L) of the element torch's max kernels keep in
    each window of `member` (..., o, L): they scan in order taking `v > best or isnan(v)`, which
    keeps the first maximum, or the last NaN when there is one."""
    nan = member & jnp.isnan(x)
    top = jnp.max(jnp.where(member & ~nan, x, -jnp.inf), axis=-1, keepdims=True)
    first_max = jnp.argmax(member & (x == top), axis=-1)  # an all -inf window: its first element
    last_nan = x.shape[-1] - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
    return jnp.where(jnp.any(nan, axis=-1), last_nan, first_max).astype(jnp.int32)


def _pick_windows(input, members):
    """int32 flat plane index of torch's pick in each box window, the window along spatial axis i
    given by the mask members[i], broadcastable to (lead..., other spatial..., o_i, L_i).

    A box's row-major scan is separable: pick along the last axis first, then among those picks
    along the axis before, and so on; the first maximum (last NaN) in row-major order is then the
    lexicographically first maximum (last NaN), as torch's scan keeps."""
    n = len(members)
    lead = input.ndim - n
    spatial = input.shape[lead:]
    vals = jax.lax.stop_gradient(input)  # the values reach the result through one gather
    plane = jnp.arange(math.prod(spatial), dtype=jnp.int32).reshape(spatial)
    index = jnp.broadcast_to(plane, input.shape)
    for i in reversed(range(n)):
        axis = lead + i
        last = jnp.moveaxis(vals, axis, -1)
        pos = _torch_pick(last[..., None, :], members[i])

        def take(a, pos=pos, axis=axis):
            return jnp.moveaxis(jnp.take_along_axis(jnp.moveaxis(a, axis, -1), pos, axis=-1), -1, axis)

        vals, index = take(vals), take(index)
    return index


def _adaptive_max(input, n, output_size, return_indices):
    """Values and int32 flat plane indices of torch's choice in each adaptive bin (see
    `_pick_windows`): the gradient goes to that element, not split among tied maxima."""
    lead = input.ndim - n
    sizes = _adaptive_sizes(input, n, output_size)
    members = [_adaptive_bins(L, o) for L, o in zip(input.shape[lead:], sizes)]
    index = _pick_windows(input, members)
    values = _gather_plane(input, lead, index)
    return (values, index) if return_indices else values


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg(input, 1, output_size)


def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg(input, 2, output_size)


def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg(input, 3, output_size)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max(input, 1, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _adaptive_max(input, 2, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max(input, 3, output_size, return_indices)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """torch's always-with-indices form: (values, int32 flat indices)."""
    return _adaptive_max(input, 1, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    return _adaptive_max(input, 2, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    return _adaptive_max(input, 3, output_size, True)


def _fractional_starts(sample, length, out, k):
    """torch's pseudo-random window starts along one axis for samples u (...,) in [0, 1):
    int((i + u) alpha) - int(u alpha) with alpha = (L - k) / (o - 1), in the samples' dtype as
    torch's kernel computes them, and the last window ending at the input's end. (..., o) int32."""
    last = jnp.full(sample.shape + (1,), length - k, jnp.int32)
    if out == 1:
        return last
    alpha = jnp.asarray(length - k, sample.dtype) / jnp.asarray(out - 1, sample.dtype)
    u = sample[..., None]
    i = jnp.arange(out - 1, dtype=sample.dtype)
    starts = ((i + u) * alpha).astype(jnp.int32) - (u * alpha).astype(jnp.int32)
    return jnp.concatenate([starts, jnp.broadcast_to(last, starts.shape[:-1] + (1,))], axis=-1)


def _fractional_max_pool(n, input, kernel_size, output_size, output_ratio, return_indices,
                         _random_samples, key):
    where = f"fractional_max_pool{n}d"
    if input.ndim not in (n + 1, n + 2):
        raise ValueError(f"{where}: expected a {n + 1}-d or {n + 2}-d input, got shape "
                         f"{tuple(input.shape)}")
    k = _tuple(kernel_size, n, "kernel_size")
    spatial = input.shape[input.ndim - n:]
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{where} requires specifying either an output_size or an output_ratio")
        ratio = (output_ratio,) * n if isinstance(output_ratio, int | float) else tuple(output_ratio)
        output_size = [int(L * r) for L, r in zip(spatial, _tuple(ratio, n, "output_ratio"))]
    outs = _tuple(output_size, n, "output_size")
    for L, o, ki in zip(spatial, outs, k):
        if o <= 0 or ki <= 0 or o + ki - 1 > L:
            raise ValueError(f"{where}: output_size {outs} with kernel_size {k} needs an input of at "
                             f"least output + kernel - 1 per axis, got spatial shape {spatial}")
    # torch draws one sample per axis for every (batch, channel) plane, (1, C, n) when unbatched
    planes = (input.shape[0] if input.ndim == n + 2 else 1, input.shape[-n - 1], n)
    if _random_samples is None:
        samples = jax.random.uniform(fresh_key(key, input, where), planes, input.dtype)
    else:
        samples = jnp.asarray(_random_samples).astype(input.dtype)
        if samples.shape != planes:
            raise ValueError(f"{where}: _random_samples must have shape {planes}, got "
                             f"{tuple(samples.shape)}")
    samples = samples.reshape(input.shape[:input.ndim - n] + (n,))
    # torch's 2-d kernel uses a plane's first sample for the width, the 3-d one for the depth
    order = (1, 0) if n == 2 else tuple(range(n))
    members = []
    for axis, (L, o, ki) in enumerate(zip(spatial, outs, k)):
        starts = _fractional_starts(samples[..., order[axis]], L, o, ki)[..., None]
        j = jnp.arange(L)
        member = (j >= starts) & (j < starts + ki)  # (lead..., o, L)
        members.append(member.reshape(member.shape[:-2] + (1,) * (n - 1) + member.shape[-2:]))
    index = _pick_windows(input, members)
    values = _gather_plane(input, input.ndim - n, index)
    return (values, index) if return_indices else values


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None, *, key=None):
    """Max over k x k windows at pseudo-random strides (Graham 2014), as torch: `_random_samples`
    (N, C, 2) in [0, 1) fix the windows (torch's values give torch's result); without them they
    are drawn from `key` (or the global stream outside a trace). Indices are int32."""
    return _fractional_max_pool(2, input, kernel_size, output_size, output_ratio, return_indices,
                                _random_samples, key)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None, *, key=None):
    """The 3-d form: `_random_samples` of shape (N, C, 3)."""
    return _fractional_max_pool(3, input, kernel_size, output_size, output_ratio, return_indices,
                                _random_samples, key)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None, *, key=None):
    return _fractional_max_pool(2, input, kernel_size, output_size, output_ratio, True,
                                _random_samples, key)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None, *, key=None):
    return _fractional_max_pool(3, input, kernel_size, output_size, output_ratio, True,
                                _random_samples, key)


class _Pool(Module):
    _n = 0

    def _check(self, input):
        self._check_input(input, (self._n + 1, self._n + 2))


class _MaxPool(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        """The pooled input, and with return_indices its (int32) flat indices per plane."""
        self._check(input)
        return _max_poolnd(self._n, input, self.kernel_size, self.stride, self.padding,
                           self.dilation, self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    _n = 1


class MaxPool2d(_MaxPool):
    _n = 2


class _MaxUnpool(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input, indices, output_size=None):
        self._check(input)
        if tuple(indices.shape) != tuple(input.shape):
            raise self._input_error("indices of the input's shape", tuple(input.shape),
                                    f"shape {tuple(indices.shape)}")
        return _max_unpoolnd(self._n, input, indices, self.kernel_size, self.stride,
                             self.padding, output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    _n = 1


class MaxUnpool2d(_MaxUnpool):
    _n = 2


class _AvgPool(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        self._check(input)
        return _avg_poolnd(self._n, input, self.kernel_size, self.stride, self.padding,
                           self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPool):
    _n = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(_AvgPool):
    _n = 2


class _Adaptive(_Pool):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_Adaptive):
    _n = 1

    def forward(self, input):
        self._check(input)
        return _adaptive_avg(input, 1, self.output_size)


class AdaptiveAvgPool2d(_Adaptive):
    _n = 2

    def forward(self, input):
        self._check(input)
        return _adaptive_avg(input, 2, self.output_size)


class AdaptiveMaxPool2d(_Adaptive):
    _n = 2

    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        """The pooled input, and with return_indices its (int32) flat indices per plane."""
        self._check(input)
        return _adaptive_max(input, 2, self.output_size, self.return_indices)



class _FractionalMaxPool(_Pool):
    """Fractional max pooling; the windows are drawn from the module's key stream on every call
    (it advances under dl.jit), unless fixed by `_random_samples`, a buffer as in torch."""

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None, *, key=None):
        super().__init__()
        name = type(self).__name__
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        self.kernel_size = _tuple(kernel_size, self._n, "kernel_size")
        self.output_size = None if output_size is None else _tuple(output_size, self._n, "output_size")
        self.output_ratio = None
        if output_ratio is not None:
            ratio = (output_ratio,) * self._n if isinstance(output_ratio, int | float) else output_ratio
            self.output_ratio = _tuple(ratio, self._n, "output_ratio")
            if not all(0 < r < 1 for r in self.output_ratio):
                raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self._register_rng("_rng", KeyStream(key)())

    def forward(self, input):
        """The pooled input, and with return_indices its (int32) flat indices per plane."""
        self._check(input)
        samples = self._random_samples
        key = self._next_key() if samples is None else None
        return _fractional_max_pool(self._n, input, self.kernel_size, self.output_size,
                                    self.output_ratio, self.return_indices, samples, key)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, output_size={self.output_size}, "
                f"output_ratio={self.output_ratio}")


class FractionalMaxPool2d(_FractionalMaxPool):
    _n = 2


class FractionalMaxPool3d(_FractionalMaxPool):
    _n = 3
