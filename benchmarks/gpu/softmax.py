"""GPU checks for jaxdl.ops' Pallas (Triton) kernels: correctness, then speed and memory.

1. correctness of every op and gradient with impl="pallas" (compiled, not interpreted)
   against jax.nn / lax.top_k / optax, on shapes that take every launch shape;
2. timings against XLA: softmax as GB/s and as a fraction of a measured copy's
   bandwidth; softmax_topk against softmax -> top_k; cross_entropy (forward, and
   forward + backward) against optax; float32, batch 4000 and 10, V = 64 .. 1M, k = 5;
3. cross-entropy forward temporary memory (compiled memory analysis): O(batch) for
   the kernel vs O(batch * V) for optax.

    python benchmarks/gpu/softmax.py [--full] [--dry-run] [--out PATH]

Default sizes fit run.py's 55 s cap on one H200 (float32 on every launch shape,
bfloat16 on two; V = 4096, 65536 at batch 4000 and 2**20 at batch 10); --full
is the whole sweep (V = 64 .. 1M, both dtypes everywhere; several minutes).
--dry-run: tiny shapes on the CPU, Pallas in interpret mode.
Writes benchmarks/results/gpu_ops.json (or --out) after each step; exits 1 if a
correctness check fails.
"""

import sys
import time

import _part
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from jaxdl import ops

K = 5
# (rows besides the -inf row, n): every launch shape.
CHECK_SHAPES = [(3, 1), (3, 127), (4000, 64), (512, 1000), (256, 65537), (16, 65537), (1, 2**20 + 3)]
SIZES = {  # checks: [(shape, dtypes)]; timings: batches, vocabulary sizes, repeats; memory shapes
    "full": dict(checks=[(s, ("float32", "bfloat16")) for s in CHECK_SHAPES],
                 batches=(4000, 10), vocab=[64 * 4**i for i in range(8)] + [2**20], reps=20,
                 memory=[(4000, 32768), (10, 2**20)]),
    "lease": dict(checks=[(s, ("float32",)) for s in CHECK_SHAPES]
                  + [((512, 1000), ("bfloat16",)), ((16, 65537), ("bfloat16",))],
                  timings=[(4000, 4096), (4000, 65536), (10, 2**20)], reps=10,
                  memory=[(4000, 32768)]),
    "dry": dict(checks=[((3, 300), ("float32",))], timings=[(2, 300)], reps=1, memory=[(8, 300)]),
}
TOLERANCE = {"float32": 2e-5, "bfloat16": 1e-2}


