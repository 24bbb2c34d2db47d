"""PyTorch's own sample inputs for torch.nn.functional (the OpInfo database) replayed against
jaxdl.nn.functional: values, and gradients (jax.vjp against torch autograd, one random
cotangent per output) for differentiable float samples, in float32, float64 (x64 enabled inside
that test only) and bfloat16 (looser tolerance).

Every sample that differs from torch is listed in EXEMPT with its reason. Samples of random
ops are compared only where torch's output does not depend on the seed. Output dtypes are
compared by kind (integer or float): indices are int32 here, and without x64 JAX computes a
requested float64 in float32.
`python tests/nn/test_opinfo.py` prints the match rates.
"""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch.utils import _pytree

import jaxdl.nn.functional as F
from jaxdl import nn

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (dev extra)")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

# samples replayed per op and dtype: the first few (more with JAXDL_OPINFO_SAMPLES=N; the match
# rates in docs/layers.md are for 12)
SAMPLES_PER_OP = {"float32": 3, "float64": 1, "bfloat16": 1}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
# max |ours - torch| <= tol * max(1, max |torch|), for values and for gradients
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-10, 1e-9), "bfloat16": (2e-2, 5e-2)}

# Ops whose torch output depends on its random stream (JAX's differs): a sample is compared
# only when two torch seeds give the same output (eval mode, p = 0, ...).
RANDOM = {"dropout", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout.with_train",
          "feature_alpha_dropout.without_train", "rrelu", "fractional_max_pool2d",
          "fractional_max_pool3d", "scaled_dot_product_attention", "multi_head_attention_forward"}

# (op key, dtype or None for all, what: "values"/"grads"/"sample", predicate on the
# SampleInput or None for all samples, reason)
EXEMPT = [
    ("ctc_loss", None, "grads", None,
     "torch's ctc_loss gradient assumes log_probs came out of log_softmax (it adds "
     "exp(log_probs) within each input); jaxdl returns the gradient of the loss it computes "
     "(tests/nn/test_ctc.py checks the two differ by exactly that term)"),
    ("normalize", "bfloat16", "grads",
     lambda sample: sample.input.ndim == 0 or sample.input.shape[sample.kwargs.get("dim", 1)] == 1,
     "one element per vector: x / |x|_p is constant and its exact gradient 0; torch's bfloat16 "
     "backward leaves up to 0.13 of rounding, ours (computed in float32) about 1e-6"),
    ("hardsigmoid", "float64", "grads", None,
     "torch's float64 backward multiplies by the float32 constant 1/6 (0.16666667, 5e-9 off); "
     "ours is 1/6 in float64"),
]


def _key(op):
    name = op.name.removeprefix("nn.functional.")
    return f"{name}.{op.variant_test_name}" if op.variant_test_name else name


@functools.cache
def _ops():
    return {_key(op): op for op in op_db
            if op.name.startswith("nn.functional.") or op.name in ("softmax", "log_softmax")}


def _cases():
    return [(key, dtype) for key, op in sorted(_ops().items()) for dtype in DTYPES
            if DTYPES[dtype] in op.supported_dtypes("cpu")]


def _torch_function(key):
    name = key.split(".")[0]
    return getattr(torch, name) if name in ("softmax", "log_softmax") else getattr(TF, name)


def _ours(key):
    name = key.split(".")[0]
    fn = getattr(F, name)
    if name in ("embedding", "embedding_bag"):  # the OpInfo passes (weight, indices)
        return lambda weight, indices, *args, **kwargs: fn(indices, weight, *args, **kwargs)
    if key in RANDOM:  # samples torch computes the same for any seed; ours need a key in a trace
        argument = "dropout_key" if "attention" in name else "key"
        return functools.partial(fn, **{argument: jax.random.key(0)})
    return fn


_JAX_DTYPES = {torch.float32: jnp.float32, torch.float64: jnp.float64, torch.bfloat16: jnp.bfloat16,
               torch.float16: jnp.float16, torch.int64: jnp.int64, torch.int32: jnp.int32,
               torch.bool: jnp.bool_, torch.uint8: jnp.uint8}


def _to_jax(x):
    if isinstance(x, torch.Tensor):
        value = x.detach()
        if value.dtype == torch.bfloat16:
            return jnp.asarray(value.float().numpy(), jnp.bfloat16)
        return jnp.asarray(value.numpy())
    if isinstance(x, torch.dtype):
        return _JAX_DTYPES[x]
    if isinstance(x, torch.nn.PairwiseDistance):
        return nn.PairwiseDistance(x.norm, x.eps, x.keepdim)
    if isinstance(x, torch.Size):
        return tuple(x)
    return x


