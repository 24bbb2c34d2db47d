"""dl.save / dl.load: exact resume, all-or-nothing loads, atomic saves, clear errors."""

import os
import signal
import subprocess
import sys
import textwrap
import zipfile

import jax.numpy as jnp
import numpy as np
import pytest

import jaxdl as dl
from jaxdl import nn, optim
from jaxdl._checkpoint import CheckpointError


def build(seed):
    dl.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=60)
    scaler = dl.amp.GradScaler(init_scale=2.0**8, growth_interval=4)
    return {"model": model, "opt": opt, "scheduler": scheduler, "scaler": scaler}


@dl.jit
def train_step(model, opt, scheduler, scaler, x, y):
    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)
    loss, grads = dl.value_and_grad(lambda m: scaler.scale(loss_fn(m)))(model)
    scaler.step(opt, grads)
    scaler.update()
    scheduler.step()
    return loss / scaler.get_scale()


def data(step):
    rng = np.random.default_rng(step)
    return rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)


def run(objects, steps):
    return [np.asarray(train_step(**objects, x=data(s)[0], y=data(s)[1])) for s in steps]


def test_resume_continues_bit_for_bit(tmp_path):
    uninterrupted = build(0)
    reference = run(uninterrupted, range(40))

    first = build(0)
    run(first, range(20))
    dl.save({**first, "step": 20, "note": "halfway"}, tmp_path / "ckpt")
    resumed = build(123)  # different weights and key streams until loaded
    restored = dl.load(tmp_path / "ckpt", target={**resumed, "step": 0, "note": ""})
    assert restored["step"] == 20 and restored["note"] == "halfway"
    assert restored["model"] is resumed["model"]
    continued = run(resumed, range(20, 40))
    for a, b in zip(continued, reference[20:]):
        assert a.tobytes() == b.tobytes()  # same losses, bit for bit (dropout keys included)
    for name, value in uninterrupted["model"].state_dict().items():
        np.testing.assert_array_equal(np.asarray(resumed["model"].state_dict()[name]), value)


def test_load_without_target_returns_plain_values(tmp_path):
    objects = build(0)
    tree = {"model": objects["model"], "arrays": [np.arange(3), jnp.ones((2, 2))], "lr": 0.5,
            "nested": {"k": None, 3: (1, "x")}}
    dl.save(tree, tmp_path / "c")
    out = dl.load(tmp_path / "c")
    assert set(out["model"]) == set(objects["model"].state_dict())
    np.testing.assert_array_equal(out["arrays"][0], np.arange(3))
    assert out["lr"] == 0.5 and out["nested"] == {"k": None, 3: (1, "x")}
    dl.save({"only": "python"}, tmp_path / "c")  # a second save replaces the first
    assert dl.load(tmp_path / "c") == {"only": "python"}
    assert sorted(os.listdir(tmp_path / "c")) == ["LATEST", "ckpt-1"]


def test_load_into_other_structure_lists_mismatches_and_changes_nothing(tmp_path):
    objects = build(0)
    run(objects, range(3))
    dl.save(objects, tmp_path / "c")
    dl.manual_seed(5)
    other = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    target = {**build(1), "model": other}
    target["opt"] = optim.AdamW(other.parameters(), lr=1e-2)
    before = {k: np.asarray(v) for k, v in other.state_dict().items()}
    scale_before = target["scaler"].get_scale()
    with pytest.raises(CheckpointError) as err:
        dl.load(tmp_path / "c", target=target)
    message = str(err.value)
    assert "model.0.weight: expected shape (16, 8), got (32, 8)" in message
    assert "exp_avg" in message
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), before[k])
    assert target["scaler"].get_scale() == scale_before  # the fitting parts were not loaded either
    with pytest.raises(CheckpointError, match="missing keys \\['extra'\\]"):
        dl.load(tmp_path / "c", target={**build(0), "extra": 1})


def test_load_refuses_another_optimizer_scheduler_or_scaler_class(tmp_path):
    saved = build(0)
    dl.save(saved, tmp_path / "fresh")  # Adam family, before its first step: no state yet
    run(saved, range(2))
    dl.save(saved, tmp_path / "stepped")
    target = build(1)
    model = target["model"]
    sgd = optim.SGD(model.parameters(), lr=0.5)
    exponential = optim.lr_scheduler.ExponentialLR(sgd, gamma=0.5)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        dl.load(tmp_path / "fresh", target={**target, "opt": sgd, "scheduler": exponential,
                                            "scaler": optim.SGD(model.parameters())})
    assert "opt: target is a SGD, saved is a AdamW" in str(err.value)
    assert "scaler: target is a SGD, saved is a GradScaler" in str(err.value)
    assert "scheduler: target is a ExponentialLR, saved is a OneCycleLR" in str(err.value)
    assert sgd.param_groups[0]["lr"] == 0.5 and "betas" not in sgd.param_groups[0]
    adam = optim.Adam(model.parameters(), lr=1e-2)
    with pytest.raises(CheckpointError, match="opt: target is a Adam, saved is a AdamW"):
        dl.load(tmp_path / "stepped", target={**target, "opt": adam})
    assert not adam.state_dict()["state"]
    for key, value in model.state_dict().items():  # all-or-nothing: the model was not loaded
        np.testing.assert_array_equal(np.asarray(value), before[key])
    dl.load(tmp_path / "stepped", target=target)  # the same classes load


