"""Every collective, with what each rank holds before and after.

    torchrun --standalone --nproc-per-node 4 real/demos/collectives.py
    mpiexec -n 4 python real/demos/collectives.py

Rank r starts from [r + 1, 10 * (r + 1)]. The operations, as in the MPI standard:
broadcast (root's tensor to all), reduce (combination at the root only), all_reduce (combination
everywhere), scatter (root's i-th piece to rank i), gather (rank i's tensor to the root's i-th
slot), all_gather (everyone gets every slot), reduce_scatter (rank i gets the combination of
everyone's i-th piece), barrier (nobody leaves before everybody arrived).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from real.demos._common import run_demo, say, show  # noqa: E402


def start(comm) -> torch.Tensor:
    return torch.tensor([comm.rank + 1.0, 10.0 * (comm.rank + 1)])


def demo(comm, args) -> None:
    p = comm.world_size
    show(comm, "start:", start(comm))

    t = start(comm)
    comm.broadcast(t, src=0)
    show(comm, "broadcast from rank 0:", t)

    t = start(comm)
    comm.reduce(t, dst=0, op="sum")
    show(comm, "reduce(sum) to rank 0 (what other ranks hold afterwards is undefined):", t)

    for op in ("sum", "avg", "max"):
        t = start(comm)
        comm.all_reduce(t, op=op)
        show(comm, f"all_reduce({op}):", t)

    pieces = list(torch.arange(2.0 * p).chunk(p)) if comm.rank == 0 else None
    t = torch.zeros(2)
    comm.scatter(t, pieces, src=0)
    show(comm, f"scatter of rank 0's {torch.arange(2.0 * p).tolist()} in pieces of 2:", t)

    slots = [torch.zeros(2) for _ in range(p)] if comm.rank == 0 else None
    comm.gather(start(comm), slots, dst=0)
    if comm.rank == 0:
        print(f"gather to rank 0: rank 0 holds {[s.tolist() for s in slots]}", flush=True)

    slots = [torch.zeros(2) for _ in range(p)]
    comm.all_gather(slots, start(comm))
    show(comm, "all_gather (every rank holds every rank's tensor):", torch.stack(slots))

    inputs = [start(comm) * (i + 1) for i in range(p)]  # piece i is (i + 1) * start
    t = torch.zeros(2)
    comm.reduce_scatter(t, inputs, op="sum")
    show(comm, "reduce_scatter(sum) where rank r's piece i is (i + 1) * its start:", t)

    comm.barrier()
    say(comm, "barrier: every rank arrived")


if __name__ == "__main__":
    run_demo("Every collective operation.", demo)
