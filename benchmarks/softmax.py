"""CPU: the online softmax family (impl="xla") against jax.nn / lax.top_k / optax and torch.

Milakov & Gimelshein's setup: float32, batch 4000 and 10, V doubling from 64 up to
1M (as far as `--max-elements` allows), k = 5. Each case runs every contender side by
side in one process with fixed thread counts (XLA and torch alike), after a warm-up
call (compilation is not timed), in rounds that call every contender once in a shuffled
order, so that a busy spell on a shared machine hits all of them alike; ratios are
medians of per-round ratios. Timed calls are forward only (no gradients); the jax
contenders are jitted.

    python benchmarks/softmax.py            # the full run (minutes; an idle machine)
    python benchmarks/softmax.py --quick    # smoke run

Writes benchmarks/results/softmax.json and softmax.png (elements/s vs V).
"""

import argparse
import json
import pathlib
import sys

RESULTS = pathlib.Path(__file__).parent / "results"


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few small shapes, short timings")
    p.add_argument("--threads", type=int, default=1, help="threads for XLA and torch")
    p.add_argument("--max-elements", type=int, default=2**27, help="largest batch * V")
    p.add_argument("--out", default=str(RESULTS / "softmax.json"))
    return p.parse_args()


ARGS = _parse()
from _timing import interleaved_seconds, pin_threads  # noqa: E402

pin_threads(ARGS.threads)  # before jax is imported: XLA's CPU thread pools are fixed at start

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from jaxdl import ops  # noqa: E402

torch.set_num_threads(ARGS.threads)
K = 5


def _jax_sync(out):
    jax.block_until_ready(out)


def _torch_sync(out):
    return out


def _contenders(x, labels):
    xt, lt = torch.from_numpy(np.asarray(x)), torch.from_numpy(np.asarray(labels, np.int64))
    jit = jax.jit
    return {
        "softmax": {
            "ops.softmax (xla)": (jit(lambda x: ops.softmax(x, impl="xla")), (x,), _jax_sync),
            "jax.nn.softmax": (jit(jax.nn.softmax), (x,), _jax_sync),
            "torch.softmax": (lambda x: torch.softmax(x, -1), (xt,), _torch_sync),
        },
        "softmax_topk": {
            "ops.softmax_topk (xla)": (jit(lambda x: ops.softmax_topk(x, K, impl="xla")), (x,),
                                       _jax_sync),
            "jax softmax->top_k": (jit(lambda x: jax.lax.top_k(jax.nn.softmax(x), K)), (x,),
                                   _jax_sync),
            "torch softmax->topk": (lambda x: torch.topk(torch.softmax(x, -1), K), (xt,),
                                    _torch_sync),
        },
        "cross_entropy": {
            "ops.cross_entropy (xla)": (jit(lambda x, y: ops.cross_entropy(x, y, impl="xla")),
                                        (x, labels), _jax_sync),
            "optax": (jit(lambda x, y: optax.softmax_cross_entropy_with_integer_labels(x, y)
                          .mean()), (x, labels), _jax_sync),
            "torch": (torch.nn.functional.cross_entropy, (xt, lt), _torch_sync),
        },
    }


def _shapes(quick, max_elements):
    vocab = [64 * 2**i for i in range(15)]  # 64 .. 1M
    if quick:
        vocab, max_elements = [64, 4096, 65536], min(max_elements, 2**22)
    return [(b, v) for b in (4000, 10) for v in vocab if b * v <= max_elements]


def _plot(records, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops_names = list(dict.fromkeys(r["op"] for r in records))
    fig, axes = plt.subplots(1, len(ops_names), figsize=(6 * len(ops_names), 4.5))
    for ax, op in zip(np.atleast_1d(axes), ops_names):
        for impl in dict.fromkeys(r["impl"] for r in records if r["op"] == op):
            for batch, style in ((4000, "-"), (10, "--")):
                rs = [r for r in records if (r["op"], r["impl"], r["batch"]) == (op, impl, batch)]
                if rs:
                    ax.plot([r["V"] for r in rs], [r["elements_per_s"] for r in rs], style,
                            marker="o", ms=3, label=f"{impl}, batch {batch}")
        ax.set(xscale="log", yscale="log", xlabel="V", ylabel="elements / s", title=op)
        ax.legend(fontsize=7)
    fig.suptitle(f"CPU, float32, {ARGS.threads} thread(s), k={K}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    rng = np.random.default_rng(0)
    min_time = 0.05 if ARGS.quick else 0.5
    records = []
    print(f"jax {jax.__version__}, torch {torch.__version__}, threads={ARGS.threads}")
    print(f"{'op':14} {'batch':>5} {'V':>8}  {'contender':26} {'ms':>9} {'Gelem/s':>8} {'x base':>7}")
    for batch, vocab in _shapes(ARGS.quick, ARGS.max_elements):
        x = jnp.asarray(rng.normal(size=(batch, vocab)).astype(np.float32) * 3)
        labels = jnp.asarray(rng.integers(0, vocab, size=batch).astype(np.int32))
        for op, contenders in _contenders(x, labels).items():
            calls = [(lambda fn=fn, args=args: fn(*args), sync)
                     for fn, args, sync in contenders.values()]
            timed = interleaved_seconds(calls, min_time)
            for (name, _), (seconds, ratio) in zip(contenders.items(), timed):
                ours = name == next(iter(contenders))
                records.append(dict(op=op, impl=name, batch=batch, V=vocab, seconds=seconds,
                                    elements_per_s=batch * vocab / seconds,
                                    time_vs_ops=None if ours else ratio))
                speedup = "" if ours else f"{ratio:6.2f}x"
                print(f"{op:14} {batch:5} {vocab:8}  {name:26} {seconds * 1e3:9.3f} "
                      f"{batch * vocab / seconds / 1e9:8.3f} {speedup:>7}")
        del x
    out = pathlib.Path(ARGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(threads=ARGS.threads, k=K, quick=ARGS.quick, jax=jax.__version__,
                torch=torch.__version__,
                note="time_vs_ops (x base): median over interleaved rounds of contender time / "
                     "ops time in the same round (>1: ops faster); seconds: median per contender")
    out.write_text(json.dumps(dict(meta=meta, records=records), indent=1))
    _plot(records, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
