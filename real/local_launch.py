"""Where a process sits in the job, and launching a local job without torchrun.

Under torchrun the environment says who we are (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``); under mpiexec the MPI communicator does.
``self_launch`` sets the same variables for ``nproc`` children started by
``torch.multiprocessing`` so the worker code cannot tell the difference.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass

import torch.multiprocessing as mp

from dsgd_sim.argparse_oneline import OneLineArgumentParser, run_command_line, write_whole

from .comm import JobError, check_timeout, launched_by_mpi

# A launcher such as torchrun stops every rank once one exits: ranks that stay quiet about a bad
# input wait this long, so that rank 0 has surely printed its error line first.
QUIET_EXIT_DELAY_S = 1.0


@dataclass(frozen=True)
class Placement:
    """This process's ranks: in the job (``rank`` of ``world_size``) and on its node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1


def env_int(name: str, default: int) -> int:
    """The whole number in environment variable ``name`` (``default`` when it is unset);
    ``ValueError`` naming the variable when it holds anything else."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not a whole number") from None


def placement_from_env() -> Placement:
    """The torchrun variables, or one rank of one when they are absent; ``ValueError`` naming
    the variable where they do not describe a rank of a job (a rank not below the size, a size
    below 1, a size without a rank)."""
    if "WORLD_SIZE" in os.environ and "RANK" not in os.environ and env_int("WORLD_SIZE", 1) != 1:
        raise ValueError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} is set but RANK is not: "
                         f"set both (torchrun does), or neither for a job of one process")
    world_size = env_int("WORLD_SIZE", 1)
    placement = Placement(env_int("RANK", 0), world_size, env_int("LOCAL_RANK", 0),
                          env_int("LOCAL_WORLD_SIZE", world_size))
    for rank, size, rank_name, size_name in [
            (placement.rank, placement.world_size, "RANK", "WORLD_SIZE"),
            (placement.local_rank, placement.local_world_size, "LOCAL_RANK", "LOCAL_WORLD_SIZE")]:
        if size < 1:
            raise ValueError(f"environment variable {size_name}={size} must be at least 1")
        if not 0 <= rank < size:
            raise ValueError(f"environment variable {rank_name}={rank} must be from 0 to "
                             f"{size_name} - 1 = {size - 1}")
    return placement


def check_master_port() -> None:
    """``ValueError`` naming ``MASTER_PORT`` where it is set to anything but a TCP port (torch's
    store would only say that it is no integer, or fail to connect)."""
    if "MASTER_PORT" in os.environ:
        port = env_int("MASTER_PORT", 0)
        if not 1 <= port <= 65535:
            raise ValueError(f"environment variable MASTER_PORT={port} is no TCP port "
                             f"(1 to 65535)")


def mpi_local_rank() -> tuple[int, int]:
    """``(local_rank, local_world_size)`` under mpiexec (MPICH or Open MPI variables)."""
    for rank_var, size_var in [("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                               ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")]:
        if rank_var in os.environ and size_var in os.environ:
            return env_int(rank_var, 0), env_int(size_var, 1)
    return 0, 1


def machine_memory_bytes() -> int:
    """This machine's physical memory, all of it."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def launcher_local_ranks() -> int | None:
    """How many ranks the launcher started on this machine: torchrun's ``LOCAL_WORLD_SIZE``, else
    mpiexec's (MPICH or Open MPI); None under neither. ``ValueError`` if one is not a number."""
    if "LOCAL_WORLD_SIZE" in os.environ:
        return env_int("LOCAL_WORLD_SIZE", 1)
    if launched_by_mpi():
        return mpi_local_rank()[1]
    return None


def say(line: str, stream=None) -> None:
    """Write ``line`` to ``stream`` (stdout) in one write call, so that lines from several ranks
    sharing a pipe never interleave. Under ``run_command_line`` a stdout whose reader has gone
    drops the line."""
    stream = sys.stdout if stream is None else stream
    guarded = getattr(stream, "write_whole", None)  # run_command_line's stand-in for stdout
    if guarded is not None:
        guarded(f"{line}\n")
    else:
        write_whole(stream, f"{line}\n")


