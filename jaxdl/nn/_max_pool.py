"""Max pooling over strided slices, differentiated one stride phase at a time.

The forward keeps the running maximum of one strided slice per kernel offset (a select
when strictly greater or NaN: torch's element, the first maximum in window order, with a
NaN always winning) and records which offset won. Autodiff of that chain transposes every
strided slice into a pad with zeros between elements, which XLA's CPU loop evaluated
slowly (about 20 ms of a ResNet-18 step at 224 px). The gradient is instead written per
stride phase (input index mod stride): every kernel offset that lands on a phase is an
unstrided shifted slice of the padded cotangent, kept where that offset won; one stack and
transpose interleave the phases. It is a `custom_jvp` whose tangent is the transpose of
that scatter, so forward mode and higher derivatives keep working, and reverse mode
transposes it back into the phase form. Windows that tile the input (stride == kernel,
VGG's 2x2 pools) skip the phases: their gradient is a select on a reshape.
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._dtypes import accumulation_dtype
from jaxdl.nn._windows import interleave_phases, window_views


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4, 5, 6))
def sliced_max(x, lead, k, d, s, pairs, outs):
    """Max over windows of the spatial axes after `lead` leading ones; `pairs` pads them
    with -inf (padding plus ceil mode's extra), `outs` is the output size."""
    return _max_and_offset(x, lead, k, d, s, pairs, outs)[0]


def _max_and_offset(x, lead, k, d, s, pairs, outs):
    """(max, index in row-major window order of the offset that holds it)."""
    x = jnp.pad(x, [(0, 0)] * lead + list(pairs), constant_values=-jnp.inf)
    index_type = _offset_type(x.dtype, math.prod(k))
    out = offset = None
    for j, view in enumerate(window_views(x, lead, k, d, s, outs)):
        if out is None:
            out, offset = view, jnp.zeros(view.shape, index_type)
            continue
        take = (view > out) | jnp.isnan(view)
        out = jnp.where(take, view, out)
        offset = jnp.where(take, jnp.asarray(j, index_type), offset)
    return out, offset


def _offset_type(dtype, offsets: int):
    """The offset's type: x's own float type when it holds every offset exactly. XLA's CPU
    loops vectorise selects whose operands share a width; an int8 offset beside float32 data
    left the pool's comparison chain scalar (ResNet-18's 3x3/2 pool at 224 px, batch 2, one
    core, forward+backward 10.3 -> 7.2 ms; docs/design.md, "The max-pool gradient")."""
    if (jnp.issubdtype(dtype, jnp.floating)
            and offsets <= 2 ** (jnp.finfo(dtype).nmant + 1)):  # exact as a float
        return dtype
    return jnp.int8 if offsets <= 127 else jnp.int32


@sliced_max.defjvp
def _sliced_max_jvp(lead, k, d, s, pairs, outs, primals, tangents):
    (x,), (t,) = primals, tangents
    out, offset = _max_and_offset(x, lead, k, d, s, pairs, outs)
    if k == s and all(di == 1 for di in d):
        scatter = functools.partial(_tiled_scatter, offset=offset, lead=lead, k=k, pairs=pairs,
                                    spatial=x.shape[lead:])
    else:
        scatter = functools.partial(_phase_scatter, offset=offset, lead=lead, k=k, d=d, s=s,
                                    pairs=pairs, spatial=x.shape[lead:])
    # `out` as the example keeps its type under shard_map (varying over the mesh axes).
    (tangent,) = jax.linear_transpose(scatter, out)(t)
    return out, tangent


def _tiled_scatter(ct, offset, lead, k, pairs, spatial):
    """The input gradient when the windows tile the input (stride == kernel, no dilation):
    padded input index o*k + a receives ct[o] where offset a won. Each spatial axis of ct
    is split into (cells, 1) and compared against the window's offsets laid out as (1, k),
    so the result reshapes to the padded input with no transpose (the phase form's stack
    and interleaving transpose, fused with the ReLU gradient and the layout transposes
    around XLA's convolutions, ran at 4-18 ns an element in VGG-16's step); a pad with
    negative widths then crops the padding (or adds back a floor-mode tail)."""
    acc = accumulation_dtype(ct.dtype)
    split = ct.shape[:lead] + tuple(x for o in ct.shape[lead:] for x in (o, 1))
    window = np.arange(math.prod(k)).reshape(k)
    local = window.reshape((1,) * lead + tuple(x for ki in k for x in (1, ki)))
    full = jnp.where(offset.reshape(split) == local.astype(offset.dtype),
                     ct.astype(acc).reshape(split), jnp.zeros((), acc))
    full = full.reshape(ct.shape[:lead] + tuple(o * ki for o, ki in zip(ct.shape[lead:], k)))
    config = [(0, 0, 0)] * lead + [(-lo, size + lo - covered, 0) for (lo, _), size, covered
                                   in zip(pairs, spatial, full.shape[lead:])]
    return jax.lax.pad(full, jnp.zeros((), acc), config).astype(ct.dtype)


def _phase_scatter(ct, offset, lead, k, d, s, pairs, spatial):
    """The input gradient: ct[o] goes to padded input index o*s + a*d of the offset a that
    won output o. That index is in phase (a*d) % s at cell o + (a*d) // s, so each phase is
    a sum of unstrided slices of the padded ct (and offsets), one per offset landing there."""
    acc = accumulation_dtype(ct.dtype)
    cells = [-(-(size + lo + hi) // si) for size, (lo, hi), si in zip(spatial, pairs, s)]
    shifts = [[a * di // si for a in range(ki)] for ki, di, si in zip(k, d, s)]
    below = [max(sh) for sh in shifts]
    config = ([(0, 0, 0)] * lead
              + [(b, max(0, c - o), 0) for b, c, o in zip(below, cells, ct.shape[lead:])])
    ctp = jax.lax.pad(ct.astype(acc), jnp.zeros((), acc), config)
    offp = jax.lax.pad(offset, jnp.asarray(-1, offset.dtype), config)  # -1: no offset won
    shape = ct.shape[:lead] + tuple(cells)
    phases = []
    for phase in itertools.product(*(range(si) for si in s)):
        reach = [[a for a in range(ki) if a * di % si == ph]
                 for ki, di, si, ph in zip(k, d, s, phase)]
        total = jnp.zeros(shape, acc)
        for combo in itertools.product(*reach):
            start = (0,) * lead + tuple(b - sh[a] for a, b, sh in zip(combo, below, shifts))
            limit = tuple(st + size for st, size in zip(start, shape))
            won = jax.lax.slice(offp, start, limit) == int(np.ravel_multi_index(combo, k))
            total = total + jnp.where(won, jax.lax.slice(ctp, start, limit), jnp.zeros((), acc))
        phases.append(total)
    full = interleave_phases(phases, lead, s)
    start = (0,) * lead + tuple(lo for lo, _ in pairs)
    limit = ct.shape[:lead] + tuple(lo + size for (lo, _), size in zip(pairs, spatial))
    return jax.lax.slice(full, start, limit).astype(ct.dtype)