def _numpy(x):
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == jnp.bfloat16 else x


def _compare(ours, theirs, tol, what):
    """None if close, else a short description of the difference."""
    a, e = _numpy(ours), _numpy(theirs)
    if a.shape != e.shape:
        return f"{what}: shape {a.shape}, torch {e.shape}"
    if np.issubdtype(e.dtype, np.floating) != np.issubdtype(a.dtype, np.floating):
        return f"{what}: dtype {a.dtype}, torch {e.dtype}"
    if e.size == 0:
        return None
    if not np.issubdtype(e.dtype, np.floating):
        return None if np.array_equal(a, e) else f"{what}: values differ"
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return f"{what}: NaN positions differ"
    finite = ~np.isnan(e)
    if not np.array_equal(np.isinf(a[finite]) * np.sign(a[finite]), np.isinf(e[finite]) * np.sign(e[finite])):
        return f"{what}: infinities differ"
    normal = finite & ~np.isinf(e)
    if not normal.any():
        return None
    err = float(np.max(np.abs(a[normal].astype(np.float64) - e[normal])))
    scale = max(1.0, float(np.max(np.abs(e[normal]))))
    return None if err <= tol * scale else f"{what}: max error {err:.3g} (scale {scale:.3g})"


def _torch_outputs(fn, sample, seed=0):
    torch.manual_seed(seed)
    out = fn(sample.input, *sample.args, **sample.kwargs)
    return [o for o in _pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]


def _is_random(key, sample):
    """Whether torch's output depends on the seed: several seeds, as a few can agree by chance
    (a fractional max-pool window with two possible starts)."""
    if key not in RANDOM:
        return False
    fn = _torch_function(key)
    with torch.no_grad():
        first = _torch_outputs(fn, sample, 0)
        return any(not torch.equal(a, b) for seed in range(1, 8)
                   for a, b in zip(first, _torch_outputs(fn, sample, seed)))


def check_sample(key, sample, dtype_name, seed):
    """Compares one sample; returns (outcome, detail) with outcome one of "match",
    "values", "grads" (which part differs), "error" (jaxdl raised), "random"."""
    if _is_random(key, sample):
        return "random", None
    tree = (sample.input, sample.args, sample.kwargs)
    leaves, spec = _pytree.tree_flatten(tree)
    diff = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor) and v.requires_grad
            and v.is_floating_point()]
    torch_leaves = [v.detach().clone().requires_grad_(i in diff) if isinstance(v, torch.Tensor) else v
                    for i, v in enumerate(leaves)]
    t_input, t_args, t_kwargs = _pytree.tree_unflatten(torch_leaves, spec)
    t_out = [o for o in _pytree.tree_leaves(_ops()[key].op(t_input, *t_args, **t_kwargs))
             if isinstance(o, torch.Tensor)]
    grad_outs = [i for i, o in enumerate(t_out) if o.requires_grad]

    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal(tuple(t_out[i].shape)) for i in grad_outs]
    jax_leaves = [_to_jax(v) for v in leaves]
    fn = _ours(key)

    def run(*diff_values):
        values = list(jax_leaves)
        for i, v in zip(diff, diff_values):
            values[i] = v
        j_input, j_args, j_kwargs = _pytree.tree_unflatten(values, spec)
        out = [o for o in jax.tree.leaves(fn(j_input, *j_args, **j_kwargs)) if o is not None]
        return [out[i] for i in grad_outs if i < len(out)], out

    diff_values = [jax_leaves[i] for i in diff]

    def values_and_grads(diff_values, cotangents):
        differentiable, pullback, out = jax.vjp(run, *diff_values, has_aux=True)
        if not (grad_outs and diff):
            return out, None
        return out, pullback([jnp.asarray(c, o.dtype) for c, o in zip(cotangents, differentiable)])

    # one compiled program per sample: eager dispatch of every small op is several times slower
    try:
        out, grads = jax.jit(values_and_grads)(diff_values, cotangents)
    except Exception as err:  # noqa: BLE001 (every failure is reported with its sample)
        try:  # which part fails: the forward, or only the gradient?
            jax.jit(lambda d: run(*d)[1])(diff_values)
        except Exception:  # noqa: BLE001
            return "error", f"{type(err).__name__}: {err}"[:300]
        return "grads", f"{type(err).__name__}: {err}"[:300]
    value_tol, grad_tol = TOLERANCE[dtype_name]
    if len(out) != len(t_out):
        return "values", f"{len(out)} outputs, torch {len(t_out)}"
    for k, (a, e) in enumerate(zip(out, t_out)):
        problem = _compare(a, e, value_tol, f"output {k}")
        if problem:
            return "values", problem
    if grads is None:
        return "match", "no gradient"
    t_grads = torch.autograd.grad(
        [t_out[i] for i in grad_outs], [torch_leaves[i] for i in diff],
        [torch.tensor(c, dtype=t_out[i].dtype) for i, c in zip(grad_outs, cotangents)],
        allow_unused=True)
    for k, (g, t) in enumerate(zip(grads, t_grads)):
        expected = torch.zeros_like(torch_leaves[diff[k]]) if t is None else t
        problem = _compare(g, expected, grad_tol, f"gradient of input {diff[k]}")
        if problem:
            return "grads", problem
    return "match", None


