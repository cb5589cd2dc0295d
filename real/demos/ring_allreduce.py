"""The hand-written all-reduces next to the engine's own, on a small buffer you can read.

    torchrun --standalone --nproc-per-node 3 real/demos/ring_allreduce.py --length 7
    mpiexec -n 3 python real/demos/ring_allreduce.py --length 7

Rank r holds [100 r + i for i in range(length)]. ``ring`` cuts the buffer into p chunks (sizes
differ by at most one when p does not divide the length), reduce-scatters them in p-1 steps so
rank r owns the full sum of chunk r+1, then all-gathers in p-1 steps; ``naive`` passes whole
buffers around the ring p-1 times. All three must print the same sums.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from real.allreduce import ALGORITHMS, chunk_bounds  # noqa: E402
from real.demos._common import run_demo, say, show  # noqa: E402


MAX_LENGTH = 10_000  # the demo prints every element


def _length(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= MAX_LENGTH:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 0 to {MAX_LENGTH}")
    return value


def add_arguments(parser) -> None:
    parser.add_argument("--length", type=_length, default=7,
                        help=f"elements per rank, at most {MAX_LENGTH} (default: 7)")


def demo(comm, args) -> None:
    start = torch.arange(args.length, dtype=torch.int64) + 100 * comm.rank
    show(comm, "start:", start)
    say(comm, f"ring's chunks [start, stop): {chunk_bounds(args.length, comm.world_size)}")
    for name in ("ring", "naive", "backend"):
        t = start.clone()
        ALGORITHMS[name](comm, t, "sum")
        show(comm, f"{name} all-reduce (sum):", t)


if __name__ == "__main__":
    run_demo("Ring and naive all-reduce against the backend's.", demo, add_arguments)
