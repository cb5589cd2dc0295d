"""What every multi-process entry point in ``real/`` shares: the communication flags, opening the
communicator they describe, and turning communication failures into one clear line.

    parser = argparse.ArgumentParser()
    add_comm_arguments(parser)
    args = parser.parse_args()
    with open_comm(parser, args) as comm:
        ...

``--backend auto`` (the default) picks MPI when started by ``mpiexec`` and torch.distributed
otherwise (NCCL if CUDA is available, else Gloo); ``--timeout`` bounds how long any operation
waits for a peer before the job fails with a message instead of hanging.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager

from dsgd_sim.units import parse_time

from .comm import CommError, Communicator, init

DEFAULT_TIMEOUT = "20s"  # long enough for a loaded laptop, short enough to notice a dead peer


def add_comm_arguments(parser: argparse.ArgumentParser, timeout: str = DEFAULT_TIMEOUT) -> None:
    """Add ``--backend`` and ``--timeout`` to ``parser``."""
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl", "mpi"),
                        help="communication backend; auto: mpi under mpiexec, else nccl with "
                             "CUDA, else gloo (default: %(default)s)")
    parser.add_argument("--timeout", default=timeout,
                        help="how long an operation may wait for its peers before the job "
                             "fails, e.g. 20s (default: %(default)s)")


def timeout_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> float:
    """``--timeout`` in seconds; an argparse error (exit 2) if it is not a positive time."""
    try:
        timeout_s = parse_time(args.timeout)
    except ValueError as error:
        parser.error(f"--timeout: {error}")
    if timeout_s <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout!r}")
    return timeout_s


@contextmanager
def open_comm(parser: argparse.ArgumentParser, args: argparse.Namespace, check_sizes=True):
    """Open the communicator ``args`` describe; close it on the way out, error or not.

    A :class:`CommError` raised inside the block is printed as one line and the process exits
    with status 1, so a dead peer reads as a message, not a traceback."""
    timeout_s = timeout_from_args(parser, args)
    backend = None if args.backend == "auto" else args.backend
    comm: Communicator | None = None
    try:
        comm = init("auto", backend, timeout_s, check_sizes)
        yield comm
    except CommError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    finally:
        if comm is not None:
            comm.close()
