"""Winograd's two block sizes per 3x3 layer: forward+backward of F(2x2, 3x3), F(4x4, 3x3) and
the lowering the rule picks, against torch's Conv2d, in one process.

    python benchmarks/winograd.py                       # one core, the layers of docs/design.md
    python benchmarks/winograd.py --threads 2 --layers 8,64,64,64 16,128,8,256

A layer is N,C,H,O: N images of C channels on an H x H map, 3x3 kernel, stride 1, padding 1,
O output channels. Each contender is the input and weight gradients and the output under one
`jax.jit` (jaxdl's compiler options), timed in interleaved rounds with torch's
`conv2d` + `autograd.grad` (`_timing.interleaved_seconds`). Prints a Markdown table (ms; the
rule's lowering by name) with each contender's largest error against torch relative to the
largest value; writes nothing. This is the table of docs/design.md, "Winograd with 4x4 output
blocks".
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402

# docs/design.md's layers: VGG's, ResNet's and GoogLeNet's 3x3 stride-1 layers at 32-224 px
LAYERS = ["8,64,64,64", "16,64,32,64", "2,64,56,64", "2,128,28,128", "2,96,28,128",
          "16,128,16,128", "8,256,16,256", "2,512,28,512", "8,64,16,64", "16,64,8,192",
          "16,128,8,256", "16,256,8,256", "8,128,8,128", "8,512,8,512", "2,256,14,256"]


def layer(text):
    sizes = tuple(int(v) for v in text.split(","))
    if len(sizes) != 4:
        raise argparse.ArgumentTypeError(f"a layer is N,C,H,O (four integers), got {text!r}")
    return sizes


def time_layer(n, c, h, o, max_seconds):
    """For one layer: the rule's lowering, and the ms and error against torch of F(2x2, 3x3),
    F(4x4, 3x3) and the rule's lowering, then torch's ms."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import jaxdl as dl
    from jaxdl.nn import _conv_cpu, _winograd
    from jaxdl.nn import functional as F

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, h), dtype=np.float32)
    w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    dy = rng.standard_normal((n, o, h, h), dtype=np.float32)
    padding = ((1, 1), (1, 1))
    rule = _conv_cpu.plan((n, h, h, c), (o, c, 3, 3), (1, 1), padding, (1, 1), 1).forward
    chains = _conv_cpu.winograd_chains()  # as the lowering runs them on these cores
    convs = [lambda a, b: _winograd.conv(a, b, padding, 2, chains),
             lambda a, b: _winograd.conv(a, b, padding, 4, chains),
             lambda a, b: F.conv2d(a, b, padding=1)]

    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tdy = torch.tensor(dy)

    def torch_pass():
        y = torch.nn.functional.conv2d(tx, tw, padding=1)
        return (y, *torch.autograd.grad(y, (tx, tw), tdy))

    expected = [t.detach().numpy() for t in torch_pass()]
    args = [jnp.asarray(a) for a in (x, w, dy)]
    calls, errors = [], []
    for conv in convs:
        def value_and_grads(a, b, g, conv=conv):
            y, vjp = jax.vjp(conv, a, b)
            return (y, *vjp(g))
        step = jax.jit(value_and_grads, compiler_options=dl.xla_compiler_options())
        got = step(*args)
        errors.append(max(float(np.abs(np.asarray(v) - e).max() / np.abs(e).max())
                          for v, e in zip(got, expected)))
        calls.append((lambda step=step: step(*args), jax.block_until_ready))
    calls.append((torch_pass, lambda out: out))
    seconds = [s for s, _ in _timing.interleaved_seconds(calls, max_seconds)]
    return rule, [(s * 1e3, err) for s, err in zip(seconds, errors)], seconds[-1] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", type=layer, default=[layer(t) for t in LAYERS])
    parser.add_argument("--threads", type=int, default=1, help="on each side")
    parser.add_argument("--max-seconds", type=float, default=1.0,
                        help="timed seconds per contender and layer, at least")
    args = parser.parse_args()
    cores = _timing.pin_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {_timing.machine()['machine']}, "
          f"{args.threads} thread(s) on each side (cores {cores})\n")
    print("| layer (N, C, map) -> O | F(2x2, 3x3) ms | F(4x4, 3x3) ms | rule ms | torch ms "
          "| errors F(2x2) / F(4x4) / rule |")
    print("|---|---|---|---|---|---|")
    for n, c, h, o in args.layers:
        rule, ours, torch_ms = time_layer(n, c, h, o, args.max_seconds)
        times = " | ".join(f"{ms:.2f}" for ms, _ in ours)
        errors = " / ".join(f"{err:.1e}" for _, err in ours)
        print(f"| ({n}, {c}, {h}x{h}) -> {o} | {times} ({rule}) | {torch_ms:.2f} | {errors} |",
              flush=True)


if __name__ == "__main__":
    main()
