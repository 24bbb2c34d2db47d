"""A linear layer fed by an expanding adaptive average pool, reassociated in the traced step.

torchvision's VGG ends its features with `AdaptiveAvgPool2d((7, 7))`, flattens, and applies
`Linear(512 * 49, 4096)`. On small images the features end at 1x1 or 2x2, and the pool
repeats (or averages a few of) each value into the 49 positions. The layer is then linear in
fewer inputs than it reads: x W^T = f W'^T, with f the pool's input flattened and W' the
weight folded by the pool's averaging matrices (`_folded_weight`). The forward then reads W
once to fold it and multiplies by a weight 49 (or 12) times narrower, and the input gradient
is dy W', not dy W.

The pool, the flatten (a `reshape` in the model's code) and the layer are three separate
calls, so no one of them sees the pattern. `dl.value_and_grad` therefore traces the function
to a jaxpr first (for modules that hold an adaptive average pool), where the chain is three
equations: the pool's named call (`expanding_adaptive_avg_pool`, taken only by pools with
more outputs than inputs), a reshape to (rows, -1), and the linear layer's product
(`_rows_times_weight`). Each chain whose pooled values nothing else reads becomes one call of
`pooled_product`, and the rewritten program is what gets differentiated. Only float32 and
float64 chains are rewritten: W' rounded to a 16-bit type would lose what the unrewritten
product keeps by accumulating in float32.
"""

import collections
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._jax_compat import called_function, jaxpr_core
from jaxdl.nn._linear import _rows_tangent, _rows_times_weight, _times_transposed, _weight_tangent
from jaxdl.nn._pool import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    adaptive_averaging,
    expanding_adaptive_avg_pool,
)

_POOL = expanding_adaptive_avg_pool.__name__
_PRODUCT = _rows_times_weight.__name__
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def worth_tracing(modules) -> bool:
    """Whether one of `modules` holds an adaptive average pool (the rewrite's only source)."""
    pools = (AdaptiveAvgPool1d, AdaptiveAvgPool2d)
    return any(isinstance(m, pools) for module in modules for m in module.modules())


def reassociated(fn):
    """`fn` evaluated from its jaxpr, with every pool -> flatten -> linear chain rewritten.

    Results that are not arrays (a `has_aux` string or Python number) are returned as `fn`
    returned them, as `jax.value_and_grad` would: only the arrays go through the jaxpr."""

    def run(*args):
        traced = {}

        def arrays_of(*args):
            leaves, traced["tree"] = jax.tree.flatten(fn(*args))
            traced["leaves"] = leaves
            return [leaf for leaf in leaves if isinstance(leaf, jax.Array)]

        closed = jax.make_jaxpr(arrays_of)(*args)
        arrays = iter(jaxpr_core.jaxpr_as_fun(_rewritten(closed))(*jax.tree.leaves(args)))
        leaves = [next(arrays) if isinstance(leaf, jax.Array) else leaf
                  for leaf in traced["leaves"]]
        return jax.tree.unflatten(traced["tree"], leaves)

    return run


def _first_changed(pool_in, pool_out) -> int:
    """The first feature axis whose size the pool changes."""
    return next(i for i, (a, b) in enumerate(zip(pool_in, pool_out)) if a != b)


