"""The GNMT training step with the LSTM recurrence's written-out tangent against autodiff
of the scan, one core, both in one process, interleaved rounds.

`python benchmarks/lstm.py` (about 20 s): median step time of each form, and their ratio,
into benchmarks/results/lstm.json. The autodiff form is the plain `lax.scan` of the LSTM
step that `nn.LSTM` ran before `jaxdl/nn/_lstm_scan.py` (`_rnn._lstm_scan_autodiff`;
docs/design.md).
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine, pin_threads, write_json  # noqa: E402

pin_threads(1)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdl as dl  # noqa: E402
from jaxdl import models, optim  # noqa: E402
from jaxdl.nn import _lstm_scan, _rnn  # noqa: E402

ROUNDS, STEPS = 7, 3


def gnmt_step(recurrence, batch):
    """A compiled GNMT training step (SGD with momentum) whose LSTMs run `recurrence`; the
    recurrence is looked up when the step is traced, here, by its first call."""
    _lstm_scan.lstm_scan = recurrence
    model = models.get_model("gnmt").train()
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    @dl.jit
    def step(model, opt, src, tgt, labels):
        def objective(m):
            out = m(src, tgt)
            return dl.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                  labels.reshape(-1))
        loss, grads = dl.value_and_grad(objective)(model)
        opt.step(grads)
        return loss

    float(step(model, opt, *batch))
    return lambda: float(step(model, opt, *batch))


def main():
    rng = np.random.default_rng(0)
    batch = [jnp.asarray(rng.integers(1, 256, (32, 32))) for _ in range(3)]
    written_out = _lstm_scan.lstm_scan
    steps = {"written_out": gnmt_step(written_out, batch),
             "autodiff_of_scan": gnmt_step(_rnn._lstm_scan_autodiff, batch)}
    _lstm_scan.lstm_scan = written_out
    runs = {name: [] for name in steps}
    for _ in range(ROUNDS):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(STEPS):
                step()
            runs[name].append((time.perf_counter() - start) / STEPS)
    ms = {name: 1e3 * statistics.median(r) for name, r in runs.items()}
    result = {"machine": machine(), "threads": 1, "what": "GNMT training step (32 x 32 tokens)",
              "median_ms": ms, "autodiff_over_written_out": ms["autodiff_of_scan"] /
              ms["written_out"], "rounds": ROUNDS, "steps_per_round": STEPS}
    print(f"GNMT step: written-out LSTM tangent {ms['written_out']:.1f} ms, autodiff of the "
          f"scan {ms['autodiff_of_scan']:.1f} ms ({result['autodiff_over_written_out']:.2f}x)")
    print("wrote", write_json("lstm.json", result))


if __name__ == "__main__":
    main()
