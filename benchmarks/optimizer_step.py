"""One optimizer step over a reference model's parameters: jaxdl's `opt.step` under `dl.jit`
with the state stored flat and in the parameters' shapes (as it is by default), against torch's
step.

    python benchmarks/optimizer_step.py                 # about 1 min
    python benchmarks/optimizer_step.py --threads 2

Per model and optimizer (SGD with momentum 0.9, AdamW): fixed gradients, the step compiled
alone (its parameters and state donated, as in a training step), torch's `opt.step()` on the
twin with the same gradients set. Interleaved rounds (`_timing.interleaved_seconds`), at least
1 s per contender. The "flat" contender is the same optimizer built with
`Optimizer._flat_state = True`; the "shaped" one keeps each state in its parameter's shape, so
XLA's CPU loops run over (O, C, 3, 3) (docs/design.md, "The optimizer's state stored flat" and
"The flat state in training steps"). Writes
benchmarks/results/optimizer_step_{1,2}core.json.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _timing  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v2")
OPTIMIZERS = {"SGD": dict(lr=0.01, momentum=0.9), "AdamW": dict(lr=1e-3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="on each side")
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS))
    args = parser.parse_args()
    _timing.pin_threads(args.threads)
    import jax
    import torch

    import jaxdl as dl
    from jaxdl import models, optim
    from jaxdl.optim._optimizer import Optimizer

    torch.set_num_threads(args.threads)

    def jaxdl_step(name, opt_name, flat):
        with _timing.overridden([(Optimizer, "_flat_state", flat)]):  # read when built
            model = models.model_entry(name).build()
            opt = getattr(optim, opt_name)(model.parameters(), **OPTIMIZERS[opt_name])
        grads = dl.grad(lambda m: sum((p * 1e-3).sum() for p in m.parameters()))(model)

        @dl.jit
        def step(model, opt, grads):
            opt.step(grads)

        return lambda: step(model, opt, grads), lambda _: jax.block_until_ready(opt._store.values)

    def torch_step(name, opt_name):
        twin = models.model_entry(name).torch_twin()
        for p in twin.parameters():
            p.grad = torch.full_like(p, 1e-3)
        opt = getattr(torch.optim, opt_name)(twin.parameters(), **OPTIMIZERS[opt_name])
        return opt.step, lambda _: None

    rows = []
    for name in args.models:
        count = sum(p.numel() for p in models.model_entry(name).torch_twin().parameters())
        for opt_name in OPTIMIZERS:
            calls = [jaxdl_step(name, opt_name, True), jaxdl_step(name, opt_name, False),
                     torch_step(name, opt_name)]
            (flat, _), (shaped, _), (eager, _) = _timing.interleaved_seconds(calls, 1.0)
            row = {"model": name, "parameters": count, "optimizer": opt_name,
                   "flat_ms": round(flat * 1e3, 2), "shaped_ms": round(shaped * 1e3, 2),
                   "torch_ms": round(eager * 1e3, 2)}
            rows.append(row)
            print(f"{name:13s} {opt_name:6s} {count / 1e6:5.1f}M  flat {row['flat_ms']:7.2f} ms  "
                  f"shaped {row['shaped_ms']:7.2f} ms  torch {row['torch_ms']:7.2f} ms")
    path = _timing.write_json(f"optimizer_step_{args.threads}core.json", {
        **_timing.machine(), "threads": args.threads, "rows": rows,
        "what": "one optimizer step under dl.jit, state flat / in the parameters' shapes, "
                "against torch's opt.step() with the same gradients"})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
