"""The result table, metrics.json and loss-curve plot of `jaxdl train`."""

import json

import numpy as np

from jaxdl._extras import require


def max_relative_difference(a, b) -> float:
    """max over steps of |a - b| / max(|b|, tiny): how far the two loss curves drift apart."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12))) if len(a) else 0.0


def comparison(results) -> dict:
    """Per-step loss differences between jaxdl and torch (empty without a torch run)."""
    if "torch" not in results:
        return {}
    ours, theirs = results["jaxdl"]["step_losses"], results["torch"]["step_losses"]
    return {"max_step_loss_abs_diff": float(np.max(np.abs(np.subtract(ours, theirs)))),
            "max_step_loss_rel_diff": max_relative_difference(ours, theirs)}


def print_table(results):
    names = list(results)
    last = {name: results[name]["epochs"][-1] for name in names}
    rows = [
        ("train loss (last epoch)", [f"{last[n]['train_loss']:.4f}" for n in names]),
        ("test loss", [f"{last[n]['test_loss']:.4f}" for n in names]),
        ("test accuracy", [f"{last[n]['test_accuracy']:.2f}%" for n in names]),
        ("time per step (median)", [_ms(results[n]["step_time_ms"]) for n in names]),
        ("first step (jaxdl: compile)", [f"{results[n]['first_step_s']:.2f} s" for n in names]),
    ]
    if "torch" in results:
        rows.append(("torch threads", ["", str(results["torch"]["num_threads"])]))
    width = max(len(label) for label, _ in rows)
    print(f"{'':{width}}  " + "  ".join(f"{n:>12}" for n in names))
    for label, cells in rows:
        print(f"{label:{width}}  " + "  ".join(f"{c:>12}" for c in cells))
    diff = comparison(results)
    if diff:
        print(f"max per-step loss difference: {diff['max_step_loss_abs_diff']:.3g} absolute, "
              f"{diff['max_step_loss_rel_diff']:.3g} relative "
              f"over {len(results['jaxdl']['step_losses'])} steps")


def _ms(value):
    return "-" if value is None else f"{value:.3f} ms"


def write_outputs(results, config, out):
    """Writes out/metrics.json (config, both runs, their difference) and out/loss_curve.png."""
    metrics = {"config": config, **results, "comparison": comparison(results)}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    matplotlib = require("matplotlib", "data", "jaxdl train's loss-curve plot")

    matplotlib.use("Agg")  # files only: no display on servers and in tests
    import matplotlib.pyplot as plt

    fig, (steps_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for (name, run), style in zip(results.items(), ("-", "--")):
        steps_ax.plot(run["step_losses"], style, label=name, linewidth=1)
        epochs = [e["epoch"] for e in run["epochs"]]
        acc_ax.plot(epochs, [e["test_accuracy"] for e in run["epochs"]], style + "o", label=name)
    steps_ax.set(xlabel="step", ylabel="training loss", yscale="log",
                 title=f"{config['model']} on {config['data']}")
    acc_ax.set(xlabel="epoch", ylabel="test accuracy (%)", xticks=epochs)
    for ax in (steps_ax, acc_ax):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "loss_curve.png", dpi=100)
    plt.close(fig)