def test_bad_paths_and_corruption_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no jaxdl checkpoint"):
        dl.load(tmp_path / "nothing")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="refusing"):
        dl.save({"a": 1}, tmp_path / "user")
    dl.save(build(0), tmp_path / "c")
    latest = (tmp_path / "c" / "LATEST").read_text()
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "c" / latest) for f in fs]
    for f in files:  # truncate every data file to half its size
        with open(f, "r+b") as handle:
            handle.truncate(os.path.getsize(f) // 2)
    with pytest.raises(CheckpointError, match="corrupt or incomplete"):
        dl.load(tmp_path / "c")


KILLED_SAVER = textwrap.dedent("""
    import sys
    import threading
    import numpy as np
    import orbax.checkpoint as ocp
    import jaxdl as dl
    from jaxdl import _checkpoint

    path, stage = sys.argv[1], sys.argv[2]
    version = 0

    def pause_in_third_save(step):
        def paused(*args, **kwargs):
            if version == 3:
                print("inside 3", flush=True)
                threading.Event().wait()  # until the parent kills this process
            return step(*args, **kwargs)
        return paused

    if stage == "orbax-rename":  # data written to orbax's temporary directory, not renamed yet
        handler = ocp.CompositeCheckpointHandler
        handler.finalize = pause_in_third_save(handler.finalize)
    else:  # ckpt-3 complete, LATEST still names ckpt-2
        _checkpoint._point_latest = pause_in_third_save(_checkpoint._point_latest)
    for version in range(1, 4):
        tree = {"version": version, "w": np.full((200, 200), version, np.float32)}
        dl.save(tree, path)
        print("done", version, flush=True)
""")


@pytest.mark.parametrize("stage", ["orbax-rename", "latest-file"])
def test_save_killed_midway_leaves_previous_checkpoint_loadable(tmp_path, stage):
    path = str(tmp_path / "c")
    child = subprocess.Popen([sys.executable, "-c", KILLED_SAVER, path, stage],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = []  # the child says when it is inside its third save, and waits there
        while not lines or lines[-1] != "inside 3\n":
            lines.append(child.stdout.readline())
            assert lines[-1], f"saver exited without reaching the third save: {lines}"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert lines == ["done 1\n", "done 2\n", "inside 3\n"]
    left = set(os.listdir(path)) - {"LATEST", "ckpt-1"}  # saves 1 and 2 wrote ckpt-0, ckpt-1
    assert left and all(entry.startswith("ckpt-2") for entry in left), left  # the killed save's
    out = dl.load(path)
    assert out["version"] == 2 and np.all(out["w"] == 2)
    written = dl.save({"version": 4}, path)  # the next save clears what the killed one left
    assert sorted(os.listdir(path)) == ["LATEST", os.path.basename(written)]
    assert dl.load(path) == {"version": 4}


# ---- .pth files written by torch ---------------------------------------------------------------

def _torch_files(tmp_path):
    import torch

    torch.manual_seed(0)
    base = torch.randn(4, 6)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4))
    state = net.state_dict()  # float32 weights, int64 num_batches_tracked, _metadata
    state.update({
        "half": torch.randn(3, 5).half(), "bf16": torch.randn(2, 7).bfloat16(),
        "long": torch.arange(10), "bool": torch.tensor([True, False]),
        "transposed": base.t(), "strided": base[1:, ::2], "shared": base, "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
    })
    path = tmp_path / "weights.pth"
    torch.save(state, path)
    return path, state


def test_pth_files_load_with_identical_values(tmp_path):
    import torch

    path, state = _torch_files(tmp_path)
    loaded = dl.interop.load_torch_state_dict(path)
    assert list(loaded) == list(state)
    for key, value in state.items():
        want = value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
        got = loaded[key]
        assert got.shape == tuple(value.shape), key
        assert str(got.dtype) == str(value.dtype).removeprefix("torch.").replace("long", "int64") \
            .replace("half", "float16"), key
        np.testing.assert_array_equal(np.asarray(got, want.dtype), want, err_msg=key)
    dl.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4))
    model.load_state_dict({k: loaded[k] for k in ("0.weight", "0.bias")})
    np.testing.assert_array_equal(np.asarray(model[0].weight), state["0.weight"].numpy())


def test_pth_refuses_code_and_reports_corruption(tmp_path):
    import torch

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo hacked",))

    evil = tmp_path / "evil.pth"
    torch.save({"w": torch.ones(2), "x": Evil()}, evil)
    with pytest.raises(ValueError, match="refusing to load global 'posix.system'"):
        dl.interop.load_torch_state_dict(evil)
    path, _ = _torch_files(tmp_path)
    data = path.read_bytes()
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a torch zip archive"):
        dl.interop.load_torch_state_dict(truncated)
    short = tmp_path / "short_storage.pth"  # a valid zip whose first storage lost its tail
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(short, "w") as dst:
        for name in src.namelist():
            blob = src.read(name)
            dst.writestr(name, blob[:8] if name.endswith("/data/0") else blob)
    with pytest.raises(ValueError, match="truncated"):
        dl.interop.load_torch_state_dict(short)
    legacy = tmp_path / "legacy.pth"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match="_use_new_zipfile_serialization=False"):
        dl.interop.load_torch_state_dict(legacy)


def test_loader_iterator_state_is_saved_with_the_rest(tmp_path):
    from jaxdl.data import DataLoader, TensorDataset

    def loader():
        data = TensorDataset(np.arange(40, dtype=np.float32).reshape(20, 2))
        return DataLoader(data, batch_size=4, shuffle=True, seed=7)

    first = loader()
    batches = iter(first)
    next(batches)
    next(batches)
    dl.save({"loader": first, "step": 2}, tmp_path / "c")  # mid-epoch
    expected = [np.asarray(b[0]) for b in batches]  # the rest of this epoch
    second = loader()
    dl.load(tmp_path / "c", target={"loader": second, "step": 0})
    got = [np.asarray(b[0]) for b in second]
    assert len(got) == len(expected) == 3
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
