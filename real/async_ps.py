"""Asynchronous SGD with a parameter server, for real: rank 0 holds the weights, every other rank
pulls them, computes a gradient on its own data, pushes it and goes on without waiting for anyone.

One node, 1 server + 3 workers (defaults: the lenet model on the synthetic task, 1000 updates)::

    torchrun --standalone --nproc-per-node 4 real/async_ps.py
    torchrun --standalone --nproc-per-node 4 real/async_ps.py --time 30s --json ps.json

Two nodes (run on each; ``HOST0`` is node 0's address; rank 0, the server, is on node 0)::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        --rdzv-id ps1 real/async_ps.py --updates 5000

Over MPI::

    mpiexec -n 4 python real/async_ps.py --backend mpi

torchrun and mpiexec end the whole job when one process dies. Launched by this script instead
(torch.multiprocessing, one node), a worker that dies is counted in ``workers_lost`` and the
others carry on to the stop condition; if the server dies, every worker exits with an error
within ``--timeout`` (default 30s)::

    python real/async_ps.py --nproc-per-node 4 --max-staleness 2 --json ps.json --trace ps.trace.json
    python real/async_ps.py --nproc-per-node 4 --emulate-compute exp:80ms --time 20s

Every flag and its default: ``real/ps_config.py``; the wire protocol: ``real/ps_protocol.py``;
the guide: ``docs/async_ps.md``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from multiprocessing import connection as mp_connection

if __package__ in (None, ""):  # run as a script: import the repository, not real/ itself
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":  # before torch loads OpenMP, which would only warn about a bad value
    from real.thread_env import exit_on_bad_omp_num_threads
    exit_on_bad_omp_num_threads("async_ps.py")

import torch
import torch.multiprocessing as mp
from tqdm import tqdm

from dsgd_sim.argparse_oneline import run_command_line
from real.comm import CommError, init
from real.comm_cli import InputError, default_threads, first_failed_rank
from real.data import ShardedBatches, load_dataset
from real.local_launch import (env_rank, fast_exit, launcher_local_ranks, rendezvous, report_error,
                               report_join_error, say)
from real.ps_config import AsyncConfig, parse_args
from real.ps_protocol import ProtocolError
from real.ps_server import ParameterServer, WorkersLost
from real.ps_worker import ServerStopped, run_worker
from real.sync_report import output_named, write_json

PROG = "async_ps.py"


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    if config.nproc_per_node:
        try:  # check what can be checked once, here, before starting any process
            load_data(config, config.nproc_per_node - 1)
            config.check_warmup(config.nproc_per_node - 1)
            address, port = rendezvous(config.master_addr, config.master_port)
        except ValueError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return 2
        return launch(config, address, port)
    return run_process(config)


def load_data(config: AsyncConfig, workers: int):
    dataset = load_dataset(config.dataset_spec, config.num_samples, config.seed)
    ShardedBatches(len(dataset), config.batch_size, max(workers, 1), 0, config.seed)
    return dataset


def load_data_together(config: AsyncConfig, comm):
    """Collective (it is also the start barrier): every worker loads its data, the server none.
    If any worker fails, every rank learns it at once (not after the server's timeout): the
    lowest failing rank says why, the others leave quietly with the same status."""
    error, dataset = None, None
    try:
        if comm.rank != 0:
            dataset = load_data(config, comm.world_size - 1)
        else:  # see ps_config.parse_args
            config.check_outputs()
    except ValueError as caught:
        error = caught
    first = first_failed_rank(comm, error is not None)
    if first == comm.rank:
        raise error
    if first is not None:
        raise InputError(f"rank {first} could not load its data")
    return dataset


def run_process(config: AsyncConfig, joined=None) -> int:
    """One process's whole life: join, serve or work, report, leave. Returns the exit status.
    ``joined`` (an event, or None) is set once this process has joined the job."""
    try:
        rank = env_rank()
        say(f"rank {rank} pid {os.getpid()} role {'server' if rank == 0 else 'worker'}")
        comm = init(config.engine, config.backend, config.timeout_s, check_sizes=False)
    except ValueError as error:  # bad flags, a bad launcher variable, a backend this node lacks
        return report_join_error(PROG, error)
    except CommError as error:
        return fail(error, 1)
    if joined is not None:
        joined.set()
    try:
        try:  # bad input every rank finds alike: the server says it once
            local = launcher_local_ranks() or comm.world_size
            torch.set_num_threads(config.threads or default_threads(local))
            if comm.world_size < 2:
                raise ValueError("a parameter server needs at least 2 processes (a server and a "
                                 "worker); launch with --nproc-per-node N, torchrun or mpiexec")
            config.check_warmup(comm.world_size - 1)
        except ValueError as error:
            return report_error(PROG, comm.rank == 0, error, 2)
        try:
            dataset = load_data_together(config, comm)
        except CommError as error:  # every rank takes part: any of them may be the one lost
            raise StartupLost(f"rank {comm.rank}: a rank was lost while the job started (every "
                              f"rank loads its data together, so the job ends): "
                              f"{own_words(error, comm.rank)}") from None
        if comm.rank == 0:
            serve(config, comm)
        else:
            run_worker(config, comm, dataset)
        return 0
    except InputError:
        return 2
    except ValueError as error:
        return fail(error, 2)
    except (CommError, ProtocolError, WorkersLost, ServerStopped, OSError, StartupLost) as error:
        if comm.rank != 0 and isinstance(error, CommError):
            error = f"rank {comm.rank}: lost the server (rank 0): {own_words(error, comm.rank)}"
        return fail(error, 1)
    finally:
        comm.close()


def own_words(error, rank: int) -> str:
    """``error``'s text without the ``rank N: `` it may open with, for a line that names the
    rank already."""
    text, prefix = str(error), f"rank {rank}: "
    return text[len(prefix):] if text.startswith(prefix) else text


class StartupLost(Exception):
    """A rank was lost during the job's collective start-up, before serving began."""


def fail(error, status: int) -> int:
    return report_error(PROG, True, error, status)


def serve(config: AsyncConfig, comm) -> None:
    """Rank 0: serve the workers, then write the summary and the trace."""
    server = ParameterServer(config, comm)
    say(f"serving {comm.world_size - 1} workers: {config.model}, "
        f"{server.weights.numel()} parameters")
    total = config.updates or None
    tqdm.set_lock(threading.RLock())  # not tqdm's semaphore, which a killed server would leak
    bar = tqdm(total=total, unit="update", desc=f"async x{comm.world_size - 1}",
               disable=not config.progress, file=sys.stderr, mininterval=0.5)
    try:
        server.serve(on_update=lambda version: bar.update(1))
    finally:
        bar.close()
    summary = server.summary()
    loss = summary["final_loss"]  # the figures first: an output the disk refuses loses none
    say(f"done: {summary['updates']} updates from {summary['workers']} workers, "
        f"{summary['updates_per_s'] or 0:.1f} updates/s, staleness mean "
        f"{summary['staleness_mean'] or 0:.2f} max {summary['staleness_max']}, dropped "
        f"{summary['dropped_gradients']}, workers lost {summary['workers_lost']}, loss "
        f"{'-' if loss is None else f'{loss:.4f}'}")
    if config.json:
        with output_named("--json", config.json):
            write_json(config.json, summary)
    if config.trace:
        with output_named("--trace", config.trace):
            server.write_trace(config.trace)


def launch(config: AsyncConfig, address: str, port: int) -> int:
    """Start ``nproc_per_node`` local processes (rank 0 the server) meeting at ``address``:
    ``port`` (``local_launch.rendezvous``) and wait for all of them.

    Unlike torchrun, a dying worker does not end the others, and a server that dies once the
    job has started leaves the workers to find out (they report losing it); a server that ends
    before it could join the job stops them (they would wait to join it for good). The exit
    status is the server's if it failed, else 1 if a worker failed with an error, else 0 (a
    worker killed by a signal is a lost worker, which the server has already counted and
    survived).
    """
    context = mp.get_context("spawn")
    nproc = config.nproc_per_node
    server_joined = context.Event()
    procs = [context.Process(target=_child, args=(rank, config, nproc, address, port,
                                                  server_joined if rank == 0 else None))
             for rank in range(nproc)]
    for proc in procs:
        proc.start()
    server, workers = procs[0], procs[1:]
    stuck = wait_for_processes(server, workers, server_joined, grace_s=config.timeout_s)
    for rank in stuck:
        say(f"{PROG}: rank {rank} was still running {config.timeout_s:g} s after the server "
            f"ended (stopped or hung); killed it", sys.stderr)
    for proc in procs:
        proc.join()
    codes = [proc.exitcode for proc in procs]
    if codes[0] != 0:
        return codes[0] if codes[0] and codes[0] > 0 else 1
    return 1 if any(code and code > 0 for code in codes[1:]) else 0


def wait_for_processes(server, workers: list, server_joined, grace_s: float,
                       wait=mp_connection.wait, clock=time.monotonic) -> list[int]:
    """Return once the server and every worker have ended: the ranks of the workers killed.

    Workers are killed if the server ends before it joined the job (they would wait to join it
    for good); once a server that joined has ended, a worker still running ``grace_s`` later
    (stopped or hung) is killed with SIGKILL, which a stopped process cannot hold back as it
    can SIGTERM. One look at which are alive per pass, and the decision made before the pass's
    wait: a second look could find the last one gone and leave ``wait`` an empty list, and a
    server that had already ended at the first look would leave ``wait`` on workers that wait
    for it; either waits for ever."""
    deadline, killed = None, []
    while alive := [proc for proc in (server, *workers) if proc.is_alive()]:
        timeout = None
        if server not in alive and not server_joined.is_set():
            # they wait to join a job that will not start; SIGTERM could wait in the store's
            # connect, up to the timeout (a second SIGKILL to a dying worker does nothing)
            for worker in alive:
                worker.kill()
        elif server not in alive:
            now = clock()
            deadline = now + grace_s if deadline is None else deadline
            if now < deadline:
                timeout = deadline - now
            else:  # the workers killed now end without fail: wait for them with no timeout
                for rank, worker in enumerate(workers, start=1):
                    if worker in alive and rank not in killed:
                        worker.kill()
                        killed.append(rank)
        wait([proc.sentinel for proc in alive], timeout)
    return killed


def _child(rank: int, config: AsyncConfig, nproc: int, address: str, port: int,
           joined=None) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                      LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR=address, MASTER_PORT=str(port))
    # no interpreter teardown: with torch loaded it takes seconds, and after a Gloo receive
    # timed out a server seemingly never finished it (once, its launcher waiting on it)
    fast_exit(run_command_line(lambda: run_process(config, joined), keep_status=True))


if __name__ == "__main__":
    sys.exit(run_command_line(main, keep_status=True))  # a rank fails for no reader's sake
