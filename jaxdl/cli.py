"""`jaxdl train`: the main job, optionally side by side with its PyTorch twin.

    jaxdl train --model cnn --data digits --epochs 5 --compare-torch --out runs/demo

Trains a registered model (`jaxdl.models`) with a compiled `dl.jit` step, shows
a tqdm bar per epoch, evaluates on the test split after each epoch, prints a
result table and writes `metrics.json` and `loss_curve.png` to `--out`. With
`--compare-torch` the PyTorch twin starts from the same initial weights
(state_dict copy) and trains on the very same batches, in the same order.
"""

import argparse
import contextlib
import importlib.util
import math
import pathlib
import sys
import time

import numpy as np

from jaxdl._extras import require


def _optimizers():
    from jaxdl import optim

    classes = (getattr(optim, name) for name in optim.__all__)
    return {cls.__name__.lower(): cls for cls in classes
            if isinstance(cls, type) and issubclass(cls, optim.Optimizer)
            and cls is not optim.Optimizer}


def _datasets():
    from jaxdl.data import datasets

    return {"digits": datasets.digits}


# argparse types: a bad value is a usage error (exit status 2), never a traceback later.
def _int_at_least(low: int):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from jaxdl import models

    parser = argparse.ArgumentParser(prog="jaxdl", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a model, optionally against PyTorch")
    train.add_argument("--model", required=True, choices=models.list_models())
    train.add_argument("--data", default="digits", choices=sorted(_datasets()))
    train.add_argument("--epochs", type=_int_at_least(1), default=5)
    train.add_argument("--batch-size", type=_int_at_least(1), default=32)
    train.add_argument("--lr", type=_positive_float, default=1e-3)
    train.add_argument("--optimizer", default="adam", type=str.lower,
                       choices=sorted(_optimizers()))
    train.add_argument("--amp", choices=["bf16"], default=None,
                       help="mixed precision through jaxdl.amp.autocast")
    train.add_argument("--compare-torch", action="store_true",
                       help="train the PyTorch twin on the same weights and batches")
    train.add_argument("--num-workers", type=_int_at_least(0), default=0)
    train.add_argument("--out", default=None, help="output directory (default runs/MODEL-DATA)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def main(argv=None) -> int:
    """Entry point of the `jaxdl` console script and `python -m jaxdl`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.amp and importlib.util.find_spec("jaxdl.amp") is None:
        parser.error("--amp bf16 needs jaxdl.amp, which this installation does not have yet")
    if args.compare_torch and importlib.util.find_spec("torch") is None:
        parser.error("--compare-torch needs PyTorch: pip install 'jaxdl[torch]'")
    from jaxdl import models

    if args.data not in models.model_entry(args.model).datasets:
        parser.error(f"model '{args.model}' does not take the {args.data} data's inputs; models "
                     f"for {args.data}: {', '.join(models.models_for(args.data))}")
    if args.compare_torch:
        torch = require("torch", "torch", "jaxdl train --compare-torch")

        if models.model_entry(args.model).torch_twin is None:
            parser.error(f"--compare-torch: model '{args.model}' has no registered PyTorch twin")
        optimizer = _optimizers()[args.optimizer].__name__
        if not hasattr(torch.optim, optimizer):
            parser.error(f"--compare-torch: torch.optim has no {optimizer}")
    out = pathlib.Path(args.out or f"runs/{args.model}-{args.data}")
    out.mkdir(parents=True, exist_ok=True)
    results = _train(args)
    from jaxdl._cli_report import print_table, write_outputs

    print_table(results)
    write_outputs(results, vars(args), out)
    print(f"wrote {out / 'metrics.json'} and {out / 'loss_curve.png'}")
    return 0


class _Run:
    """One side's record: per-step losses and times, per-epoch evaluation."""

    def __init__(self, name):
        self.name = name
        self.step_losses, self.step_times, self.epochs = [], [], []

    def summary(self):
        times = self.step_times
        return {"step_losses": self.step_losses, "epochs": self.epochs,
                "first_step_s": times[0] if times else None,
                "step_time_ms": 1e3 * float(np.median(times[1:])) if len(times) > 1 else None}


def _timed(fn, *args):
    start = time.perf_counter()
    loss = float(fn(*args))  # float() waits for the result
    return loss, time.perf_counter() - start


def _train(args):
    import jax.numpy as jnp
    tqdm = require("tqdm", "data", "jaxdl train").tqdm

    import jaxdl as dl
    from jaxdl import data, models, nn

    entry = models.model_entry(args.model)
    load = _datasets()[args.data]
    train_set, test_set = load("train"), load("test")
    loader = data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                             seed=args.seed, num_workers=args.num_workers)
    test_loader = data.DataLoader(test_set, batch_size=512)

    dl.manual_seed(args.seed)
    model = entry.build()
    opt = _optimizers()[args.optimizer](model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    autocast = contextlib.nullcontext
    if args.amp:
        from jaxdl import amp

        def autocast():
            return amp.autocast(dtype=jnp.bfloat16)


    @dl.jit
    def train_step(model, opt, x, y):
        def loss_of(m):
            with autocast():
                return loss_fn(m(x), y)

        loss, grads = dl.value_and_grad(loss_of)(model)
        opt.step(grads)
        return loss

    @dl.jit
    def eval_step(model, x, y):
        with autocast():
            logits = model(x)
        return loss_fn(logits, y) * y.shape[0], jnp.sum(jnp.argmax(logits, -1) == y)

    def evaluate_jax():
        model.eval()
        sums = [tuple(map(float, eval_step(model, x, y))) for x, y in test_loader]
        model.train()
        return _epoch_metrics(sums, len(test_set))

    twin = _TorchTwin(entry, model, args) if args.compare_torch else None
    runs = [_Run("jaxdl")] + ([_Run("torch")] if twin else [])
    evaluators = [evaluate_jax] + ([lambda: twin.evaluate(test_loader, len(test_set))]
                                   if twin else [])
    for epoch in range(args.epochs):
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{args.epochs}", disable=args.quiet,
                   leave=False, file=sys.stdout)
        for x, y in bar:
            loss, seconds = _timed(train_step, model, opt, x, y)
            runs[0].step_losses.append(loss)
            runs[0].step_times.append(seconds)
            if twin:
                loss, seconds = _timed(twin.step, np.array(x), np.array(y))
                runs[1].step_losses.append(loss)
                runs[1].step_times.append(seconds)
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        for run, evaluate in zip(runs, evaluators):
            metrics = evaluate()
            metrics["train_loss"] = float(np.mean(run.step_losses[-len(loader):]))
            run.epochs.append({"epoch": epoch + 1, **metrics})
        tqdm.write(f"epoch {epoch + 1}: " + " | ".join(
            f"{run.name} train loss {run.epochs[-1]['train_loss']:.4f} test acc "
            f"{run.epochs[-1]['test_accuracy']:.2f}%" for run in runs), file=sys.stdout)
    loader.close()
    results = {run.name: run.summary() for run in runs}
    if twin:
        results["torch"]["num_threads"] = twin.num_threads
    return results


def _epoch_metrics(sums, count):
    loss_sum = sum(s[0] for s in sums)
    correct = sum(s[1] for s in sums)
    return {"test_loss": loss_sum / count, "test_accuracy": 100.0 * correct / count}


class _TorchTwin:
    """The PyTorch model and optimizer, started from the jaxdl model's initial weights."""

    def __init__(self, entry, model, args):
        torch = require("torch", "torch", "jaxdl train --compare-torch")

        self.torch = torch
        self.num_threads = torch.get_num_threads()
        self.model = entry.torch_twin()
        self.model.load_state_dict({k: torch.from_numpy(np.array(v))
                                    for k, v in model.state_dict().items()})
        optimizer = _optimizers()[args.optimizer].__name__
        self.opt = getattr(torch.optim, optimizer)(self.model.parameters(), lr=args.lr)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.amp
                         else contextlib.nullcontext)

    def step(self, x, y):
        torch = self.torch
        self.opt.zero_grad()
        with self.autocast():
            loss = self.loss_fn(self.model(torch.from_numpy(x)), torch.from_numpy(y).long())
        loss.backward()
        self.opt.step()
        return loss.item()

    def evaluate(self, loader, count):
        torch = self.torch
        self.model.eval()
        sums = []
        with torch.no_grad(), self.autocast():
            for x, y in loader:
                y = torch.from_numpy(np.array(y)).long()
                logits = self.model(torch.from_numpy(np.array(x)))
                sums.append((self.loss_fn(logits.float(), y).item() * len(y),
                             (logits.argmax(-1) == y).sum().item()))
        self.model.train()
        return _epoch_metrics(sums, count)


if __name__ == "__main__":
    sys.exit(main())
