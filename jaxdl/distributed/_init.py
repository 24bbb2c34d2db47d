"""`dl.distributed.init()`: torchrun's environment variables -> `jax.distributed.initialize`."""

import os
import socket
import sys
import time

import jax

_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _int_env(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _die_on_uncaught_exception():
    """A failing rank exits at once: JAX's exit handler would wait in a shutdown barrier
    for the other ranks, so the launcher would never see the failure."""
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)

    sys.excepthook = hook


def _wait_for_coordinator(host: str, port: int, rank: int, world: int, timeout_s: float):
    """Ranks other than 0 first wait for rank 0's coordinator port to accept connections.

    JAX's client aborts the whole process (a C++ fatal error) when it cannot
    connect; probing first turns that into a Python error with a clear message.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"dl.distributed.init: rank {rank} of {world} could not join the coordinator at "
                    f"{host}:{port} within {timeout_s:.0f}s ({err}). Check that rank 0 is running "
                    "and MASTER_ADDR/MASTER_PORT are the same on every process."
                ) from None
            time.sleep(0.2)


def init(timeout_s: float = 60.0, cpu_collectives: str = "gloo") -> tuple[int, int]:
    """Join a multi-process run; returns (rank, world_size).

    Reads RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (torchrun's names, set
    by `python -m jaxdl.distributed.launch`). Without them it defers to
    `jax.distributed.initialize()`'s own settings (cluster auto-detection),
    and with neither it is a single-process run (returns (0, 1)). On CPU,
    collectives go through gloo. A coordinator that cannot be reached raises
    within `timeout_s` seconds instead of hanging.
    """
    if jax.distributed.is_initialized():
        return jax.process_index(), jax.process_count()
    present = [name for name in _ENV if name in os.environ]
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    if not present:
        return 0, 1
    missing = [name for name in _ENV if name not in os.environ]
    if missing:
        raise ValueError(f"dl.distributed.init: {', '.join(missing)} not set (have {', '.join(present)})")
    rank, world = _int_env("RANK"), _int_env("WORLD_SIZE")
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"dl.distributed.init: RANK={rank} is not in [0, WORLD_SIZE={world})")
    host, port = os.environ["MASTER_ADDR"], _int_env("MASTER_PORT")
    if rank != 0:
        _wait_for_coordinator(host, port, rank, world, timeout_s)
    try:
        jax.distributed.initialize(
            coordinator_address=f"{host}:{port}", num_processes=world, process_id=rank,
            initialization_timeout=int(timeout_s),
        )
    except Exception as err:  # jax raises several types here (XlaRuntimeError, ...)
        raise RuntimeError(
            f"dl.distributed.init: rank {rank} of {world} could not join the coordinator at "
            f"{host}:{port} within {timeout_s:.0f}s ({type(err).__name__}: {err}). Check that "
            "rank 0 is running and MASTER_ADDR/MASTER_PORT are the same on every process."
        ) from None
    _die_on_uncaught_exception()
    return rank, world
