"""from_torch on models with their own forward: conversion time, and the converted model's
compiled training step against torch eager on the same model.

Run:  .venv/bin/python benchmarks/interop.py [--quick]      (about 2-3 minutes; --quick < 1)

1. Conversion: `dl.interop.from_torch(resnet50_twin, (x,))` for the torchvision-style
   ResNet-50 of `jaxdl.models` (25.6M parameters, its own forward): the first call (includes
   torch.export's one-time start-up) and the median of 3 more.
2. Training step (SGD, momentum 0.9, cross-entropy), torch eager vs the converted model
   under `dl.jit` vs jaxdl's hand-written port of the same model (`jaxdl.models`), same
   weights and batches: a ResNet-18 twin (width 0.5, batch 32, 32x32 images) and a GPT
   twin (4 layers, d_model 128, batch 8, 64 tokens, dropout 0).
   Medians of interleaved rounds (torch, jaxdl, torch, ...), one thread on each side,
   compile time reported separately.

Writes benchmarks/results/interop.json.
"""

import argparse
import statistics
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from _timing import machine, pin_threads, write_json  # noqa: E402

pin_threads(1)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import models  # noqa: E402

torch.set_num_threads(1)


def conversion_seconds(repeats):
    torch.manual_seed(0)
    twin = models.model_entry("resnet50").torch_twin()
    x = torch.randn(2, 3, 64, 64)
    start = time.perf_counter()
    dl.interop.from_torch(twin, (x,))
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        dl.interop.from_torch(twin, (x,))
        runs.append(time.perf_counter() - start)
    return {"model": "resnet50 twin (25.6M parameters)", "first_s": first,
            "median_s": statistics.median(runs), "repeats": repeats}


CASES = {  # name: (jaxdl.models name, its arguments, batch maker)
    "resnet18": ("resnet18", {"num_classes": 10, "width": 0.5},
                 lambda rng: (rng.standard_normal((32, 3, 32, 32), np.float32),
                              rng.integers(0, 10, 32))),
    "gpt": ("gpt", {"dropout": 0.0, "tie_weights": False},
            lambda rng: (rng.integers(0, 256, (8, 64)), rng.integers(0, 256, (8, 64)))),
}


def _jaxdl_step(model, loss_fn):
    opt = dl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    @dl.jit
    def step(model, opt, x, y):
        def objective(m):
            out = m(x)
            return loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss, grads = dl.value_and_grad(objective)(model)
        opt.step(grads)
        return loss

    return lambda x, y: step(model, opt, x, y)


def _timed(fn, batches, steps):
    start = time.perf_counter()
    for i in range(steps):
        out = fn(*batches[i % len(batches)])
    if isinstance(out, jax.Array):  # torch eager has finished when it returns
        out.block_until_ready()
    return (time.perf_counter() - start) / steps


def step_times(name, rounds, steps):
    """torch eager, the converted model and jaxdl's hand-written twin (`jaxdl.models`), all
    from the same weights: the last shows what the conversion itself costs (nothing, if the
    converted graph is as good as a hand port)."""
    model_name, kwargs, make_batch = CASES[name]
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    twin = models.model_entry(model_name).torch_twin(**kwargs).train()
    batches = [make_batch(rng) for _ in range(4)]
    converted = dl.interop.from_torch(twin, (torch.as_tensor(batches[0][0]),)).train()
    native = models.get_model(model_name, **kwargs)
    native.load_state_dict(twin.state_dict())
    native.train()
    t_opt = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)
    t_loss_fn, loss_fn = torch.nn.CrossEntropyLoss(), dl.nn.CrossEntropyLoss()

    def torch_step(x, y):
        t_opt.zero_grad()
        out = twin(x)
        loss = t_loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        t_opt.step()
        return loss

    t_batches = [(torch.as_tensor(x), torch.as_tensor(y)) for x, y in batches]
    j_batches = [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches]
    contenders = {"torch_eager": (torch_step, t_batches)}
    compile_s = {}
    for label, model in (("converted_jit", converted), ("hand_port_jit", native)):
        step = _jaxdl_step(model, loss_fn)
        start = time.perf_counter()
        jax.block_until_ready(step(*j_batches[0]))
        compile_s[label] = time.perf_counter() - start
        contenders[label] = (step, j_batches)
    for fn, data in contenders.values():  # warm-up
        _timed(fn, data, 3)
    runs = {label: [] for label in contenders}
    for _ in range(rounds):  # interleaved: torch, converted, hand port, torch, ...
        for label, (fn, data) in contenders.items():
            runs[label].append(_timed(fn, data, steps))
    ms = {label: 1e3 * statistics.median(r) for label, r in runs.items()}
    return {"ms": ms, "speedup_converted_vs_torch": ms["torch_eager"] / ms["converted_jit"],
            "converted_vs_hand_port": ms["converted_jit"] / ms["hand_port_jit"],
            "compile_s": compile_s, "rounds": rounds, "steps_per_round": steps}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, steps, repeats = (3, 3, 1) if args.quick else (7, 5, 3)
    result = {"machine": machine(), "threads": 1, "conversion": conversion_seconds(repeats),
              "train_step": {}}
    print(f"ResNet-50 conversion: first {result['conversion']['first_s']:.2f} s, then "
          f"{result['conversion']['median_s']:.2f} s")
    for name in ("resnet18", "gpt"):
        r = result["train_step"][name] = step_times(name, rounds, steps)
        ms = r["ms"]
        print(f"{name}: torch eager {ms['torch_eager']:.1f} ms, converted {ms['converted_jit']:.1f}"
              f" ms ({r['speedup_converted_vs_torch']:.2f}x torch), hand port "
              f"{ms['hand_port_jit']:.1f} ms, compile {r['compile_s']['converted_jit']:.1f} s")
    print("wrote", write_json("interop.json", result))


if __name__ == "__main__":
    main()
