"""GPU: ops.attention's Pallas (Triton) flash kernels: correctness first, then TFLOP/s.

1. correctness of the compiled kernels (impl="pallas", not interpreted): output and
   gradients of q, k, v against jax.nn.dot_product_attention(implementation="xla") in
   float32, for causal / mask / GQA / L != S / ragged lengths, bfloat16 and float32;
   dropout: the kernels' output against the XLA path's (same counter-based mask);
2. bfloat16, head dim 128, 16 heads, batch * L = 16k tokens, L = 1k .. 32k, causal and
   not, forward and forward+backward: TFLOP/s of ops.attention (pallas) against
   jax.nn.dot_product_attention with implementation="xla" (only while its L x S
   scores fit: L <= 8k) and "cudnn", and torch SDPA on the same GPU (when torch sees
   CUDA). FLOPs: 4 B H L S E forward (half when causal), 2.5x that for the backward.
Timing stops starting new cases after --budget-s seconds (default 100: about 2
minutes in all); cases not timed are listed as skipped.

    python benchmarks/gpu/attention.py [--out PATH] [--dry-run]

--dry-run: tiny sizes on CPU with Pallas in interpret mode (under a minute), to check
the script itself. Writes benchmarks/results/gpu_attention.json (or --out); exits 1
if a correctness check fails.
"""

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from jaxdl import ops  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parents[1] / "results" / "gpu_attention.json"


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU, Pallas interpret")
    p.add_argument("--budget-s", type=float, default=100.0, help="stop timing new cases after")
    return p.parse_args()


def _err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)), initial=0.0))


def _jax_nn(q, k, v, causal=False, mask=None, implementation=None):
    """jax.nn.dot_product_attention on our (B, H, L, E) layout (it takes (B, L, H, E))."""
    q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
    out = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal,
                                       implementation=implementation)
    return jnp.swapaxes(out, 1, 2)


CHECKS = [  # (name, q shape, k shape, causal, mask kind)
    ("causal", (2, 4, 1000, 64), (2, 4, 1000, 64), True, None),
    ("L != S, ragged", (2, 4, 129, 128), (2, 4, 4097, 128), False, None),
    ("causal L > S", (1, 4, 300, 64), (1, 4, 100, 64), True, None),
    ("bool mask", (2, 4, 256, 64), (2, 4, 384, 64), False, "bool"),
    ("GQA causal", (2, 8, 512, 128), (2, 2, 512, 128), True, None),
    ("head dim 96", (1, 2, 200, 96), (1, 2, 333, 96), True, None),
]
DRY_CHECKS = [("causal", (1, 2, 40, 64), (1, 2, 40, 64), True, None),
              ("bool mask", (1, 2, 20, 16), (1, 2, 30, 16), False, "bool")]


def _check_case(rng, q_shape, k_shape, causal, mask_kind, dtype):
    q, k, v = (jnp.asarray(rng.normal(size=s), dtype) for s in (q_shape, k_shape, k_shape))
    mask = None
    if mask_kind == "bool":
        mask = jnp.asarray(rng.random((q_shape[0], 1, q_shape[2], k_shape[2])) > 0.3)
    ct = jnp.asarray(rng.normal(size=q_shape), jnp.float32)

    def ours(q, k, v):
        return ops.attention(q, k, v, mask=mask, is_causal=causal, enable_gqa=True,
                             impl="pallas")

    def reference(q, k, v):
        groups = q.shape[1] // k.shape[1]
        k, v = (jnp.repeat(x, groups, axis=1) for x in (k, v))
        return _jax_nn(q, k, v, causal, mask, "xla")

    def value_and_grads(fn, *args):
        out, vjp = jax.vjp(lambda *a: fn(*a).astype(jnp.float32), *args)
        return (out, *vjp(ct))

    got = jax.jit(lambda *a: value_and_grads(ours, *a))(q, k, v)
    upcast = [x.astype(jnp.float32) for x in (q, k, v)]
    want = jax.jit(lambda *a: value_and_grads(reference, *a))(*upcast)
    names = ["out", "dq", "dk", "dv"]
    return {n: _err(a.astype(jnp.float32), b) for n, a, b in zip(names, got, want)}


def correctness(dry):
    rng = np.random.default_rng(0)
    results, ok = [], True
    for name, q_shape, k_shape, causal, mask in (DRY_CHECKS if dry else CHECKS):
        for dtype, tol in ((jnp.float32, 2e-3), (jnp.bfloat16, 6e-2)):
            errors = _check_case(rng, q_shape, k_shape, causal, mask, dtype)
            passed = max(errors.values()) <= tol
            ok &= passed
            results.append(dict(case=name, dtype=jnp.dtype(dtype).name, errors=errors,
                                tolerance=tol, passed=passed))
            print(f"check {name:16} {jnp.dtype(dtype).name:8} "
                  + " ".join(f"{n} {e:.1e}" for n, e in errors.items())
                  + ("" if passed else "  FAILED"), flush=True)
    # dropout: same counter-based mask in the kernels and the XLA path
    shape = (1, 2, 40, 64) if dry else (2, 4, 1000, 64)
    q, k, v = (jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(3))
    outs = [ops.attention(q, k, v, dropout_p=0.2, key=jax.random.key(0), is_causal=True,
                          impl=impl) for impl in ("pallas", "xla")]
    error = _err(outs[0], outs[1])
    ok &= error <= 2e-3
    results.append(dict(case="dropout pallas vs xla", dtype="float32", errors={"out": error},
                        tolerance=2e-3, passed=error <= 2e-3))
    print(f"check dropout pallas vs xla: {error:.1e}", flush=True)
    return results, bool(ok)


