"""Public ops: argument checks, axis handling, implementation choice and custom VJPs.

Each op moves `axis` last, flattens the leading shape into rows, and calls the chosen
backend (`_reference` for XLA, `_pallas` for the kernels) on a (rows, n) array. The
custom VJPs keep only what the backward pass needs (the output, or the input and a
float32 log-sum-exp per row), and the backward passes run on the same backend.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdl._tracing import is_traced
from jaxdl.ops import _pallas, _reference
from jaxdl.ops._pallas_core import Blocks

IMPLS = ("auto", "pallas", "xla")
REDUCTIONS = ("none", "mean", "sum")
F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Backend:
    """A resolved implementation: "xla", or "pallas" with its launch settings.

    `blocks=None` lets the kernels pick tile shapes; `interpret=True` runs Pallas'
    interpreter (the only way to run the kernels without a GPU).
    """

    name: str
    interpret: bool = False
    blocks: Blocks | None = None

    def __call__(self, fn_name, *args):
        # Triton computes element offsets in int32: arrays of 2^31 elements or more take XLA
        if self.name == "xla" or args[0].size >= 2**31:
            return getattr(_reference, fn_name)(*args)
        return getattr(_pallas, fn_name)(*args, blocks=self.blocks, interpret=self.interpret)


def resolve(impl) -> Backend:
    """"auto" -> Pallas on GPU, XLA elsewhere; "pallas" off-GPU runs interpret mode."""
    if isinstance(impl, Backend):
        return impl
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not valid; use one of {IMPLS}")
    on_gpu = jax.default_backend() == "gpu"
    if impl == "xla" or (impl == "auto" and not on_gpu):
        return Backend("xla")
    return Backend("pallas", interpret=not on_gpu)


# ---- shapes ---------------------------------------------------------------------------------


def _check_float(x, op, name="x"):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"ops.{op}: {name} must be a floating array, got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError(f"ops.{op}: {name} must have at least one axis, got a scalar")
    return x


def _normalize_axis(axis, ndim, op):
    if not -ndim <= axis < ndim:
        raise ValueError(f"ops.{op}: axis={axis} is out of range for an array of rank {ndim}")
    return axis % ndim


def _to_rows(x, axis):
    """Move `axis` last and flatten the rest: (rows, n), plus the leading shape."""
    moved = jnp.moveaxis(x, axis, -1)
    return moved.reshape(-1, moved.shape[-1]), moved.shape[:-1]


def _from_rows(rows, lead, axis):
    return jnp.moveaxis(rows.reshape(*lead, rows.shape[-1]), -1, axis)


# ---- softmax / log_softmax ------------------------------------------------------------------


def _make_normalized(fwd_name, bwd_name):
    """custom_vjp op on rows whose backward needs only the output (softmax, log_softmax)."""

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def op(backend, x):
        return backend(fwd_name, x)

    def fwd(backend, x):
        y = backend(fwd_name, x)
        return y, y

    def bwd(backend, y, g):
        return (backend(bwd_name, y, g),)

    op.defvjp(fwd, bwd)
    return op


_softmax_rows = _make_normalized("softmax", "softmax_bwd")
_log_softmax_rows = _make_normalized("log_softmax", "log_softmax_bwd")


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _on_rows(rows_op, x, axis, backend):
    rows, lead = _to_rows(x, axis)
    return _from_rows(rows_op(backend, rows), lead, axis)


def _rowwise(rows_op, op_name, x, axis, impl):
    x = _check_float(x, op_name)
    return _on_rows(rows_op, x, _normalize_axis(axis, x.ndim, op_name), resolve(impl))


def softmax(x, axis=-1, *, impl="auto"):
    """softmax along `axis`, float32 accumulation, in x's dtype (as jax.nn.softmax).

    Arguments:
      x: floating array (float32, bfloat16 or float16).
      axis: the axis to normalise.
      impl: "auto" (Pallas on GPU, XLA elsewhere), "pallas" or "xla".
    """
    return _rowwise(_softmax_rows, "softmax", x, axis, impl)


def log_softmax(x, axis=-1, *, impl="auto"):
    """log(softmax(x)) along `axis`, computed as x - logsumexp(x), in x's dtype."""
    return _rowwise(_log_softmax_rows, "log_softmax", x, axis, impl)


# ---- logsumexp ------------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _logsumexp_rows(backend, x):
    return backend("logsumexp", x)


def _logsumexp_fwd(backend, x):
    lse = backend("logsumexp", x)
    return lse, (x, lse)


def _logsumexp_bwd(backend, res, g):
    x, lse = res
    return (backend("logsumexp_bwd", x, lse, g.astype(F32)),)


_logsumexp_rows.defvjp(_logsumexp_fwd, _logsumexp_bwd)


def logsumexp(x, axis=-1, *, impl="auto"):
    """log(sum(exp(x))) along `axis` (removed from the shape), in x's dtype."""
    x = _check_float(x, "logsumexp")
    return _logsumexp(x, _normalize_axis(axis, x.ndim, "logsumexp"), resolve(impl))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _logsumexp(x, axis, backend):
    rows, lead = _to_rows(x, axis)
    return _logsumexp_rows(backend, rows).astype(x.dtype).reshape(lead)


# ---- softmax + top-k ------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 2))
def _softmax_topk_rows(backend, x, k):
    return _softmax_topk_fwd(backend, x, k)[0]


