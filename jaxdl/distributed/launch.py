"""`python -m jaxdl.distributed.launch --nproc N script.py [args]`: a single-machine torchrun.

Starts N processes with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set, prefixes each output line with its rank, and when any process
fails, stops the others and exits with that process's status. The module is
also callable: `dl.distributed.launch("train.py", nproc=2)`.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pump(stream, rank: int, sink):
    for line in iter(stream.readline, b""):
        sink.write(f"[rank {rank}] {line.decode(errors='replace')}")
        sink.flush()
    stream.close()


def _stop(procs, grace_s: float = 5.0):
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch(script: str, nproc: int, args=(), *, env=None, python=sys.executable, module=False) -> int:
    """Run `script` (or `-m module`) in `nproc` local processes; returns the exit status.

    The status is 0 when every process succeeds, else the first failure's
    (the remaining processes are terminated, so none is left behind).
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    base = dict(os.environ if env is None else env)
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(nproc))
    command = [python, "-u", *(["-m"] if module else []), script, *args]
    procs, pumps = [], []
    try:
        for rank in range(nproc):
            proc_env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
            proc = subprocess.Popen(command, env=proc_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
            procs.append(proc)
            pump = threading.Thread(target=_pump, args=(proc.stdout, rank, sys.stdout), daemon=True)
            pump.start()
            pumps.append(pump)
        status = 0
        while status == 0 and any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.poll() not in (None, 0)]
            status = failed[0] if failed else 0
            time.sleep(0.05)
        if status == 0:
            status = next((p.returncode for p in procs if p.returncode), 0)
        return status
    finally:
        _stop(procs)
        for pump in pumps:
            pump.join(timeout=5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxdl.distributed.launch", description=__doc__)
    parser.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", type=int, required=True,
                        dest="nproc", help="number of processes to start")
    parser.add_argument("-m", "--module", action="store_true", help="run the target as a module")
    parser.add_argument("script", help="the training script (or module with -m)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    opts = parser.parse_args(argv)
    # Being terminated ourselves still runs launch()'s cleanup, so no rank is orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    status = launch(opts.script, opts.nproc, opts.args, module=opts.module)
    if status:
        print(f"launch: a process exited with status {status}; the others were stopped",
              file=sys.stderr)
    return status


class _CallableModule(types.ModuleType):
    """Lets `dl.distributed.launch(...)` call the function while `-m` runs this module."""

    def __call__(self, *args, **kwargs):
        return launch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