# ---- timing -----------------------------------------------------------------------------------


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _seconds(fn, sync, reps):
    sync(fn())  # compile / warm up
    sync(fn())
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _jax_contenders(dry):
    impl = "pallas"
    contenders = {"ops.attention (pallas)": lambda q, k, v, c: ops.attention(
        q, k, v, is_causal=c, impl=impl)}
    contenders["jax.nn xla"] = lambda q, k, v, c: _jax_nn(q, k, v, c, None, "xla")
    if not dry:
        contenders["jax.nn cudnn"] = lambda q, k, v, c: _jax_nn(q, k, v, c, None, "cudnn")
    return contenders


def _jax_call(fn, causal, backward, args):
    if backward:
        f = jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v, causal).astype(jnp.float32)),
                             argnums=(0, 1, 2)))
    else:
        f = jax.jit(lambda q, k, v: fn(q, k, v, causal))
    return lambda: f(*args)


def _torch_call(torch, arrays, causal, backward):
    tensors = [torch.tensor(np.asarray(a, np.float32), device="cuda", dtype=torch.bfloat16)
               .requires_grad_(backward) for a in arrays]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def call():
        if not backward:
            with torch.no_grad():
                return sdpa(*tensors, is_causal=causal)
        for t in tensors:
            t.grad = None
        sdpa(*tensors, is_causal=causal).sum().backward()
        return tensors[0].grad
    return call


def timing(dry, budget_s):
    torch = None if dry else _torch_cuda()
    lengths = [64, 128] if dry else [1024, 2048, 4096, 8192, 16384, 32768]
    heads, head_dim, tokens = (2, 64, 128) if dry else (16, 128, 16384)
    reps = 2 if dry else 10
    rng = np.random.default_rng(0)
    records, skipped = [], []
    start = time.perf_counter()
    for n in lengths:
        shape = (max(1, tokens // n), heads, n, head_dim)
        arrays = [jnp.asarray(rng.normal(size=shape), jnp.bfloat16) for _ in range(3)]
        for causal in (True, False):
            for backward in (False, True):
                flops = 4 * shape[0] * heads * n * n * head_dim * (0.5 if causal else 1.0)
                flops *= 3.5 if backward else 1.0
                contenders = {name: (_jax_call(fn, causal, backward, arrays),
                                     jax.block_until_ready)
                              for name, fn in _jax_contenders(dry).items()}
                if n > 8192:  # XLA's dense attention writes B H L S scores
                    contenders.pop("jax.nn xla")
                if torch is not None:
                    contenders["torch SDPA"] = (_torch_call(torch, arrays, causal, backward),
                                                lambda out: torch.cuda.synchronize())
                for name, (fn, sync) in contenders.items():
                    case = dict(shape=shape, causal=causal, backward=backward, contender=name)
                    if time.perf_counter() - start > budget_s:
                        skipped.append(case)
                        continue
                    try:
                        seconds = _seconds(fn, sync, reps)
                    except Exception as e:  # e.g. cudnn refusing a shape: record, go on
                        records.append(dict(case, error=f"{type(e).__name__}: {e}"[:300]))
                        print(f"{str(shape):22} {name:24} error {type(e).__name__}", flush=True)
                        continue
                    records.append(dict(case, seconds=seconds, tflops=flops / seconds / 1e12))
                    print(f"{str(shape):22} causal={causal!s:5} "
                          f"{'fwd+bwd' if backward else 'fwd':7} {name:24} "
                          f"{seconds * 1e3:9.3f} ms {flops / seconds / 1e12:7.1f} TFLOP/s",
                          flush=True)
    return records, skipped


def main():
    args = _parse()
    if args.dry_run:
        jax.config.update("jax_platforms", "cpu")
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, "
          f"devices {[d.device_kind for d in jax.devices()]}", flush=True)
    checks, ok = correctness(args.dry_run)
    records, skipped = timing(args.dry_run, args.budget_s) if ok else ([], [])
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(date=time.strftime("%Y-%m-%d"), jax=jax.__version__, dry_run=args.dry_run,
                device=jax.devices()[0].device_kind,
                flops="4 B H L S E forward (x0.5 causal), x3.5 forward+backward")
    out.write_text(json.dumps(dict(meta=meta, checks=checks, records=records,
                                   skipped=skipped), indent=1))
    print(f"wrote {out}" + ("" if ok else " (correctness FAILED: no timings)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
