"""Point-to-point messages: blocking send/recv, non-blocking isend/irecv, receive from any rank.

    torchrun --standalone --nproc-per-node 3 real/demos/point_to_point.py
    mpiexec -n 3 python real/demos/point_to_point.py

1. Blocking: rank 0 sends each rank r the tensor [r, r, r]; ``recv`` returns when it arrived.
2. Non-blocking: every rank sends its rank to the right and receives from the left at the same
   time; ``isend``/``irecv`` return at once and ``wait()`` blocks (a blocking ring would deadlock
   if every rank sent first and the messages were too large to buffer).
3. Any source: rank 0 receives one message from each other rank in arrival order;
   ``Work.source`` says who sent it.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from real.demos._common import run_demo, show  # noqa: E402


def blocking(comm) -> None:
    held = torch.zeros(3)
    if comm.rank == 0:
        for dst in range(1, comm.world_size):
            comm.send(torch.full((3,), float(dst)), dst)
    else:
        comm.recv(held, src=0)
    show(comm, "1. after rank 0 sent [r, r, r] to each rank r with send/recv:", held)


def non_blocking_ring(comm) -> None:
    right, left = (comm.rank + 1) % comm.world_size, (comm.rank - 1) % comm.world_size
    held = torch.zeros(2)
    receive = comm.irecv(held, src=left)
    send = comm.isend(torch.tensor([float(comm.rank), 100.0 + comm.rank]), dst=right)
    send.wait()
    receive.wait()
    show(comm, "2. after each rank isend its [rank, 100 + rank] to the right (irecv from the left):",
         held)


def any_source(comm) -> None:
    if comm.rank == 0:
        for _ in range(comm.world_size - 1):
            got = torch.zeros(1)
            work = comm.irecv(got)  # src=None: from whichever rank sends first
            work.wait()
            print(f"3. rank 0 received {got.item():g} from rank {work.source}", flush=True)
    else:
        comm.send(torch.tensor([comm.rank * 1.5]), dst=0)
    comm.barrier()


def demo(comm, args) -> None:
    blocking(comm)
    non_blocking_ring(comm)
    any_source(comm)


if __name__ == "__main__":
    run_demo("Point-to-point messages between ranks.", demo, min_ranks=2)
