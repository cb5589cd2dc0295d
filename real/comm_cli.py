"""What every multi-process entry point in ``real/`` shares: the communication flags, opening the
communicator they describe, and turning communication failures into one clear line.

    parser = argparse.ArgumentParser()
    add_comm_arguments(parser)
    args = parser.parse_args()
    with open_comm(parser, args) as comm:
        ...

``--backend auto`` (the default) picks MPI when started by ``mpiexec`` and torch.distributed
otherwise (NCCL where the node has a GPU for each of its processes, else Gloo; Gloo alone for
entry points whose tensors stay on the CPU); ``--timeout`` bounds how long any operation
waits for a peer before the job fails with a message instead of hanging; ``--threads`` sets
torch's CPU threads per rank (by default ``OMP_NUM_THREADS``, else this machine's cores shared
among its ranks), so that ranks sharing a machine do not oversubscribe its cores.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager

import torch

from dsgd_sim.units import parse_time

from .comm import CommError, Communicator, check_timeout, init, launched_by_mpi
from .local_launch import MAX_THREADS, launcher_local_ranks, own_error, report_join_error
from .thread_env import omp_num_threads

DEFAULT_TIMEOUT = "20s"  # long enough for a loaded laptop, short enough to notice a dead peer


def add_comm_arguments(parser: argparse.ArgumentParser, timeout: str = DEFAULT_TIMEOUT,
                       gpu: bool = True) -> None:
    """Add ``--backend``, ``--timeout`` and ``--threads`` to ``parser``. ``gpu=False`` for an
    entry point whose tensors stay on the CPU: it offers no ``nccl``, whose tensors live on GPUs,
    and ``auto`` means Gloo outside mpiexec even on a node with GPUs."""
    if gpu:
        choices, auto = ("auto", "gloo", "nccl", "mpi"), ("nccl with a GPU for each process of "
                                                          "the node, else gloo")
    else:
        choices, auto = ("auto", "gloo", "mpi"), "gloo (this program's tensors stay on the CPU)"
    parser.add_argument("--backend", default="auto", choices=choices,
                        help=f"communication backend; auto: mpi under mpiexec, else {auto} "
                             f"(default: %(default)s)")
    parser.set_defaults(backend_auto_gpu=gpu)
    parser.add_argument("--timeout", default=timeout,
                        help="how long an operation may wait for its peers before the job "
                             "fails, e.g. 20s (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads per rank; 0: OMP_NUM_THREADS if set, else this "
                             "machine's cores / its ranks (default: 0)")


def default_threads(local_ranks: int | None = None) -> int:
    """torch threads for one rank: ``OMP_NUM_THREADS`` when set (torchrun sets it to 1 for several
    ranks per node; the test bed to the cores per host), else the cores this process may use
    divided among the ranks on this machine (``local_ranks``, else what the launcher says:
    torchrun's ``LOCAL_WORLD_SIZE`` or mpiexec's local size, else 1). Spare threads matter: an
    idle OpenMP thread spins for a while before it sleeps, and on shared cores that spinning
    takes the time another rank needs to move its data. ``ValueError`` for an
    ``OMP_NUM_THREADS`` that is set but no whole number of threads (``omp_num_threads``; the
    scripts check it before torch loads OpenMP, which would warn about it) or over
    ``MAX_THREADS``."""
    threads = omp_num_threads() or 0
    if threads > MAX_THREADS:  # else torch starts them all, or dies trying, without a word
        raise ValueError(f"environment variable OMP_NUM_THREADS={threads}: at most {MAX_THREADS} "
                         f"threads a rank (or pass --threads)")
    if threads > 0:
        return threads
    if local_ranks is None:
        try:
            local_ranks = launcher_local_ranks() or 1
        except ValueError:  # a launcher variable that is no number: the join says so
            local_ranks = 1
    return max(1, len(os.sched_getaffinity(0)) // max(1, local_ranks))


def timeout_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> float:
    """``--timeout`` in seconds; an argparse error (exit 2) if it is not a positive time."""
    try:
        timeout_s = parse_time(args.timeout)
    except ValueError as error:
        parser.error(f"--timeout: {error}")
    try:
        check_timeout(timeout_s, "--timeout", given=args.timeout)
    except ValueError as error:
        parser.error(str(error))
    return timeout_s


@contextmanager
def open_comm(parser: argparse.ArgumentParser, args: argparse.Namespace, check_sizes=True):
    """Open the communicator ``args`` describe; close it on the way out, error or not.

    A :class:`CommError` raised inside the block (a dead peer), or an ``OSError`` (an output
    that cannot be written after all), is printed as one line, ``rank N: `` on ranks other than
    0, and the process exits with status 1: a message, not a traceback."""
    timeout_s = timeout_from_args(parser, args)
    threads = getattr(args, "threads", 0)
    if not 0 <= threads <= MAX_THREADS:
        parser.error(f"--threads must be from 0 to {MAX_THREADS}, got {threads}")
    try:
        torch.set_num_threads(threads or default_threads())
    except ValueError as error:  # every rank of a node finds it alike
        sys.exit(report_join_error(parser.prog, error))
    backend = None if args.backend == "auto" else args.backend
    if backend is None and not args.backend_auto_gpu and not launched_by_mpi():
        backend = "gloo"
    comm: Communicator | None = None
    try:
        try:
            comm = init("auto", backend, timeout_s, check_sizes)
        except ValueError as error:  # bad flags, a backend this node lacks, a bad variable
            sys.exit(report_join_error(parser.prog, error))
        yield comm
    except (CommError, OSError) as error:  # each rank that meets it says it, naming itself
        print(f"{parser.prog}: error: {own_error(error)}", file=sys.stderr, flush=True)
        sys.exit(1)
    finally:
        if comm is not None:
            comm.close()


class InputError(ValueError):
    """Bad input that one rank found and has already reported: the others leave quietly."""


def check_outputs_together(parser: argparse.ArgumentParser, comm, check) -> None:
    """Collective: once every rank has joined, rank 0 (which writes the outputs) runs ``check``,
    a ValueError naming an output it cannot write; then every rank exits with status 2, rank 0
    saying why through ``parser`` (a ``RankArgumentParser``: the others stay quiet). Checked
    after joining, not before: a rank that left before joining would leave the others waiting
    for it (in ``MPI_Init`` for ever, in torch's rendezvous until the timeout)."""
    error = None
    if comm.rank == 0:
        try:
            check()
        except ValueError as caught:
            error = caught
    if first_failed_rank(comm, error is not None) is not None:
        parser.error(str(error))


def first_failed_rank(comm, failed: bool) -> int | None:
    """Collective: the lowest rank that ``failed`` (bad input found where each rank checks its
    own, such as its data), or None when none did. The rank it names reports the error, once."""
    first = torch.tensor([comm.rank if failed else comm.world_size], device=comm.device)
    comm.all_reduce(first, op="min")
    return None if int(first) == comm.world_size else int(first)
