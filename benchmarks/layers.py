"""Forward+backward time per layer family: jaxdl (dl.jit) vs torch eager, one thread each.

Also `--conv`: formulations of Conv2d for XLA CPU on the 3-conv CNN train step
(batch 64, 32x32, SGD), pure JAX, against torch eager.

    python benchmarks/layers.py [--quick] [--conv] [--out benchmarks/results/layers.json]

Single thread on both sides: the process is pinned to one core (CPU affinity, set before
jax is imported) and torch.set_num_threads(1). Medians of repeats after a
warm-up; compile time is excluded from step times.
"""

import argparse
import contextlib
import json
import os
import statistics
import time

from _timing import pin_threads

pin_threads(1)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import _xla_options as xla_options  # noqa: E402
from jaxdl import nn  # noqa: E402
from jaxdl.nn import _conv as conv_module  # noqa: E402
from jaxdl.nn import _pool as pool_module  # noqa: E402

torch.set_num_threads(1)


def interleaved_medians(steps: dict, repeats: int) -> dict:
    """Median seconds per step, timing the candidates round-robin so that load changes on a
    shared machine hit all of them alike."""
    for fn in steps.values():
        fn()  # warm-up (compiles)
    times = {label: [] for label in steps}
    for _ in range(repeats):
        for label, fn in steps.items():
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(ts) for label, ts in times.items()}


def median_time(fn, repeats):
    fn()  # warm-up (compiles)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# (family, module name, constructor args, input shape) -- shapes of a small CNN / transformer.
FAMILIES = [
    ("linear", "Linear", (512, 512), (64, 512)),
    ("conv2d", "Conv2d", (32, 64, 3), (32, 32, 16, 16)),
    ("conv_transpose2d", "ConvTranspose2d", (32, 16, 3), (16, 32, 16, 16)),
    ("batchnorm2d", "BatchNorm2d", (64,), (32, 64, 16, 16)),
    ("layernorm", "LayerNorm", (256,), (64, 128, 256)),
    ("groupnorm", "GroupNorm", (8, 64), (32, 64, 16, 16)),
    ("maxpool2d", "MaxPool2d", (2,), (32, 64, 32, 32)),
    ("avgpool2d", "AvgPool2d", (3, 2, 1), (32, 64, 32, 32)),
    ("gelu", "GELU", (), (64, 128, 256)),
    ("embedding", "Embedding", (10000, 128), None),
]


def bench_family(name, args, shape, repeats):
    torch.manual_seed(0)
    t = getattr(torch.nn, name)(*args)
    j = getattr(nn, name)(*args)
    j.load_state_dict(t.state_dict())
    rng = np.random.default_rng(0)
    if shape is None:  # embedding: integer indices
        x = rng.integers(0, args[0], (64, 128))
        tx, jx = torch.tensor(x), jnp.asarray(x)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
        tx, jx = torch.tensor(x, requires_grad=True), jnp.asarray(x)

    def torch_step():
        t.zero_grad()
        t(tx).square().mean().backward()

    @dl.jit(donate=False)
    def jax_step(model, x):
        return dl.value_and_grad(lambda m: jnp.mean(jnp.square(m(x))))(model)

    def jaxdl_step():
        jax.block_until_ready(jax_step(j, jx))

    return median_time(torch_step, repeats), median_time(jaxdl_step, repeats)


# ---- Conv2d formulations on the 3-conv CNN --------------------------------------------------

