"""Facade overhead: one AdamW train step as jaxdl dl.jit vs flat jax.jit vs nnx.jit vs torch eager.

Run:  .venv/bin/python benchmarks/facade_overhead.py [--quick]

Two models: a tiny MLP 32-64-64-10 (batch 16) and a deep one of 150 Linear(32, 32)
+ Tanh blocks (300 parameter arrays), to show jaxdl's per-step Python work does
not grow with the number of arrays. Everything runs single-threaded (XLA and
torch), side by side in one process; the table reports medians and ratios.
"jaxdl + state_dict()" keeps `model.state_dict()` before every step: the cost of
handed-out arrays staying readable (each is copied once before the step donates).
Runtime: about 2 minutes on an idle machine (--quick: 20 s).
"""

import argparse
import functools
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from _timing import machine, median_seconds, pin_threads, write_json  # noqa: E402

pin_threads(1)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402
from flax import nnx  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import nn, optim  # noqa: E402

torch.set_num_threads(1)
BATCH, LR = 16, 1e-3


def tiny_sizes():
    return [32, 64, 64, 10]


def deep_sizes():
    return [32] * 151


def jaxdl_step(sizes, x, y):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    model = nn.Sequential(*layers)
    opt = optim.AdamW(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()

    @dl.jit
    def step(model, opt, x, y):
        loss, grads = dl.value_and_grad(lambda m: loss_fn(m(x), y))(model)
        opt.step(grads)
        return loss

    kept = []

    def with_handles():
        kept[:] = [model.state_dict()]  # arrays handed out: copied before the step donates
        step(model, opt, x, y).block_until_ready()

    return lambda: step(model, opt, x, y).block_until_ready(), with_handles, model


def flat_step(model, x, y):
    """The same math by hand: jax.jit over a flat list of arrays, optax AdamW, buffers donated,
    compiled with the same XLA options as dl.jit."""
    params = [jnp.array(a, copy=True) for _, a in model.named_parameters()]
    tx = optax.adamw(LR, weight_decay=1e-2)
    state = [params, tx.init(params)]

    def forward(params, x):
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i].T + params[i + 1]
            if i < len(params) - 2:
                h = jnp.tanh(h)
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

    # The compiler options dl.jit uses, so that only the facade differs.
    @functools.partial(jax.jit, donate_argnums=(0, 1), compiler_options=dl.xla_compiler_options())
    def step(params, opt_state, x):
        loss, grads = jax.value_and_grad(forward)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def run():
        state[0], state[1], loss = step(state[0], state[1], x)
        loss.block_until_ready()

    return run


def nnx_step(sizes, x, y):
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List(
                [nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])]
            )

        def __call__(self, h):
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = jnp.tanh(h)
            return h

    model = MLP(nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adamw(LR, weight_decay=1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, x, y):
        def loss_fn(m):
            return optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    return lambda: step(model, opt, x, y).block_until_ready()


def torch_step(sizes, x, y):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(np.array(x)), torch.from_numpy(np.array(y)).long()

    def run():
        opt.zero_grad()
        loss = loss_fn(model(tx), ty)
        loss.backward()
        opt.step()

    return run


def measure(name, sizes, steps, repeats):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((BATCH, sizes[0])), jnp.float32)
    y = jnp.asarray(rng.integers(0, sizes[-1], BATCH), jnp.int32)
    ours, with_handles, model = jaxdl_step(sizes, x, y)
    contenders = {
        "jaxdl dl.jit": ours,
        "jaxdl + state_dict()": with_handles,
        "flat jax.jit": flat_step(model, x, y),
        "nnx.jit": nnx_step(sizes, x, y),
        "torch eager": torch_step(sizes, x, y),
    }
    times = {k: median_seconds(fn, steps, repeats) for k, fn in contenders.items()}
    arrays = len(list(model.parameters()))
    return {"model": name, "arrays": arrays, "us_per_step": {k: v * 1e6 for k, v in times.items()}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few steps, for a smoke run")
    args = parser.parse_args()
    steps, repeats = (20, 2) if args.quick else (300, 7)
    rows = [measure("tiny MLP 32-64-64-10", tiny_sizes(), steps, repeats),
            measure("deep 150 x Linear(32,32)", deep_sizes(), steps // 3 or 1, repeats)]
    print(f"{'model':28} {'arrays':>6} " + " ".join(f"{k:>14}" for k in rows[0]["us_per_step"]))
    for row in rows:
        t = row["us_per_step"]
        print(f"{row['model']:28} {row['arrays']:>6} " + " ".join(f"{v:>11.0f} us" for v in t.values()))
        ours = t["jaxdl dl.jit"]
        row["ratios"] = {
            "jaxdl / flat jax.jit": ours / t["flat jax.jit"],
            "jaxdl + state_dict() / jaxdl": t["jaxdl + state_dict()"] / ours,
            "nnx.jit / jaxdl": t["nnx.jit"] / ours,
            "torch eager / jaxdl": t["torch eager"] / ours,
        }
        print("   " + ", ".join(f"{k} = {v:.2f}x" for k, v in row["ratios"].items()))
    payload = {**machine(), "threads": "one core (CPU affinity) for XLA and torch",
               "steps": steps, "repeats": repeats, "quick": args.quick, "rows": rows}
    if not args.quick:
        print("wrote", write_json("facade_overhead.json", payload))


if __name__ == "__main__":
    main()
