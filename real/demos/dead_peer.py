"""What happens when a peer dies or hangs: a clear error within ``--timeout``, not a 30-minute hang.

    torchrun --standalone --nproc-per-node 2 real/demos/dead_peer.py --fail hang --timeout 5s
    mpiexec -n 2 python real/demos/dead_peer.py --fail die

The last rank dies (exits) or hangs (sleeps) instead of joining an all-reduce. torch engine: the
others raise ``CommError`` at once (die: the TCP connection closes) or after ``--timeout`` (hang)
and exit with status 1. MPI engine: ``mpiexec`` ends the job when a rank exits; a hang trips the
watchdog after ``--timeout``, which prints what it waited for and aborts the job.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from real.demos._common import run_demo, say  # noqa: E402


def add_arguments(parser) -> None:
    parser.add_argument("--fail", choices=("die", "hang"), default="hang",
                        help="what the last rank does instead of joining (default: hang)")


def demo(comm, args) -> None:
    say(comm, f"the last rank will {args.fail}; the others wait at most {comm.timeout_s:g} s")
    if comm.rank == comm.world_size - 1:
        if args.fail == "die":
            os._exit(3)
        time.sleep(comm.timeout_s + 30)
    start = time.monotonic()
    try:
        comm.all_reduce(torch.ones(4))
    finally:
        print(f"rank {comm.rank}: gave up after {time.monotonic() - start:.1f} s", file=sys.stderr,
              flush=True)


if __name__ == "__main__":
    run_demo("A peer that dies or hangs.", demo, add_arguments, min_ranks=2)