def conv_nchw(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + b[:, None, None]


def conv_nhwc_inside(x, w, b):
    """NCHW API, NHWC/HWIO conv inside (transposes left for XLA to cancel between layers)."""
    y = jax.lax.conv_general_dilated(jnp.transpose(x, (0, 2, 3, 1)), jnp.transpose(w, (2, 3, 1, 0)),
                                     (1, 1), [(1, 1), (1, 1)],
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.transpose(y + b, (0, 3, 1, 2))


def conv_im2col(x, w, b):
    """Patches (N, C*k*k, H, W) then one matmul with the (O, C*k*k) weight."""
    patches = jax.lax.conv_general_dilated_patches(x, w.shape[2:], (1, 1), [(1, 1), (1, 1)],
                                                   dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = jnp.einsum("npq,op->noq", patches.reshape(x.shape[0], patches.shape[1], -1),
                   w.reshape(w.shape[0], -1))
    return y.reshape(x.shape[0], w.shape[0], *x.shape[2:]) + b[:, None, None]


def conv_nhwc_end_to_end(x, w, b):
    """Activations kept NHWC across the whole net (the model transposes once at the input)."""
    y = jax.lax.conv_general_dilated(x, jnp.transpose(w, (2, 3, 1, 0)), (1, 1), [(1, 1), (1, 1)],
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + b


def cnn_loss(conv, nhwc, params, x, y):
    if nhwc:
        x = jnp.transpose(x, (0, 2, 3, 1))
    window = (1, 2, 2, 1) if nhwc else (1, 1, 2, 2)
    for w, b in params[:3]:
        x = jax.nn.relu(conv(x, w, b))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, window, "VALID")
    logits = x.reshape(x.shape[0], -1) @ params[3][0].T + params[3][1]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))


@contextlib.contextmanager
def cpu_formulations(matmul_conv=True, sliced_pool=True, eigen_conv=True):
    """Switch jaxdl's CPU choices (docs/design.md) off for the steps traced inside:
    transposed convolutions as matrix products, max-pool by strided slices, and the
    compiler options that keep convolutions out of YNNPACK."""
    saved = conv_module._on_cpu, pool_module._MAX_SLICED_WINDOW, xla_options.xla_compiler_options
    if not matmul_conv:
        conv_module._on_cpu = lambda groups: False
    if not sliced_pool:
        pool_module._MAX_SLICED_WINDOW = 0
    if not eigen_conv:
        xla_options.xla_compiler_options = lambda: None
    try:
        yield
    finally:
        conv_module._on_cpu, pool_module._MAX_SLICED_WINDOW, xla_options.xla_compiler_options = saved


def bench_conv_formulations(repeats, batch=64):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    tnet = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 16, 10))
    x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, (batch,))
    opt = torch.optim.SGD(tnet.parameters(), lr=0.01)
    tx, ty = torch.tensor(x), torch.tensor(y)

    def torch_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(tnet(tx), ty).backward()
        opt.step()

    steps = {"torch_eager": torch_step}
    mods = [m for m in tnet if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
    params = [(jnp.asarray(m.weight.detach().numpy()), jnp.asarray(m.bias.detach().numpy()))
              for m in mods]
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    eigen = dl.xla_compiler_options()  # convolutions kept out of YNNPACK, as dl.jit does
    variants = {"nchw": (conv_nchw, False, None), "nhwc_inside": (conv_nhwc_inside, False, None),
                "im2col_dot": (conv_im2col, False, None),
                "nhwc_end_to_end": (conv_nhwc_end_to_end, True, None),
                "nchw_eigen_conv": (conv_nchw, False, eigen),
                "nhwc_end_to_end_eigen_conv": (conv_nhwc_end_to_end, True, eigen)}
    for label, (conv, nhwc, options) in variants.items():
        def loss_and_step(params, x, y, conv=conv, nhwc=nhwc):
            grads = jax.grad(lambda p: cnn_loss(conv, nhwc, p, x, y))(params)
            return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)

        step = jax.jit(loss_and_step, compiler_options=options)

        steps[label] = lambda step=step: jax.block_until_ready(step(params, jx, jy))
    jnet = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 16, 10))
    jnet.load_state_dict(tnet.state_dict())
    jopt = dl.optim.SGD(jnet.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    # The module as shipped, and with each CPU formulation switched back to plain XLA
    # (the switches only matter while the step is traced, on its first call).
    module_variants = {
        "jaxdl_nn_module": {},
        "jaxdl_ynn_conv": {"eigen_conv": False},
        "jaxdl_ynn_conv_reduce_window_pool": {"eigen_conv": False, "sliced_pool": False},
    }
    for label, switches in module_variants.items():
        @dl.jit
        def jaxdl_step(model, opt, x, y):
            loss, grads = dl.value_and_grad(lambda m: loss_fn(m(x), y))(model)
            opt.step(grads)
            return loss

        def run(jaxdl_step=jaxdl_step, switches=switches):
            with cpu_formulations(**switches):
                return jax.block_until_ready(jaxdl_step(jnet, jopt, jx, jy))

        steps[label] = run
    return interleaved_medians(steps, repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny repeat counts (smoke test)")
    parser.add_argument("--conv", action="store_true", help="only the Conv2d formulation study")
    parser.add_argument("--out", default="benchmarks/results/layers.json")
    args = parser.parse_args()
    repeats = 2 if args.quick else 20
    report = {"threads": {"torch": torch.get_num_threads(), "cores": sorted(os.sched_getaffinity(0))},
              "quick": args.quick}
    if not args.conv:
        rows = {}
        print(f"{'family':18s} {'torch ms':>9s} {'jaxdl ms':>9s} {'ratio':>7s}")
        families = FAMILIES[:3] if args.quick else FAMILIES
        for family, name, ctor, shape in families:
            t_s, j_s = bench_family(name, ctor, shape, repeats)
            rows[family] = {"torch_ms": 1e3 * t_s, "jaxdl_ms": 1e3 * j_s, "torch_over_jaxdl": t_s / j_s}
            print(f"{family:18s} {1e3 * t_s:9.2f} {1e3 * j_s:9.2f} {t_s / j_s:7.2f}")
        report["families"] = rows
    conv = bench_conv_formulations(repeats, batch=8 if args.quick else 64)
    print("3-conv CNN train step (ms):", {k: round(1e3 * v, 1) for k, v in conv.items()})
    report["cnn_step_ms"] = {k: 1e3 * v for k, v in conv.items()}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