def _softmax_topk_fwd(backend, x, k):
    logits, indices, lse = backend("softmax_topk", x, k)
    values = jnp.exp(logits - lse[:, None])
    return (values.astype(x.dtype), indices), (x, lse, values, indices)


def _softmax_topk_bwd(backend, k, res, cotangents):
    x, lse, values, indices = res
    g = cotangents[0].astype(F32)
    return (backend("softmax_topk_bwd", x, lse, values, indices, g),)


_softmax_topk_rows.defvjp(_softmax_topk_fwd, _softmax_topk_bwd)


def softmax_topk(x, k, axis=-1, *, impl="auto"):
    """The k largest softmax probabilities along `axis` and their indices, in one pass.

    Equals `lax.top_k(softmax(x, axis), k)` (ties: lowest index first) without writing
    the softmax: one pass keeps the online normalizer and a running top-k of the logits.
    Differentiable in the values.

    Arguments:
      x: floating array; k: 1 <= k <= x.shape[axis]; axis: the axis to search.
    Returns:
      (values, indices): `axis` has length k; values in x's dtype, indices int32.
    """
    x = _check_float(x, "softmax_topk")
    axis = _normalize_axis(axis, x.ndim, "softmax_topk")
    n = x.shape[axis]
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ValueError(
            f"ops.softmax_topk: k must be an int with 1 <= k <= n (the length of axis {axis}), "
            f"got k={k!r}, n={n} for x of shape {tuple(x.shape)}"
        )
    return _softmax_topk(x, int(k), axis, resolve(impl))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _softmax_topk(x, k, axis, backend):
    rows, lead = _to_rows(x, axis)
    values, indices = _softmax_topk_rows(backend, rows, k)
    return _from_rows(values, lead, axis), _from_rows(indices, lead, axis)


# ---- cross-entropy --------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def _ce_rows(backend, x, labels, smoothing):
    return _ce_fwd(backend, x, labels, smoothing)[0]


def _ce_fwd(backend, x, labels, smoothing):
    lse, target, total = backend("cross_entropy_stats", x, labels)
    loss = lse - (1.0 - smoothing) * target
    if smoothing:
        loss = loss - (smoothing / x.shape[1]) * total
    return loss, (x, lse, labels)


def _ce_bwd(backend, smoothing, res, g):
    x, lse, labels = res
    return backend("cross_entropy_bwd", x, lse, labels, g, smoothing), None


_ce_rows.defvjp(_ce_fwd, _ce_bwd)


def _check_labels(logits, labels, axis, ignore_index):
    expected = logits.shape[:axis] + logits.shape[axis + 1:]
    if labels.shape != expected:
        raise ValueError(
            f"ops.cross_entropy: labels must have shape {tuple(expected)} for logits of shape "
            f"{tuple(logits.shape)} (class axis {axis}), got {tuple(labels.shape)}"
        )
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(f"ops.cross_entropy: labels must be integers, got dtype {labels.dtype}")
    if is_traced(labels):
        return  # values unknown while tracing
    values = np.asarray(labels)
    n_classes = logits.shape[axis]
    bad = (values != ignore_index) & ((values < 0) | (values >= n_classes))
    if bad.any():
        raise ValueError(
            f"ops.cross_entropy: labels must be in [0, {n_classes}) or ignore_index="
            f"{ignore_index}; got {values[bad].ravel()[:5].tolist()} (logits {tuple(logits.shape)})"
        )


def cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean",
                  axis=-1, *, impl="auto"):
    """Cross-entropy of class-index labels, as torch.nn.functional.cross_entropy (no weights).

    One online pass per row gives the log-sum-exp, the label's logit and (for label
    smoothing) the sum of logits; the (rows, classes) log-softmax is never written.
    Per row: loss = lse - (1 - eps) x[label] - eps/C sum(x); rows whose label is
    `ignore_index` count 0 and, for "mean", are left out of the average.

    Arguments:
      logits: floating array with classes along `axis`.
      labels: integer array, logits' shape without `axis`.
      ignore_index, label_smoothing, reduction: as in PyTorch.
    Returns:
      float32 loss: a scalar, or labels' shape for reduction="none".
    """
    logits = _check_float(logits, "cross_entropy", "logits")
    axis = _normalize_axis(axis, logits.ndim, "cross_entropy")
    labels = jnp.asarray(labels)
    _check_labels(logits, labels, axis, ignore_index)
    if reduction not in REDUCTIONS:
        raise ValueError(f"ops.cross_entropy: reduction={reduction!r} is not one of {REDUCTIONS}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"ops.cross_entropy: label_smoothing must be in [0, 1], got "
                         f"{label_smoothing}")
    return _cross_entropy(logits, labels, int(ignore_index), float(label_smoothing), reduction,
                          axis, resolve(impl))


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _cross_entropy(logits, labels, ignore_index, label_smoothing, reduction, axis, backend):
    rows, lead = _to_rows(logits, axis)
    labels = labels.reshape(-1)
    valid = labels != ignore_index
    safe = jnp.where(valid, labels, 0).astype(jnp.int32)
    loss = jnp.where(valid, _ce_rows(backend, rows, safe, label_smoothing), 0.0)
    if reduction == "none":
        return loss.reshape(lead)
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / jnp.sum(valid)