def env_rank() -> int:
    """This process's rank as the launcher set it, before any communicator exists (0 if none)."""
    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if name in os.environ:
            return env_int(name, 0)
    return 0


def speaks_for_job() -> bool:
    """Whether this process reports the errors every rank finds alike (bad flags): rank 0, or a
    process whose launcher variables cannot be read (it must not stay silent)."""
    try:
        return env_rank() == 0
    except ValueError:
        return True


def own_error(error) -> str:
    """``error`` as one rank's own, for a line every rank may print: ``rank N: ...`` on ranks
    other than 0 (once: an error that names its rank already is left as it is)."""
    text = str(error)
    try:
        rank = env_rank()
    except ValueError:
        return text
    return f"rank {rank}: {text}" if rank and not text.startswith(f"rank {rank}: ") else text


def report_join_error(prog: str, error: ValueError) -> int:
    """Report bad input met while joining the job; exit status 2. A ``JobError`` (the flags, the
    launcher) every rank meets alike: rank 0 says it. Any other (a device this node lacks, a bad
    launcher variable) may be one node's own: each rank that meets it says it."""
    if isinstance(error, JobError):
        return report_error(prog, speaks_for_job(), error, 2)
    return report_error(prog, True, own_error(error), 2)


def report_error(prog: str, speak: bool, error, status: int) -> int:
    """Print ``error`` as one line ``PROG: error: ...`` if ``speak``; return the exit status.
    Silent ranks wait a moment so that a launcher which stops the job when one rank exits lets
    rank 0 finish speaking."""
    if speak:
        say(f"{prog}: error: {' '.join(str(error).split())}", sys.stderr)  # engines' can span lines
    elif status == 2:
        time.sleep(QUIET_EXIT_DELAY_S)
    return status


