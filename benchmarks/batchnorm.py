"""Training-mode BatchNorm2d forward+backward: jaxdl against autodiff of the plain formula
and against torch, one thread each.

    python benchmarks/batchnorm.py          # about 1 min

Per shape: output and the gradients of input, weight and bias for a fixed cotangent.
jaxdl's `nn.BatchNorm2d` (custom JVP, one-pass statistics with a two-pass fallback) and
"autodiff" (the two-pass mean/variance and normalisation differentiated by JAX, jaxdl's
code before the custom JVP) under `jax.jit` with `dl.xla_compiler_options()`;
`torch.nn.BatchNorm2d` + autograd with `torch.set_num_threads(1)`. Interleaved rounds
(`_timing.interleaved_seconds`), at least 1 s per contender and shape. Writes
benchmarks/results/batchnorm.json.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402

SHAPES = [(2, 64, 112, 112), (2, 64, 56, 56), (2, 256, 56, 56), (8, 64, 32, 32),
          (16, 128, 16, 16), (8, 512, 4, 4), (2, 1024, 14, 14)]


def main():
    _timing.pin_threads(1)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import jaxdl as dl
    from jaxdl import nn

    torch.set_num_threads(1)
    options = dl.xla_compiler_options()

    def autodiff(x, w, b):
        axes = (0, 2, 3)
        mean = jnp.mean(x, axes)
        var = jnp.mean(jnp.square(x - mean.reshape(1, -1, 1, 1)), axes)
        y = (x - mean.reshape(1, -1, 1, 1)) * jax.lax.rsqrt(var.reshape(1, -1, 1, 1) + 1e-5)
        return y * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)

    def compiled(f):
        def step(x, w, b, g):
            y, pullback = jax.vjp(f, x, w, b)
            return y, *pullback(g)
        return jax.jit(step, compiler_options=options)

    def measure(shape):
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape, np.float32) * 2 + 1
        g = rng.standard_normal(shape, np.float32)
        w, b = rng.standard_normal((2, shape[1]), np.float32)

        def jaxdl_norm(x, w, b):
            return nn.functional.batch_norm(x, None, None, w, b, training=True)

        args = [jnp.asarray(a) for a in (x, w, b, g)]
        ours, plain = compiled(jaxdl_norm), compiled(autodiff)
        for got, want in zip(ours(*args), plain(*args)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-3, atol=1e-3)
        tbn = torch.nn.BatchNorm2d(shape[1])
        with torch.no_grad():
            tbn.weight.copy_(torch.tensor(w))
            tbn.bias.copy_(torch.tensor(b))
        tx, tg = torch.tensor(x), torch.tensor(g)

        def torch_step():
            xg = tx.detach().requires_grad_(True)
            tbn.weight.grad = tbn.bias.grad = None
            tbn(xg).backward(tg)
            return xg.grad

        (t_torch, _), (t_ours, r_ours), (t_plain, r_plain) = _timing.interleaved_seconds(
            [(torch_step, lambda r: None), (lambda: ours(*args), jax.block_until_ready),
             (lambda: plain(*args), jax.block_until_ready)], min_time=1.0)
        row = {"shape": shape, "torch_ms": 1e3 * t_torch, "jaxdl_ms": 1e3 * t_ours,
               "autodiff_ms": 1e3 * t_plain, "torch_over_jaxdl": 1 / r_ours,
               "torch_over_autodiff": 1 / r_plain}
        print(f"{str(shape):18s} torch {row['torch_ms']:6.2f} ms | jaxdl {row['jaxdl_ms']:6.2f} ms "
              f"({row['torch_over_jaxdl']:.2f}x) | autodiff {row['autodiff_ms']:6.2f} ms "
              f"({row['torch_over_autodiff']:.2f}x)", flush=True)
        return row

    rows = [measure(shape) for shape in SHAPES]
    print(_timing.write_json("batchnorm.json", {**_timing.machine(), "threads": 1, "rows": rows}))


if __name__ == "__main__":
    main()
