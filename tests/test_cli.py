"""`jaxdl train` end to end on the digits, alone and side by side with PyTorch."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from jaxdl import cli, models, nn


def run_cli(tmp_path, *extra):
    out = tmp_path / "run"
    assert cli.main(["train", "--data", "digits", "--epochs", "1", "--batch-size", "16",
                     "--quiet", "--out", str(out), *extra]) == 0
    return json.loads((out / "metrics.json").read_text()), out


def assert_same_training(metrics):
    """The torch twin saw the same weights and batches: the loss curves coincide."""
    ours = np.array(metrics["jaxdl"]["step_losses"][:50])
    theirs = np.array(metrics["torch"]["step_losses"][:50])
    assert len(ours) == len(theirs) == 50  # 1438 / 16 = 90 steps in the epoch
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    ours_acc = metrics["jaxdl"]["epochs"][-1]["test_accuracy"]
    theirs_acc = metrics["torch"]["epochs"][-1]["test_accuracy"]
    assert abs(ours_acc - theirs_acc) <= 0.5
    assert ours[-1] < ours[0]  # it learns


def test_mlp_against_torch_writes_json_and_plot(tmp_path):
    pytest.importorskip("torch")
    metrics, out = run_cli(tmp_path, "--model", "mlp", "--compare-torch", "--lr", "3e-3")
    assert_same_training(metrics)
    assert metrics["config"]["model"] == "mlp" and len(metrics["jaxdl"]["epochs"]) == 1
    assert metrics["jaxdl"]["step_time_ms"] > 0 and metrics["torch"]["step_time_ms"] > 0
    assert metrics["comparison"]["max_step_loss_rel_diff"] < 1e-4
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not hasattr(nn, "Conv2d") or not hasattr(nn, "MaxPool2d"),
                    reason="needs nn.Conv2d and nn.MaxPool2d")
def test_cnn_against_torch_with_sgd(tmp_path):
    pytest.importorskip("torch")
    metrics, _ = run_cli(tmp_path, "--model", "cnn", "--compare-torch", "--optimizer", "SGD",
                         "--lr", "0.1")
    assert_same_training(metrics)


def test_without_torch_writes_only_the_jaxdl_run(tmp_path):
    metrics, out = run_cli(tmp_path, "--model", "mlp")
    assert "torch" not in metrics and metrics["comparison"] == {}
    assert 0 <= metrics["jaxdl"]["epochs"][0]["test_accuracy"] <= 100
    assert (out / "loss_curve.png").exists()


@pytest.mark.parametrize("flag, bad, valid", [
    ("--model", "resnet1000", models.list_models()),
    ("--optimizer", "sgdx", ["adam", "adamw", "sgd"]),
    ("--data", "imagenet", ["digits"]),
])
def test_unknown_names_list_the_valid_choices(capsys, flag, bad, valid):
    args = ["train", "--model", "mlp", flag, bad]
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: '{bad}'" in err
    assert all(f"'{name}'" in err for name in valid)


@pytest.mark.parametrize("flag, bad, why", [
    ("--epochs", "0", "must be an integer >= 1, got 0"),
    ("--epochs", "-2", "must be an integer >= 1, got -2"),
    ("--batch-size", "0", "must be an integer >= 1, got 0"),
    ("--num-workers", "-1", "must be an integer >= 0, got -1"),
    ("--lr", "-1", "must be a finite number > 0, got -1"),
    ("--lr", "0", "must be a finite number > 0, got 0"),
    ("--lr", "nan", "must be a finite number > 0, got nan"),
    ("--lr", "inf", "must be a finite number > 0, got inf"),
    ("--epochs", "two", "invalid int value: 'two'"),
])
def test_bad_numbers_are_usage_errors(capsys, tmp_path, flag, bad, why):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--model", "mlp", "--out", str(tmp_path), flag, bad])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: jaxdl train") and f"argument {flag}: {why}" in err
    assert "Traceback" not in err and not any(tmp_path.iterdir())  # stopped before any work


def test_a_model_that_does_not_take_the_data_names_the_ones_that_do(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--model", "resnet18", "--data", "digits"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "model 'resnet18' does not take the digits data's inputs; models for digits: cnn, mlp" in err


def test_amp_flag(tmp_path, capsys):
    if importlib.util.find_spec("jaxdl.amp") is None:
        with pytest.raises(SystemExit):
            cli.main(["train", "--model", "mlp", "--amp", "bf16", "--out", str(tmp_path)])
        assert "--amp bf16 needs jaxdl.amp" in capsys.readouterr().err
    else:
        metrics, _ = run_cli(tmp_path, "--model", "mlp", "--amp", "bf16")
        assert np.all(np.isfinite(metrics["jaxdl"]["step_losses"]))


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "jaxdl", "train", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--compare-torch" in result.stdout and "--model" in result.stdout
