"""CPU: ops.attention (impl="xla", flash tiles) against torch SDPA and jax.nn.dot_product_attention.

float32, head dim 64, causal: shape (4, 8, 1024, 64) (the target case) and a sweep
(1, 8, L, 64) for L = 128 .. 4096, forward and forward+backward (gradients of q, k, v
of sum(out)); plus the non-causal target case. Each case runs the contenders side by
side in one process with fixed thread counts (XLA and torch alike), after a warm-up
call (compilation is not timed), in shuffled interleaved rounds; ratios are medians of
per-round ratios (benchmarks/_timing.py). The jax contenders compile with
dl.xla_compiler_options() (what dl.jit uses). Temporary memory of the compiled
forward+backward (XLA's memory analysis; nothing is run) for one head, (1, 1, L, 64), L up to 8192.
Runtime: about 3-5 minutes on an idle 2-core machine (--quick: under a minute).

    python benchmarks/attention.py [--quick] [--threads 1]

Writes benchmarks/results/attention.json and attention.png.
"""

import argparse
import json
import pathlib
import sys

from _timing import interleaved_seconds, machine, pin_threads

PARSER = argparse.ArgumentParser(description=__doc__.splitlines()[0])
PARSER.add_argument("--quick", action="store_true", help="small shapes, short timings")
PARSER.add_argument("--threads", type=int, default=1, help="threads for XLA and torch")
PARSER.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"
                                         / "attention.json"))
ARGS = PARSER.parse_args()
pin_threads(ARGS.threads)  # before jax is imported: XLA's CPU thread pools are fixed at start

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import jaxdl as dl  # noqa: E402
from jaxdl import ops  # noqa: E402

torch.set_num_threads(ARGS.threads)
OPTIONS = dl.xla_compiler_options()
E = 64


def _ours(q, k, v, causal):
    return ops.attention(q, k, v, is_causal=causal, impl="xla")


def _jax_nn(q, k, v, causal):  # jax.nn takes (B, L, H, E)
    q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
    return jnp.swapaxes(jax.nn.dot_product_attention(q, k, v, is_causal=causal), 1, 2)


JAX_CONTENDERS = {"ops.attention (xla)": _ours, "jax.nn.dot_product_attention": _jax_nn}


def _jitted(fn, causal, backward):
    if not backward:
        return jax.jit(lambda q, k, v: fn(q, k, v, causal), compiler_options=OPTIONS)
    return jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v, causal)), argnums=(0, 1, 2)),
                   compiler_options=OPTIONS)


def _torch_call(tensors, causal, backward):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if not backward:
        def forward():
            with torch.no_grad():
                return sdpa(*tensors, is_causal=causal)
        return forward

    def forward_backward():
        for t in tensors:
            t.grad = None
        sdpa(*tensors, is_causal=causal).sum().backward()
        return tensors[0].grad
    return forward_backward


def _time_case(shape, causal, backward, min_time):
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=shape).astype(np.float32) for _ in range(3)]
    jarrays = [jnp.asarray(a) for a in arrays]
    tensors = [torch.from_numpy(a).requires_grad_(backward) for a in arrays]
    jitted = [_jitted(fn, causal, backward) for fn in JAX_CONTENDERS.values()]
    calls = [(lambda f=f: f(*jarrays), jax.block_until_ready) for f in jitted]
    calls.append((_torch_call(tensors, causal, backward), lambda out: out))
    names = [*JAX_CONTENDERS, "torch SDPA"]
    return dict(zip(names, interleaved_seconds(calls, min_time, min_rounds=3)))


def _temp_bytes(shape, causal):
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    out = {}
    for name, fn in JAX_CONTENDERS.items():
        compiled = _jitted(fn, causal, True).lower(x, x, x).compile()
        out[name] = compiled.memory_analysis().temp_size_in_bytes
    return out


def _plot(records, memory, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.5))
    sweep = [r for r in records if r["shape"][0] == 1 and r["causal"]]
    for name in dict.fromkeys(r["contender"] for r in sweep):
        for backward, style in ((True, "-"), (False, "--")):
            rs = [r for r in sweep if (r["contender"], r["backward"]) == (name, backward)]
            ax_t.plot([r["shape"][2] for r in rs], [r["seconds"] * 1e3 for r in rs], style,
                      marker="o", ms=3, label=f"{name}, {'fwd+bwd' if backward else 'fwd'}")
    ax_t.set(xscale="log", yscale="log", xlabel="L = S", ylabel="ms",
             title="(1, 8, L, 64) float32 causal")
    ax_t.legend(fontsize=7)
    for name in JAX_CONTENDERS:
        ax_m.plot([m["L"] for m in memory], [m[name] / 2**20 for m in memory], marker="o",
                  label=name)
    ax_m.set(xscale="log", yscale="log", xlabel="L = S", ylabel="MiB",
             title="fwd+bwd temporary memory (compiled), (1, 1, L, 64)")
    ax_m.legend(fontsize=7)
    fig.suptitle(f"CPU, {ARGS.threads} thread(s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    min_time = 0.2 if ARGS.quick else 1.0
    sweep = [128, 512] if ARGS.quick else [128, 256, 512, 1024, 2048, 4096]
    cases = [((4, 8, 1024 if not ARGS.quick else 256, E), causal) for causal in (True, False)]
    cases += [((1, 8, n, E), True) for n in sweep]
    print(f"jax {jax.__version__}, torch {torch.__version__}, threads={ARGS.threads}")
    print(f"{'shape':20} {'causal':6} {'pass':7} {'contender':30} {'ms':>9} {'x ours':>7}")
    records = []
    for shape, causal in cases:
        for backward in (False, True):
            timed = _time_case(shape, causal, backward, min_time)
            for name, (seconds, ratio) in timed.items():
                records.append(dict(shape=shape, causal=causal, backward=backward,
                                    contender=name, seconds=seconds, time_vs_ours=ratio))
                print(f"{str(shape):20} {causal!s:6} {'fwd+bwd' if backward else 'fwd':7} "
                      f"{name:30} {seconds * 1e3:9.2f} {ratio:6.2f}x", flush=True)
    memory = []
    for n in ([256, 1024] if ARGS.quick else [128, 512, 1024, 2048, 4096, 8192]):
        temp = _temp_bytes((1, 1, n, E), True)
        memory.append(dict(L=n, **temp))
        print(f"temporary memory fwd+bwd (1, 1, {n}, 64): " + ", ".join(
            f"{name} {b / 2**20:.1f} MiB" for name, b in temp.items()), flush=True)
    out = pathlib.Path(ARGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(machine(), threads=ARGS.threads, quick=ARGS.quick, jax=jax.__version__,
                torch=torch.__version__, compiler_options=OPTIONS,
                note="time_vs_ours: median over interleaved rounds of contender time / ours "
                     "(>1: ours faster); memory: temp_size_in_bytes of the compiled fwd+bwd")
    out.write_text(json.dumps(dict(meta=meta, records=records, memory=memory), indent=1))
    _plot(records, memory, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
