"""benchmarks/conv_layers.py --quick: the per-layer convolution benchmark runs and writes its
JSON and plot (structure only; timings are never asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_conv_layers_quick_writes_configurations_and_summary(tmp_path):
    out = tmp_path / "conv_layers.json"
    proc = subprocess.run([sys.executable, "benchmarks/conv_layers.py", "--quick", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    assert report["threads"] == 1 and report["target"] == 0.8
    configs = report["configurations"]
    assert len(configs) == 2
    for record in configs:
        assert set(record["config"]) == {"input", "out_channels", "kernel", "stride", "padding",
                                         "dilation", "groups", "bias"}
        assert len(record["config"]["input"]) == 4
        assert record["jaxdl_ms"] > 0 and record["torch_ms"] > 0
        assert record["ratio_torch_over_jaxdl"] > 0
        assert set(record["lowering"]) == {"forward", "input_grad", "weight_grad"}
        assert all(model == "resnet18" and size == 32 for model, size, _ in record["layers"])
    # resnet18's first two distinct convolutions: the 7x7 stride-2 stem and layer1's 3x3,
    # which four layers share (deduplicated into one configuration).
    layers = sorted(layer for record in configs for _, _, layer in record["layers"])
    assert layers == ["conv1", "layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1",
                      "layer1.1.conv2"]
    (summary,) = report["summary"]
    assert summary["model"] == "resnet18" and summary["size"] == 32
    assert summary["conv_layers"] == 5
    assert summary["worst_layer"] in layers
    assert summary["worst_ratio"] == min(r["ratio_torch_over_jaxdl"] for r in configs)
    assert "| resnet18 | 32x32 (16) | 5 |" in proc.stdout


def test_collect_layers_skips_sizes_a_model_cannot_take_and_reads_torch_geometry(load_script):
    conv_layers = load_script("conv_layers")
    configs = conv_layers.collect_layers(["alexnet"], [32, 64])  # 32: below alexnet's minimum
    uses = [use for users in configs.values() for use in users]
    assert {size for _, size, _ in uses} == {64}
    assert sorted(layer for _, _, layer in uses) == [f"features.{i}" for i in (0, 10, 3, 6, 8)]
    stem = next(key for key, users in configs.items() if users[0][2] == "features.0")
    # torchvision's AlexNet stem on the batch benchmarks/models.py uses at 64 pixels
    assert stem == ((conv_layers.BATCH[64], 3, 64, 64), 64, (11, 11), (4, 4), (2, 2), (1, 1), 1,
                    True)
