"""The PyTorch paper's Table 1 on one GPU: training throughput, jaxdl `dl.jit` vs torch eager.

    python benchmarks/gpu/models.py [--out PATH] [--budget-s 110] [--dry-run]

Paszke et al. 2019 (PyTorch: An Imperative Style, High-Performance Deep Learning
Library), Table 1: AlexNet, VGG-19, ResNet-50, MobileNetV2 (images/s, 224x224),
GNMT (tokens/s) and NCF (samples/s). Each model trains with SGD (momentum 0.9) on a
synthetic batch, both sides from the same weights, in fp32 and in bf16 (autocast on
both sides); the figure is the median of interleaved rounds after warm-up, the first
step (compile) reported apart. `PAPER_PYTORCH` holds the paper's PyTorch column
(GP100 GPU) for orientation only: a different GPU and different batch sizes.

Bounded: configurations run in the order of `CONFIGS` until `--budget-s` (default 110 s)
is spent; the rest are listed as skipped. `--dry-run` runs tiny versions (width 1/8,
64x64 images, batch 2, fp32) on CPU in `DRY_ORDER` under a 25 s budget: NCF, AlexNet and
GNMT, one model of each kind of input (the configuration under way when the budget runs
out finishes).
Writes JSON to `--out` (default benchmarks/results/gpu_models.json).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# (registered model, unit, batch on the GPU, builder kwargs); sequence lengths 32 for GNMT.
CONFIGS = [("resnet50", "images/s", 64, {}), ("mobilenet_v2", "images/s", 64, {}),
           ("alexnet", "images/s", 128, {}), ("vgg19", "images/s", 32, {}),
           ("gnmt", "tokens/s", 64, {"hidden": 512}), ("ncf", "samples/s", 2**16, {})]
PAPER_PYTORCH = {"alexnet": 1547, "vgg19": 119, "resnet50": 212, "mobilenet_v2": 463,
                 "gnmt": 15512, "ncf": 5.4e6}
SEQ = 32
# --dry-run's order: cheapest first, one model of each kind of input before the rest.
DRY_ORDER = ("ncf", "alexnet", "gnmt", "mobilenet_v2", "vgg19", "resnet50")


def _items_per_batch(name, batch):
    return batch * SEQ if name == "gnmt" else batch


def _inputs(name, batch, size, rng):
    import numpy as np

    if name == "gnmt":
        return ((rng.integers(1, 256, (batch, SEQ)), rng.integers(1, 256, (batch, SEQ))),
                rng.integers(1, 256, (batch, SEQ)))
    if name == "ncf":
        return ((rng.integers(0, 6040, batch), rng.integers(0, 3706, batch)),
                rng.integers(0, 2, batch).astype(np.float32))
    return ((rng.standard_normal((batch, 3, size, size), dtype=np.float32),),
            rng.integers(0, 1000, batch))


def _loss(name, F):  # noqa: N803
    if name == "ncf":
        return F.binary_cross_entropy_with_logits
    if name == "gnmt":
        return lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy


def _steps(name, kwargs, inputs, target, dtype, device):
    import jax
    import jax.numpy as jnp
    import torch

    import jaxdl as dl
    from jaxdl import models, nn, optim

    entry = models.model_entry(name)
    dl.manual_seed(0)
    torch.manual_seed(0)
    twin = entry.torch_twin(**kwargs).to(device).train()
    model = entry.build(**kwargs).train()
    model.load_state_dict({k: v.cpu() for k, v in twin.state_dict().items()})
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    jax_loss, torch_loss = _loss(name, nn.functional), _loss(name, torch.nn.functional)
    jdtype = {"fp32": None, "bf16": jnp.bfloat16}[dtype]

    @dl.jit
    def jax_step(model, opt, inputs, target):
        def loss_of(m):
            if jdtype is None:
                return jax_loss(m(*inputs), target)
            with dl.amp.autocast(dtype=jdtype):
                return jax_loss(m(*inputs), target)

        loss, grads = dl.value_and_grad(loss_of)(model)
        opt.step(grads)
        return loss

    dev = jax.devices()[0]
    j_in = tuple(jax.device_put(jnp.asarray(x), dev) for x in inputs)
    j_y = jax.device_put(jnp.asarray(target), dev)
    t_in = tuple(torch.as_tensor(x).to(device) for x in inputs)
    t_y = torch.as_tensor(target).to(device)
    t_opt = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)

    def torch_step():
        t_opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = torch_loss(twin(*t_in), t_y)
        loss.backward()
        t_opt.step()
        return loss.item()  # synchronises

    return {"jaxdl": lambda: float(jax_step(model, opt, j_in, j_y)), "torch": torch_step}


def _measure(steps, rounds, per_round):
    first, times = {}, {k: [] for k in steps}
    for k, step in steps.items():
        start = time.perf_counter()
        step()
        first[k] = time.perf_counter() - start
        step()
    for r in range(rounds):
        for k in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
            start = time.perf_counter()
            for _ in range(per_round):
                steps[k]()
            times[k].append((time.perf_counter() - start) / per_round)
    return first, {k: statistics.median(v) for k, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_models.json"))
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    if args.dry_run:
        import os

        os.environ["JAX_PLATFORMS"] = "cpu"
    import numpy as np
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu/models.py needs a CUDA GPU (or --dry-run)")
    device = torch.device("cpu" if args.dry_run else "cuda")
    budget = args.budget_s or (25.0 if args.dry_run else 110.0)
    size, dtypes = (64, ("fp32",)) if args.dry_run else (224, ("fp32", "bf16"))
    rounds, per_round = (2, 1) if args.dry_run else (3, 3)
    start, rows = time.perf_counter(), []
    for dtype in dtypes:
        for name, unit, batch, kwargs in (sorted(CONFIGS, key=lambda c: DRY_ORDER.index(c[0]))
                                           if args.dry_run else CONFIGS):
            row = {"model": name, "dtype": dtype, "unit": unit}
            if args.dry_run:
                batch = 64 if name == "ncf" else 2
                kwargs = {"hidden": 16} if name == "gnmt" else (
                    {} if name == "ncf" else {"width_mult" if name == "mobilenet_v2" else "width": 0.125})
            row["batch"] = batch
            if time.perf_counter() - start > budget:
                rows.append({**row, "skipped": f"time budget of {budget:.0f} s spent"})
                continue
            try:
                inputs, target = _inputs(name, batch, size, np.random.default_rng(0))
                first, step_s = _measure(_steps(name, kwargs, inputs, target, dtype, device),
                                         rounds, per_round)
                items = _items_per_batch(name, batch)
                row.update({f"{k}_{unit}": items / step_s[k] for k in step_s})
                row.update({f"{k}_first_step_s": first[k] for k in first})
                row["speedup_vs_torch"] = step_s["torch"] / step_s["jaxdl"]
            except Exception as err:  # out of memory or a failure: recorded, the rest still run
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    payload = {"date": time.strftime("%Y-%m-%d"), "device": str(device) if args.dry_run
               else torch.cuda.get_device_name(0), "dry_run": args.dry_run,
               "image_size": size, "gnmt_sequence": SEQ, "paper_pytorch_gp100": PAPER_PYTORCH,
               "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n")
    print("wrote", args.out)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