def _folded_weight(weight, pool_in, pool_out):
    """W (out, prod(pool_out)) -> W' (out, prod(pool_in)) with x W^T = f W'^T for every f of
    shape (rows, *pool_in) and x its pool flattened.

    The pool averages each axis by a matrix (out, in) (`_pool.adaptive_averaging`), so
    x = f K^T with K the Kronecker product of those matrices, and W' = W K.
    Axes before the first one the pool changes stay out of K (as rows of W), so K is
    (49, 1) or (49, 4) for VGG's head; one product then reads W once (per-axis sums of
    slices took four passes over it and a concatenation)."""
    lead = _first_changed(pool_in, pool_out)
    kron = np.ones((1, 1))
    for length, out in zip(pool_in[lead:], pool_out[lead:]):
        kron = np.kron(kron, adaptive_averaging(length, out))
    rows = weight.reshape(-1, kron.shape[0])
    kron = kron.astype(weight.dtype)
    if kron.shape[1] == 1:  # a matrix-vector product: 28 ms for VGG's (4096, 25088)
        folded = rows @ kron
    else:  # for (49, 4) a product took 100-125 ms, a multiply-and-sum 65-70 ms
        folded = jnp.sum(rows[:, None, :] * kron.T, axis=2)
    return folded.reshape(weight.shape[0], -1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def pooled_product(features, weight, pool_out):
    """x W^T for x = the expanding pool of `features` (rows, *feature axes) to `pool_out`
    (the feature axes' sizes after it), flattened; computed as features W'^T."""
    return _times_transposed(_flat(features), _folded_weight(weight, features.shape[1:], pool_out))


def _flat(features):
    return features.reshape(features.shape[0], -1)


@functools.partial(pooled_product.defjvp, symbolic_zeros=True)
def _pooled_product_jvp(pool_out, primals, tangents):
    """The features' tangent goes through W' (in the linear layer's form for the input
    gradient, `_rows_tangent`); the weight's is the unrewritten layer's,
    x dW^T with x the pooled rows (`_weight_tangent`), so that the weight gradient takes the
    forms tuned for it there. Spread from the (out, in) gradient of W', it would be a
    broadcast fused into the optimizer's loop over the weight, which XLA on CPU evaluates
    with an index division and a gather per element: VGG's head at 32 px, 16 rows, one
    core: that loop took 115 ms against 58 for the same loop reading a written gradient."""
    features, weight = primals
    d_features, d_weight = tangents
    folded = _folded_weight(weight, features.shape[1:], pool_out)
    out = _times_transposed(_flat(features), folded)
    terms = []
    if not isinstance(d_features, jax.custom_derivatives.SymbolicZero):
        terms.append(_rows_tangent(_flat(d_features), folded))
    if not isinstance(d_weight, jax.custom_derivatives.SymbolicZero):
        lead = _first_changed(features.shape[1:], pool_out)  # the axes before stay as they are
        pooled = expanding_adaptive_avg_pool(features, len(pool_out) - lead, pool_out[lead:])
        terms.append(_weight_tangent(_flat(pooled), d_weight))
    return out, functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out)


def _producer(atom, producers):
    """The equation that computes `atom`, or None for an input or a literal (unhashable)."""
    return producers.get(atom) if isinstance(atom, jaxpr_core.Var) else None


def _chain(eqn, producers):
    """(features var, weight var, pool eqn, reshape eqn) if `eqn` is a linear layer's product
    of a flattened expanding pool that the rewrite may replace, else None."""
    if called_function(eqn) != _PRODUCT or len(eqn.invars) != 2:
        return None
    rows, weight = eqn.invars
    flat = _producer(rows, producers)
    if flat is None or flat.primitive.name != "reshape" or flat.params.get("dimensions"):
        return None
    pool = _producer(flat.invars[0], producers)
    if pool is None or called_function(pool) != _POOL:
        return None
    features = pool.invars[0]
    shape_in, shape_out = features.aval.shape, pool.outvars[0].aval.shape
    if (shape_in[0] != shape_out[0] or rows.aval.shape != (shape_out[0], math.prod(shape_out[1:]))
            or math.prod(shape_in[1:]) >= math.prod(shape_out[1:])
            or features.aval.dtype not in _FLOATS or weight.aval.dtype != features.aval.dtype):
        return None
    return features, weight, pool, flat


def _call_of(features, weight, pool_out):
    """One named-call equation computing `pooled_product` (with its jaxpr's constants)."""
    product = jax.jit(functools.partial(pooled_product, pool_out=tuple(pool_out)))
    closed = jax.make_jaxpr(product)(
        *(jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in (features, weight)))
    (call,) = closed.jaxpr.eqns
    return call, closed


def _rewritten(closed):
    jaxpr = closed.jaxpr
    producers = {v: eqn for eqn in jaxpr.eqns for v in eqn.outvars}
    reads = collections.Counter(
        v for v in (*(v for eqn in jaxpr.eqns for v in eqn.invars), *jaxpr.outvars)
        if isinstance(v, jaxpr_core.Var))
    eqns, dropped = list(jaxpr.eqns), set()
    constvars, consts = list(jaxpr.constvars), list(closed.consts)
    for i, eqn in enumerate(jaxpr.eqns):
        chain = _chain(eqn, producers)
        if chain is None:
            continue
        features, weight, pool, flat = chain
        if reads[flat.outvars[0]] != 1 or reads[pool.outvars[0]] != 1:
            continue  # something else reads the pooled values: they stay computed
        call, inner = _call_of(features, weight, pool.outvars[0].aval.shape[1:])
        binding = dict(zip(inner.jaxpr.invars, (features, weight)))
        constvars += inner.jaxpr.constvars
        consts += inner.consts
        eqns[i] = call.replace(invars=[binding.get(v, v) for v in call.invars],
                               outvars=list(eqn.outvars))
        dropped |= {id(pool), id(flat)}
    if not dropped:
        return closed
    jaxpr = jaxpr.replace(eqns=[e for e in eqns if id(e) not in dropped], constvars=constvars)
    return jaxpr_core.ClosedJaxpr(jaxpr, consts)
