"""What the demos share: the command line (``--backend``, ``--timeout``) and printing what every
rank holds, in rank order, from rank 0 (the tensors are gathered there, so lines never interleave)."""

from __future__ import annotations

import sys

import torch

from dsgd_sim.argparse_oneline import run_command_line
from real.comm_cli import add_comm_arguments, open_comm
from real.local_launch import RankArgumentParser


def show(comm, label: str, tensor: torch.Tensor) -> None:
    """Print ``label`` and each rank's ``tensor`` (same shape on every rank) from rank 0."""
    slots = [torch.empty_like(tensor) for _ in range(comm.world_size)] if comm.rank == 0 else None
    comm.gather(tensor.contiguous(), slots, dst=0)
    if comm.rank == 0:
        print(label)
        for rank, held in enumerate(slots):
            print(f"  rank {rank}: {held.tolist()}")
        sys.stdout.flush()


def say(comm, text: str) -> None:
    """Print ``text`` once, from rank 0."""
    if comm.rank == 0:
        print(text, flush=True)


def run_demo(description: str, body, add_arguments=None, argv=None, min_ranks: int = 1) -> None:
    """A demo's command line: ``demo_main``, with stdout guarded (``run_command_line``: a reader
    that goes drops the rest of the printing, and each rank keeps its status, since a failing
    rank would end the others); exits with its status."""
    sys.exit(run_command_line(lambda: demo_main(description, body, add_arguments, argv,
                                                min_ranks), keep_status=True))


def demo_main(description: str, body, add_arguments=None, argv=None, min_ranks: int = 1) -> int:
    """Parse the common flags (and the demo's own), open the communicator, run ``body(comm, args)``.
    With fewer than ``min_ranks`` ranks, rank 0 says so in one line and every rank exits with 2."""
    parser = RankArgumentParser(description=description)
    add_comm_arguments(parser, gpu=False)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    with open_comm(parser, args) as comm:
        if comm.world_size < min_ranks:
            if comm.rank == 0:
                print(f"{parser.prog}: error: this demo needs at least {min_ranks} ranks, got "
                      f"{comm.world_size}", file=sys.stderr, flush=True)
            raise SystemExit(2)
        say(comm, f"{comm.world_size} ranks, {comm.engine} engine, backend {comm.backend}")
        body(comm, args)
    return 0
