"""Data parallel (shard_map and pmap), fully_shard, DDP, launcher and init: equal to one device."""

import os
import subprocess
import sys
import time
from pathlib import Path

import dist_worker
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdl as dl
from jaxdl import nn, optim
from jaxdl.distributed import data_parallel, fully_shard

WORKER = Path(dist_worker.__file__)
REPO = Path(__file__).parents[2]


def _bn_mlp():
    dl.manual_seed(1)
    # No bias before the norm: its true gradient is zero, and Adam would amplify rounding noise.
    return nn.Sequential(nn.Linear(6, 16, bias=False), nn.Unflatten(1, (16, 1)), nn.SyncBatchNorm(16),
                         nn.Flatten(), nn.Tanh(), nn.Linear(16, 3))


def _cnn():
    dl.manual_seed(2)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 3))


def _batches(shape, steps=5, batch=16):
    rng = np.random.default_rng(0)
    return [(jnp.asarray(rng.standard_normal((batch, *shape)), jnp.float32),
             jnp.asarray(rng.integers(0, 3, batch))) for _ in range(steps)]


def _train(make, wrap, batches, shard=False):
    model = make()
    if shard:
        fully_shard(model)
    # SGD, not Adam: Adam's update ignores a wrong gradient scale, SGD shows it.
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = wrap(dist_worker.train_step)
    losses = [float(step(model, opt, x, y)) for x, y in batches]
    return model, np.array(losses), {k: np.asarray(v) for k, v in model.state_dict().items()}


def _assert_same_training(got, want):
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    for key, value in want[2].items():
        np.testing.assert_allclose(got[2][key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def _launch(tmp_path, *args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("XLA_FLAGS", None)
    return subprocess.run(
        [sys.executable, "-m", "jaxdl.distributed.launch", "--nproc", "2", str(WORKER), *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


def _init_in_subprocess(env_vars, timeout=60):
    code = "import jaxdl as dl; dl.distributed.init(timeout_s=3)"
    env = dict(os.environ, PYTHONPATH=str(REPO), **env_vars)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("make,shape", [(_bn_mlp, (6,)), (_cnn, (1, 8, 8))], ids=["syncbn-mlp", "cnn"])
@pytest.mark.parametrize("mode", ["shard_map", "pmap"])
def test_data_parallel_equals_single_device_on_global_batch(make, shape, mode):
    batches = _batches(shape)
    single = _train(make, dl.jit, batches)
    parallel = _train(make, lambda f: data_parallel(f, mode=mode), batches)
    _assert_same_training(parallel, single)


def test_sync_batchnorm_statistics_span_the_global_batch():
    model, *_ = _train(_bn_mlp, data_parallel, _batches((6,), steps=2))
    reference, *_ = _train(_bn_mlp, dl.jit, _batches((6,), steps=2))
    np.testing.assert_allclose(np.asarray(model[2].running_var), np.asarray(reference[2].running_var),
                               rtol=1e-5)
    assert int(model[2].num_batches_tracked) == 2


def test_ddp_wrapper_delegates_and_trains_the_wrapped_model():
    inner = dist_worker.make_model()
    ddp = nn.parallel.DistributedDataParallel(inner)
    assert ddp.module is inner
    assert list(ddp.state_dict()) == ["module." + k for k in inner.state_dict()]
    x, y = _batches((6,), steps=1)[0]
    np.testing.assert_array_equal(np.asarray(ddp(x)), np.asarray(inner(x)))
    before = np.asarray(inner[0].weight)
    opt = optim.SGD(ddp.parameters(), lr=0.1)
    data_parallel(dist_worker.train_step)(ddp, opt, x, y)
    assert not np.array_equal(np.asarray(inner[0].weight), before)


def test_dropout_masks_differ_across_shards_but_state_stays_replicated():
    drop = nn.Dropout(0.5)
    out = data_parallel(lambda m, x: m(x))(drop, jnp.ones((8, 64)))
    rows = np.asarray(out)
    assert len({r.tobytes() for r in rows}) == 8  # every shard drew its own mask
    again = np.asarray(data_parallel(lambda m, x: m(x))(drop, jnp.ones((8, 64))))
    assert not np.array_equal(rows, again)  # and the stream advanced


def test_fully_shard_trains_like_unsharded_with_parameters_split():
    batches = _batches((6,))
    plain = _train(dist_worker.make_model, dl.jit, batches)
    sharded = _train(dist_worker.make_model, dl.jit, batches, shard=True)
    _assert_same_training(sharded, plain)
    weight = sharded[0][0].weight  # (16, 6): rows split over 8 devices
    assert len(weight.sharding.device_set) == 8
    assert {s.data.shape for s in weight.addressable_shards} == {(2, 6)}


def test_indivisible_global_batch_names_both_numbers():
    model = dist_worker.make_model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"global batch of 10.*8 data shards"):
        data_parallel(dist_worker.train_step)(model, opt, jnp.ones((10, 6)), jnp.zeros(10, jnp.int32))


def test_launcher_two_processes_equal_single_process_run(tmp_path):
    out = tmp_path / "result.npz"
    result = _launch(tmp_path, str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[rank 0] rank 0 of 2 done, 8 devices" in result.stdout
    assert "[rank 1] rank 1 of 2 done, 8 devices" in result.stdout
    got = np.load(out)
    model = dist_worker.make_model()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = dl.jit(dist_worker.train_step)
    losses = [float(step(model, opt, jnp.asarray(x), jnp.asarray(y)))
              for x, y in dist_worker.global_batches()]
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    for key, value in model.state_dict().items():
        np.testing.assert_allclose(got[key], np.asarray(value), rtol=1e-5, atol=1e-6)


def test_launcher_failing_rank_stops_everyone_promptly(tmp_path):
    start = time.monotonic()
    marker = str(tmp_path / "unused.npz")
    result = _launch(tmp_path, marker, "fail", timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - start < 60  # rank 0 sleeps 120 s unless stopped
    assert "[rank 1] RuntimeError: rank 1 fails on purpose" in result.stdout
    leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_init_rejects_rank_outside_world_size():
    result = _init_in_subprocess(dict(RANK="2", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                      MASTER_PORT="29999"))
    assert result.returncode != 0
    assert "RANK=2 is not in [0, WORLD_SIZE=2)" in result.stderr


def test_init_unreachable_coordinator_fails_within_timeout():
    start = time.monotonic()
    result = _init_in_subprocess(dict(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                      MASTER_PORT="1"))
    assert result.returncode != 0
    assert time.monotonic() - start < 50
    assert "could not join the coordinator" in result.stderr
