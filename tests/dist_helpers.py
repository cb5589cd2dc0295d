"""Run code on N local ranks for multi-process tests: Gloo ranks on a free port, or MPI ranks
through ``mpiexec -n N``.

    values = run_function(check_ring, 3, "ring", launcher="gloo")   # one return value per rank
    done = run_script(["real/allreduce.py", "--sizes", "4KB"], 2, launcher="mpi")

``launcher``: ``"gloo"`` starts N plain processes with torchrun's variables set (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT`` free); ``"torchrun"``
runs the script under ``torchrun --standalone``; ``"mpi"`` runs ``mpiexec -n N``. Functions must
be importable (defined at module level); they run as ``fn(*args)`` in every rank, which opens
its own communicator, and return something picklable. Every run has a deadline: past it all
ranks are killed and the test fails with their output, so a hang can never stall the suite.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHERS = ("gloo", "torchrun", "mpi")


def free_port() -> int:
    """A TCP port free on this host right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mpiexec_path() -> str | None:
    """The ``mpiexec`` the tests launch with: the first of ``bed.mpiexec_candidates`` (beside
    this Python, where ``pip install mpich`` puts it, else on the PATH), or None."""
    from real.testbed.bed import mpiexec_candidates
    return next(iter(mpiexec_candidates()), None)


def have_mpiexec() -> bool:
    """True when mpi4py imports and ``mpiexec`` is found (``./install.sh dev`` gives both).

    With ``DSGD_REQUIRE_MPI=1`` in the environment this is always True, so that MPI tests fail
    loudly instead of being skipped where MPI is supposed to be installed (CI)."""
    if os.environ.get("DSGD_REQUIRE_MPI") == "1":
        return True
    try:
        import mpi4py  # noqa: F401  (import only checks it is installed; MPI starts lazily)
    except ImportError:
        return False
    return mpiexec_path() is not None


def have_mpich_mpiexec() -> bool:
    """``have_mpiexec()``, and the mpiexec is MPICH's, as the test bed's MPI jobs need (always
    True with ``DSGD_REQUIRE_MPI=1``, likewise)."""
    if os.environ.get("DSGD_REQUIRE_MPI") == "1":
        return True
    from real.testbed.bed import hydra_mpiexec
    try:
        hydra_mpiexec()
    except ValueError:
        return False
    return have_mpiexec()


@dataclass
class Run:
    """What a multi-process run left behind: exit status, merged output, wall time."""

    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in sys.path if p])
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: ranks share few cores
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra or {})
    return env


@contextlib.contextmanager
def closed_pipe():
    """The write end of a pipe whose reader has already gone, as ``| head`` leaves it once it
    has read its lines; closed on leaving."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        yield write_end
    finally:
        os.close(write_end)


def run_into_closed_pipe(argv: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``python argv...`` with its stdout a ``closed_pipe``; stderr captured as text."""
    with closed_pipe() as stdout:
        return subprocess.run([sys.executable, *argv], cwd=REPO, env=child_env(), stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=timeout_s)


def run_script(argv: list[str], world_size: int, launcher: str = "gloo", timeout_s: float = 120,
               env: dict | None = None, closed_stdout: bool = False) -> Run:
    """Run ``python argv...`` on ``world_size`` ranks; never raises for a failed run. With
    ``closed_stdout`` every rank's stdout is a ``closed_pipe``, and ``Run.stdout`` is empty."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r} (choose from {', '.join(LAUNCHERS)})")
    if closed_stdout:
        with closed_pipe() as stdout:
            return _run_ranks(argv, world_size, launcher, timeout_s, env, stdout)
    return _run_ranks(argv, world_size, launcher, timeout_s, env, subprocess.PIPE)


def _run_ranks(argv: list[str], world_size: int, launcher: str, timeout_s: float,
               env: dict | None, stdout) -> Run:
    base = child_env(env)
    start = time.monotonic()
    if launcher == "gloo":
        port = str(free_port())
        procs = [subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=stdout,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True,
                                  env={**base, "RANK": str(r), "LOCAL_RANK": str(r),
                                       "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE":
                                       str(world_size), "MASTER_ADDR": "127.0.0.1",
                                       "MASTER_PORT": port})
                 for r in range(world_size)]
    else:
        prefix = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={world_size}"] if launcher == "torchrun"
                  else [mpiexec_path() or "mpiexec", "-n", str(world_size), sys.executable])
        procs = [subprocess.Popen([*prefix, *argv], cwd=REPO, stdout=stdout,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True,
                                  env=base)]
    return _collect(procs, start, timeout_s)


def _collect(procs: list[subprocess.Popen], start: float, timeout_s: float) -> Run:
    outs, errs, codes, timed_out = [], [], [], False
    for proc in procs:
        left = max(0.1, timeout_s - (time.monotonic() - start))
        try:
            out, err = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            timed_out = True
            for p in procs:  # kill every rank's whole process group, launcher included
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            out, err = proc.communicate()
        outs.append(out or "")
        errs.append(err or "")
        codes.append(proc.returncode)
    code = next((c for c in codes if c != 0), 0)
    return Run(code, "".join(outs), "".join(errs), time.monotonic() - start, timed_out)


def run_function(fn, world_size: int, *args, launcher: str = "gloo", timeout_s: float = 120,
                 env: dict | None = None) -> list:
    """Call ``fn(*args)`` in each of ``world_size`` ranks; return the values in rank order.
    Raises ``AssertionError`` with every rank's output if any rank fails or the run times out."""
    with tempfile.TemporaryDirectory() as workdir:
        payload = os.path.join(workdir, "payload.pkl")
        with open(payload, "wb") as f:
            pickle.dump((fn, args), f)
        run = run_script([os.path.abspath(__file__), payload, workdir], world_size,
                         "torchrun" if launcher == "torchrun" else launcher, timeout_s, env)
        values = []
        for rank in range(world_size):
            path = os.path.join(workdir, f"rank-{rank}.pkl")
            if not os.path.exists(path):
                break
            with open(path, "rb") as f:
                ok, value = pickle.load(f)
            if not ok:
                raise AssertionError(f"rank {rank} raised:\n{value}\n--- stderr ---\n{run.stderr}")
            values.append(value)
        if run.timed_out or run.returncode != 0 or len(values) != world_size:
            raise AssertionError(f"{fn.__name__} on {world_size} {launcher} ranks failed "
                                 f"(exit {run.returncode}, timed out: {run.timed_out})\n"
                                 f"--- stdout ---\n{run.stdout}\n--- stderr ---\n{run.stderr}")
        return values


def _child_main(payload: str, workdir: str) -> None:
    """Entry point of each rank in :func:`run_function`."""
    rank = int(os.environ.get("RANK") or os.environ.get("PMI_RANK")
               or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
    with open(payload, "rb") as f:
        fn, args = pickle.load(f)
    try:
        result = (True, fn(*args))
    except BaseException:  # report everything, including SystemExit, to the parent
        result = (False, traceback.format_exc())
    with open(os.path.join(workdir, f"rank-{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    if not result[0]:
        sys.exit(1)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
