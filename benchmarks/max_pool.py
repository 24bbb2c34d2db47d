"""Max pooling forward+backward: jaxdl's F.max_pool2d (gradient per stride phase) against
the strided-slice chain differentiated by autodiff (jaxdl's previous formulation) and torch
eager (max_pool2d + autograd), one core each, on the pools of ResNet/AlexNet/VGG/GoogLeNet.

    python benchmarks/max_pool.py [--min-time 1.0] [--out benchmarks/results/max_pool.json]

The process is pinned to one core before jax/torch are imported; torch.set_num_threads(1).
Each shape times the three side by side (interleaved rounds, medians, compile excluded);
about 1-2 minutes in all with the default --min-time.
"""

import argparse

from _timing import interleaved_seconds, machine, pin_threads, write_json

pin_threads(1)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import jaxdl as dl  # noqa: E402
import jaxdl.nn.functional as F  # noqa: E402
from jaxdl.nn._pool import _window_geometry  # noqa: E402
from jaxdl.nn._windows import window_views  # noqa: E402

torch.set_num_threads(1)

SHAPES = [  # (input shape, kernel, stride, padding, ceil_mode)
    ((2, 64, 112, 112), 3, 2, 1, False),  # ResNet stem at 224 px
    ((8, 64, 32, 32), 3, 2, 1, False),
    ((16, 64, 16, 16), 3, 2, 1, False),
    ((2, 64, 224, 224), 2, 2, 0, False),  # VGG
    ((8, 128, 32, 32), 2, 2, 0, False),
    ((2, 64, 55, 55), 3, 2, 0, False),  # AlexNet
    ((2, 192, 56, 56), 3, 2, 1, True),  # GoogLeNet
]


def strided_chain(x, k, s, p, ceil):
    """The previous formulation: autodiff transposes each strided slice into an interior pad."""
    k, s, pairs, d, outs = _window_geometry(x, 2, k, s, p, 1, ceil)
    x = jnp.pad(x, [(0, 0)] * 2 + pairs, constant_values=-jnp.inf)
    out = None
    for view in window_views(x, 2, k, d, s, outs):
        out = view if out is None else jnp.where((view > out) | jnp.isnan(view), view, out)
    return out


def time_shape(shape, k, s, p, ceil, options, min_time):
    """(torch, jaxdl, strided chain) seconds and speeds relative to torch, side by side."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    ct = torch.randn_like(torch.nn.functional.max_pool2d(xt.detach(), k, s, p, ceil_mode=ceil))

    def torch_step():
        out = torch.nn.functional.max_pool2d(xt, k, s, p, ceil_mode=ceil)
        return torch.autograd.grad(out, xt, ct)[0]

    xj, ctj = jnp.asarray(x), jnp.asarray(ct.numpy())
    calls = [(torch_step, lambda r: None)]
    for pool in (lambda a: F.max_pool2d(a, k, s, p, ceil_mode=ceil),
                 lambda a: strided_chain(a, k, s, p, ceil)):
        step = jax.jit(lambda a, c, pool=pool: jax.vjp(pool, a)[1](c)[0])
        step = step.lower(xj, ctj).compile(options)
        np.testing.assert_allclose(np.asarray(step(xj, ctj)), torch_step().numpy(),
                                   rtol=1e-5, atol=1e-6)
        calls.append((lambda step=step: step(xj, ctj), jax.block_until_ready))
    return interleaved_seconds(calls, min_time)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--out", default="max_pool.json")
    args = parser.parse_args()
    options = dl.xla_compiler_options()
    rows = []
    for shape, k, s, p, ceil in SHAPES:
        (t_torch, _), (t_phase, r_phase), (t_chain, r_chain) = time_shape(
            shape, k, s, p, ceil, options, args.min_time)
        row = dict(shape=shape, kernel=k, stride=s, padding=p, ceil_mode=ceil,
                   torch_ms=t_torch * 1e3, jaxdl_ms=t_phase * 1e3, strided_chain_ms=t_chain * 1e3,
                   jaxdl_speed_vs_torch=1 / r_phase, strided_chain_speed_vs_torch=1 / r_chain)
        rows.append(row)
        print(f"{shape} k{k} s{s} p{p}{' ceil' if ceil else ''}: torch {row['torch_ms']:.2f} ms, "
              f"jaxdl {row['jaxdl_ms']:.2f} ms ({row['jaxdl_speed_vs_torch']:.2f}x torch's speed), "
              f"strided chain {row['strided_chain_ms']:.2f} ms "
              f"({row['strided_chain_speed_vs_torch']:.2f}x)", flush=True)
    print(write_json(args.out, dict(machine(), rows=rows)))


if __name__ == "__main__":
    main()
