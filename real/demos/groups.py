"""Groups: communicators over a subset of ranks, renumbered from 0.

    torchrun --standalone --nproc-per-node 4 real/demos/groups.py
    mpiexec -n 4 python real/demos/groups.py

Every rank calls ``new_group`` for the even ranks and for the odd ranks (all ranks take part in
creating each group, as torch.distributed requires); a rank gets ``None`` for a group it is not in.
Inside its group each rank sums its world rank: evens get 0+2+..., odds 1+3+....
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from real.demos._common import run_demo, show  # noqa: E402


def demo(comm, args) -> None:
    evens = comm.new_group(list(range(0, comm.world_size, 2)))
    odds = comm.new_group(list(range(1, comm.world_size, 2))) if comm.world_size > 1 else None
    mine = evens if evens is not None else odds
    try:
        t = torch.tensor([float(comm.rank)])
        mine.all_reduce(t)
        info = torch.tensor([float(mine.rank), float(mine.world_size), t.item()])
        show(comm, "[rank in group, group size, sum of world ranks in the group]:", info)
    finally:
        for group in (evens, odds):
            if group is not None:
                group.close()


if __name__ == "__main__":
    run_demo("Sub-communicators over even and odd ranks.", demo)