def _err(a, b):
    """Max of |a - b| / max(1, |b|); equal entries (infinities, nan and nan) count 0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        error = np.abs(a - b) / np.maximum(1.0, np.abs(b))
    return float(np.max(np.where(same, 0.0, error), initial=0.0))


def _case_checks(x, labels, weights, k):
    """(ours, reference) pairs for every op and gradient on one input."""
    x32 = x.astype(jnp.float32)
    finite = x32[1:]  # row 0 holds -inf entries; losses and gradients use the others
    labels = labels[1:]

    def grad_pair(ours, ref):
        return jax.grad(ours)(finite), jax.grad(ref)(finite)

    return {
        "softmax": (ops.softmax(x, impl="pallas"), jax.nn.softmax(x32)),
        "log_softmax": (ops.log_softmax(x, impl="pallas"), jax.nn.log_softmax(x32)),
        "logsumexp": (ops.logsumexp(x, impl="pallas"), jax.nn.logsumexp(x32, -1)),
        "softmax_topk.values": (ops.softmax_topk(x, k, impl="pallas")[0],
                                lax.top_k(jax.nn.softmax(x32), k)[0]),
        "softmax_topk.indices": (ops.softmax_topk(finite, k, impl="pallas")[1],
                                 lax.top_k(jax.nn.softmax(finite), k)[1]),
        "cross_entropy": (ops.cross_entropy(finite, labels, reduction="none", impl="pallas"),
                          optax.softmax_cross_entropy_with_integer_labels(finite, labels)),
        "grad softmax": grad_pair(
            lambda v: jnp.sum(ops.softmax(v, impl="pallas") * weights),
            lambda v: jnp.sum(jax.nn.softmax(v) * weights)),
        "grad log_softmax": grad_pair(
            lambda v: jnp.sum(ops.log_softmax(v, impl="pallas") * weights),
            lambda v: jnp.sum(jax.nn.log_softmax(v) * weights)),
        "grad softmax_topk": grad_pair(
            lambda v: jnp.sum(ops.softmax_topk(v, k, impl="pallas")[0]),
            lambda v: jnp.sum(lax.top_k(jax.nn.softmax(v), k)[0])),
        "grad cross_entropy": grad_pair(
            lambda v: ops.cross_entropy(v, labels, label_smoothing=0.1, impl="pallas"),
            lambda v: optax.softmax_cross_entropy(
                v, optax.smooth_labels(jax.nn.one_hot(labels, v.shape[1]), 0.1)).mean()),
    }


def _correctness(rng, cases):
    results = []
    for (rows, n), dtypes in cases:
        rows += 1  # row 0: -inf entries
        for dtype in dtypes:
            x = jnp.asarray(rng.normal(size=(rows, n)) * 3, dtype).at[0, : n // 2].set(-jnp.inf)
            labels = jnp.asarray(rng.integers(0, n, size=rows), jnp.int32)
            weights = jnp.asarray(rng.normal(size=(rows - 1, n)), jnp.float32)
            for name, (ours, ref) in _case_checks(x, labels, weights, min(K, n)).items():
                error = _err(ours, ref)
                results.append(dict(shape=[rows, n], dtype=dtype, check=name,
                                    max_abs_err=error, ok=error <= TOLERANCE[dtype]))
    return results


def _time(fn, *args, reps):
    out = fn(*args)
    jax.block_until_ready(out)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _timings(rng, shapes, reps, done):
    jit = jax.jit
    contenders = {
        "copy": jit(lambda x, y: x * 1.0),
        "softmax pallas": jit(lambda x, y: ops.softmax(x, impl="pallas")),
        "softmax xla (jax.nn)": jit(lambda x, y: jax.nn.softmax(x)),
        "softmax_topk pallas": jit(lambda x, y: ops.softmax_topk(x, K, impl="pallas")),
        "softmax->top_k xla": jit(lambda x, y: lax.top_k(jax.nn.softmax(x), K)),
        "cross_entropy pallas": jit(lambda x, y: ops.cross_entropy(x, y, impl="pallas")),
        "cross_entropy optax": jit(
            lambda x, y: optax.softmax_cross_entropy_with_integer_labels(x, y).mean()),
        "cross_entropy fwd+bwd pallas": jit(jax.grad(
            lambda x, y: ops.cross_entropy(x, y, impl="pallas"))),
        "cross_entropy fwd+bwd optax": jit(jax.grad(
            lambda x, y: optax.softmax_cross_entropy_with_integer_labels(x, y).mean())),
    }
    records = []
    for batch, n in shapes:
        if batch * n < 2**31:  # larger ones run XLA
            x = jnp.asarray(rng.normal(size=(batch, n)), jnp.float32)
            y = jnp.asarray(rng.integers(0, n, size=batch), jnp.int32)
            row = dict(batch=batch, V=n)
            for name, fn in contenders.items():
                row[name] = _time(fn, x, y, reps=reps)
            moved = 2 * x.size * 4  # softmax and copy read and write every element
            row["copy GB/s"] = moved / row["copy"] / 1e9
            row["softmax pallas GB/s"] = moved / row["softmax pallas"] / 1e9
            row["softmax pallas / copy bandwidth"] = row["copy"] / row["softmax pallas"]
            row["softmax speedup vs xla"] = row["softmax xla (jax.nn)"] / row["softmax pallas"]
            row["topk speedup vs unfused"] = row["softmax->top_k xla"] / row["softmax_topk pallas"]
            row["ce speedup vs optax"] = row["cross_entropy optax"] / row["cross_entropy pallas"]
            row["ce fwd+bwd speedup vs optax"] = (row["cross_entropy fwd+bwd optax"]
                                                  / row["cross_entropy fwd+bwd pallas"])
            print({k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()},
                  flush=True)
            records.append(row)
            done(records)
    return records


def _ce_memory(shapes):
    out = {}
    for batch, n in shapes:
        x = jax.ShapeDtypeStruct((batch, n), jnp.float32)
        y = jax.ShapeDtypeStruct((batch,), jnp.int32)
        for name, fn in {
            "pallas": lambda x, y: ops.cross_entropy(x, y, impl="pallas"),
            "optax": lambda x, y: optax.softmax_cross_entropy_with_integer_labels(x, y).mean(),
        }.items():
            stats = jax.jit(fn).lower(x, y).compile().memory_analysis()
            out[f"{name} {batch}x{n} temp bytes"] = int(stats.temp_size_in_bytes)
    return out


def main():
    args = _part.parse_args(__doc__.splitlines()[0], "gpu_ops.json",
                            lambda p: p.add_argument("--full", action="store_true"))
    sizes = SIZES["dry" if args.dry_run else "full" if args.full else "lease"]
    if "timings" not in sizes:
        sizes["timings"] = [(b, n) for b in sizes["batches"] for n in sizes["vocab"]]
    print(jax.devices(), flush=True)
    if jax.default_backend() != "gpu" and not args.dry_run:
        sys.exit("benchmarks/gpu/softmax.py needs a GPU (or --dry-run: interpret mode on the CPU)")
    rng = np.random.default_rng(0)
    result = dict(device=str(jax.devices()[0]), jax=jax.__version__, dry_run=args.dry_run)
    checks = result["checks"] = _correctness(rng, sizes["checks"])
    failed = [c for c in checks if not c["ok"]]
    result["summary"] = f"correctness {len(checks) - len(failed)}/{len(checks)} ok"
    print(result["summary"], flush=True)
    for c in failed:
        print("FAILED", c)
    _part.write(args.out, result)
    result["ce_forward_memory"] = _ce_memory(sizes["memory"])
    print(result["ce_forward_memory"], flush=True)
    _part.write(args.out, result)

    def done(rows):
        result["timings"] = rows
        speedups = [f"{r['batch']}x{r['V']}: {r['softmax speedup vs xla']:.2f}x" for r in rows]
        result["summary"] = (f"correctness {len(checks) - len(failed)}/{len(checks)} ok; "
                             f"softmax vs XLA {', '.join(speedups)}")
        _part.write(args.out, result)

    _timings(rng, sizes["timings"], sizes["reps"], done)
    print(f"wrote {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