def _exemption(key, dtype_name, sample, outcome):
    if outcome in ("match", "random"):
        return None
    for op_key, dtype, what, predicate, reason in EXEMPT:
        if op_key == key and dtype in (None, dtype_name) and (predicate is None or predicate(sample)):
            if what == "sample" or what == outcome or (what == "values" and outcome == "error"):
                return reason
    return None


def replay(key, dtype_name):
    """Outcomes of the op's first samples: a list of (index, outcome, detail, exemption)."""
    op = _ops()[key]
    torch.manual_seed(0)  # the samples are random tensors: the same ones every run
    samples = op.sample_inputs("cpu", DTYPES[dtype_name], requires_grad=op.supports_autograd)
    results = []
    # each sample compiles one small program once: XLA's optimisation passes cost more than they save
    optimizing = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        with jax.enable_x64(dtype_name == "float64"):
            count = int(os.environ.get("JAXDL_OPINFO_SAMPLES", SAMPLES_PER_OP[dtype_name]))
            for index, sample in zip(range(count), samples):
                outcome, detail = check_sample(key, sample, dtype_name, seed=index)
                results.append((index, outcome, detail, _exemption(key, dtype_name, sample, outcome)))
    finally:
        jax.config.update("jax_disable_most_optimizations", optimizing)
    return results


@pytest.mark.parametrize("key, dtype_name", _cases())
def test_opinfo_samples_match_torch(key, dtype_name):
    results = replay(key, dtype_name)
    unexpected = [f"sample {i}: {outcome}: {detail}" for i, outcome, detail, exempt in results
                  if outcome not in ("match", "random") and exempt is None]
    assert not unexpected, f"{key} {dtype_name}:\n" + "\n".join(unexpected)


def _report():
    """Prints every difference, then per dtype and in all: names replayed, samples compared
    (random ones left out) and the share whose values match, and of those with gradients
    (values matching, differentiable), the share whose gradients match."""
    totals = {}
    for key, dtype_name in _cases():
        for _, outcome, detail, exempt in replay(key, dtype_name):
            counts = totals.setdefault(dtype_name, {"names": set(), "values": [0, 0], "grads": [0, 0]})
            counts["names"].add(key.split(".")[0])
            if outcome == "random":
                continue
            counts["values"][0] += outcome in ("match", "grads")
            counts["values"][1] += 1
            if outcome == "grads" or outcome == "match" and detail != "no gradient":
                counts["grads"][0] += outcome == "match"
                counts["grads"][1] += 1
            if outcome not in ("match", "random"):
                print(f"{key} {dtype_name}: {outcome}: {detail} [{exempt or 'NOT EXEMPT'}]")
    for dtype_name, counts in [*totals.items(), ("all", {
            "names": set().union(*(c["names"] for c in totals.values())),
            **{part: [sum(c[part][i] for c in totals.values()) for i in (0, 1)]
               for part in ("values", "grads")}})]:
        rates = ", ".join(f"{part} {ok}/{n} ({100 * ok / n:.2f}%)"
                          for part in ("values", "grads") for ok, n in [counts[part]])
        print(f"{dtype_name}: {len(counts['names'])} names; {rates}")


if __name__ == "__main__":
    _report()