class RankArgumentParser(OneLineArgumentParser):
    """The argument parser of a multi-process entry point. Every rank parses the same command
    line and finds the same bad flag: rank 0 prints it, the others exit quietly a moment later
    (``quiet``, by default every rank but 0), so that the job says it once."""

    def __init__(self, *args, quiet: bool | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.quiet = not speaks_for_job() if quiet is None else quiet

    def _print_message(self, message, file=None):
        if not self.quiet:
            super()._print_message(message, file)

    def exit(self, status=0, message=None):
        if self.quiet and status:
            time.sleep(QUIET_EXIT_DELAY_S)
        super().exit(status, message)


def add_task_and_launch_flags(parser: argparse.ArgumentParser, defaults, batch_help: str,
                              seed_help: str) -> None:
    """The flags both trainers share, with their defaults from ``defaults`` (a config): the
    model and the data, and how the processes start; ``batch_help`` and ``seed_help`` say what
    the batch and the seed are in that trainer."""
    parser.add_argument("--model", default=defaults.model,
                        help="lenet, mlp or mlp-large (default %(default)s)")
    parser.add_argument("--dataset", default=defaults.dataset,
                        help="synthetic or mnist:DIR (default %(default)s)")
    parser.add_argument("--num-samples", type=int, default=defaults.num_samples,
                        help="size of the synthetic data set (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help=f"{batch_help} (default %(default)s)")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help=f"{seed_help} (default %(default)s)")
    parser.add_argument("--threads", type=int, default=defaults.threads,
                        help="torch threads per process (default 0: OMP_NUM_THREADS, else CPU "
                        "cores / local processes)")
    parser.add_argument("--nproc-per-node", type=int, default=defaults.nproc_per_node,
                        help="start this many local processes here, without torchrun or "
                        "mpiexec (default 0: they started them)")
    parser.add_argument("--master-addr", default=None,
                        help="with --nproc-per-node: the rendezvous address (default "
                        "$MASTER_ADDR, else loopback)")
    parser.add_argument("--master-port", type=int, default=defaults.master_port,
                        help="with --nproc-per-node: the rendezvous port (default $MASTER_PORT, "
                        "else a free one)")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar")


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def rendezvous(address: str | None, port: int) -> tuple[str, int]:
    """Where a self-launched job meets: ``address``/``port``, else ``$MASTER_ADDR``/
    ``$MASTER_PORT``, else the loopback address and a free port; ``ValueError`` naming a bad
    variable or an address this machine cannot listen on."""
    address = address or os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = port or env_int("MASTER_PORT", 0)
    if not port:
        try:
            port = free_port(address)
        except OSError as error:
            raise ValueError(f"cannot listen on master address {address!r}: "
                             f"{error.strerror or error}") from None
    return address, port


def self_launch(worker, config, nproc: int, address: str | None, port: int) -> int:
    """Run ``worker(config)`` in ``nproc`` local processes as ranks 0..nproc-1; the exit status.

    ``address``/``port`` as ``rendezvous`` picks them (``ValueError`` if it cannot). A failing
    rank ends the others; its exit status is returned.
    """
    address, port = rendezvous(address, port)
    context = mp.start_processes(_child, args=(worker, config, nproc, address, port),
                                 nprocs=nproc, join=False, start_method="spawn")
    # ending the other ranks when one fails is what this launcher means to do; torch would
    # log a warning line for each, after the failing rank's own one-line error
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    try:
        while not context.join():
            pass
    except mp.ProcessExitedException as failure:
        if failure.exit_code and failure.exit_code > 0:
            return failure.exit_code  # the rank has said why in its own line
        # killed by a signal it could not report (the OOM killer's SIGKILL, say): say it here
        print(f"sync.py: error: rank {failure.error_index} was killed by "
              f"{failure.signal_name or 'a signal'}; the other ranks were stopped",
              file=sys.stderr)
        return 1
    except mp.ProcessRaisedException as failure:  # a bug, not bad input: keep the traceback
        print(f"sync.py: error: a rank failed: {failure}", file=sys.stderr)
        return 1
    return 0


def _child(local_rank: int, worker, config, nproc: int, address: str, port: int) -> None:
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(nproc),
                      LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR=address, MASTER_PORT=str(port))
    fast_exit(run_command_line(lambda: worker(config), keep_status=True))


def fast_exit(status: int) -> None:
    """Flush and end the process now: reports are written and the process group is gone, and
    the interpreter's own teardown with torch loaded takes seconds on a busy host.

    A rank of an MPI job that ends well finalizes MPI first: Open MPI's mpiexec counts a rank
    that exits without ``MPI_Finalize`` as failed (MPICH's does not). A failing rank skips it,
    since its peers may never reach theirs."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if status == 0 and mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(status)


MAX_LOCAL_PROCESSES = 1024  # --nproc-per-node beyond this is a typo, not a machine
MAX_THREADS = 1024  # torch threads per rank beyond this are a typo, not a machine


def check_launch_settings(seed: int, master_port: int, nproc_per_node: int, threads: int,
                          timeout_s: float, master_addr: str | None = None) -> None:
    """The launch settings sync.py and async_ps.py share; ``ValueError`` names the bad one,
    and the rendezvous flags given where no ``--nproc-per-node`` launch would use them."""
    if nproc_per_node and (launched_by_mpi() or "RANK" in os.environ):
        raise ValueError("--nproc-per-node launches the ranks itself: under torchrun or mpiexec, "
                         "which have launched them, leave it out")
    if not nproc_per_node and (master_addr is not None or master_port):
        raise ValueError("--master-addr and --master-port set the rendezvous of the ranks "
                         "--nproc-per-node launches; under torchrun or mpiexec the launcher "
                         "sets it (its --rdzv-endpoint, or MASTER_ADDR and MASTER_PORT)")
    if threads > MAX_THREADS:
        raise ValueError(f"--threads must be at most {MAX_THREADS}, got {threads}")
    check_timeout(timeout_s, "--timeout")
    if not 0 <= seed < 2**63:
        raise ValueError(f"--seed must be a whole number from 0 to 2**63-1, got {seed}")
    if master_port > 65535:
        raise ValueError(f"--master-port must be a TCP port (0 to 65535), got {master_port}")
    if nproc_per_node > MAX_LOCAL_PROCESSES:
        raise ValueError(f"--nproc-per-node must be at most {MAX_LOCAL_PROCESSES}, "
                         f"got {nproc_per_node}")
