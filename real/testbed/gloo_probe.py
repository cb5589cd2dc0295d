"""The test bed's network as torch.distributed's Gloo backend sees it: the transport of training.

Run on a test bed of two hosts (each host's HOST_RANK, NUM_HOSTS, MASTER_ADDR, MASTER_PORT and
GLOO_SOCKET_IFNAME come from the test bed); rank 0 writes the JSON::

    python -m real.testbed run --hosts 2 -- python real/testbed/gloo_probe.py --json {out}/gloo.json

Round trips: a 1-element send and its 1-element answer (warm-up discarded). Small all_reduce: one
element. Stream gaps: the idle time between two 1-element calls of a stream made as the all-reduce
benchmark makes its calls (a barrier before each). Bulk: rank 0 sends N bytes, rank 1 answers one element when it has them all; before
each transfer both ranks wait ``--idle`` seconds so the shapers' buckets are full again.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: import the repository, not real/testbed itself
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.distributed as dist

from dsgd_sim.argparse_oneline import OneLineArgumentParser, check_output_file, write_atomically
from real.local_launch import env_int
from real.testbed.calibrate import MAX_PINGS, MAX_REPEATS, MAX_TRANSFER_BYTES
from real.testbed.probe import MAX_IDLE_S, MAX_SECONDS, bounded, byte_counts

WARMUP = 20


def round_trips(rank: int, count: int) -> list[float]:
    """Seconds of each 1-element send/recv round trip between ranks 0 and 1 (on rank 0)."""
    token = torch.zeros(1)
    times = []
    for i in range(count + WARMUP):
        start = time.perf_counter()
        if rank == 0:
            dist.send(token, 1)
            dist.recv(token, 1)
        else:
            dist.recv(token, 0)
            dist.send(token, 0)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    return times


def small_all_reduces(count: int) -> list[float]:
    token = torch.ones(1)
    times = []
    for i in range(count + WARMUP):
        start = time.perf_counter()
        dist.all_reduce(token)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    return times


def stream_gaps(count: int) -> list[float]:
    """Seconds the links idle between two calls of a stream of 1-element all-reduces made as
    the all-reduce benchmark makes its calls, through the project's communicator
    (``real.allreduce.stream_gaps``: from the end of the slowest rank's call to the next
    call's start)."""
    from real.allreduce import stream_gaps as gaps
    from real.comm_torch import TorchCommunicator
    return gaps(TorchCommunicator(None, "gloo", 30.0, check_sizes=False, is_world=True), count,
                WARMUP)


def bulk(rank: int, n_bytes: int, repeats: int, idle_s: float) -> list[float]:
    """Seconds from rank 0's send of ``n_bytes`` to rank 1's acknowledgement (on rank 0)."""
    payload, ack = torch.zeros(n_bytes // 4), torch.zeros(1)
    times = []
    for _ in range(repeats):
        dist.barrier()
        time.sleep(idle_s)
        start = time.perf_counter()
        if rank == 0:
            dist.send(payload, 1)
            dist.recv(ack, 1)
        else:
            dist.recv(payload, 0)
            dist.send(ack, 0)
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pings", type=bounded(int, 1, MAX_PINGS, "a count"), default=200,
                        help="each kind of small message timed this many times: round "
                        "trips, all-reduce calls, stream gaps (default %(default)s)")
    parser.add_argument("--sizes", type=byte_counts, default=[2_000_000, 16_000_000],
                        help="comma-separated byte counts of bulk transfers (fp32 elements: "
                             "multiples of 4)")
    parser.add_argument("--repeats", type=bounded(int, 1, MAX_REPEATS, "a count"), default=3,
                        help="transfers of each size (default %(default)s)")
    parser.add_argument("--idle", type=bounded(float, 0, MAX_IDLE_S, "seconds"), default=0.05,
                        help="seconds idle before each transfer")
    parser.add_argument("--timeout", type=bounded(float, 1, MAX_SECONDS, "seconds"), default=30.0,
                        help="seconds Gloo waits for one operation (a slow link's large transfer "
                             "needs more)")
    parser.add_argument("--json", required=True, help="where rank 0 writes the times")
    args = parser.parse_args(argv)
    odd = [n for n in args.sizes if n % 4 or n > MAX_TRANSFER_BYTES]
    if odd:
        parser.error(f"--sizes must be multiples of 4 bytes (fp32 elements) of at most "
                     f"{MAX_TRANSFER_BYTES}, got {odd[0]}")
    try:
        check_output_file("--json", args.json)
    except ValueError as error:
        parser.error(str(error))
    unset = [name for name in ("HOST_RANK", "NUM_HOSTS", "MASTER_ADDR", "MASTER_PORT")
             if name not in os.environ]
    if unset:
        parser.error(f"{', '.join(unset)} not set: run it on a test bed (python -m real.testbed)")
    try:
        rank, world_size = env_int("HOST_RANK", 0), env_int("NUM_HOSTS", 0)
    except ValueError as error:
        parser.error(str(error))
    if world_size != 2:
        parser.error(f"the Gloo probe runs on exactly 2 hosts, got NUM_HOSTS={world_size}")
    address = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        record = {"ping_rtt_s": round_trips(rank, args.pings),
                  "all_reduce_s": small_all_reduces(args.pings),
                  "stream_gap_s": stream_gaps(args.pings),
                  "bulk": [{"bytes": n, "seconds": bulk(rank, n, args.repeats, args.idle)} for n in args.sizes]}
        dist.barrier()
        if rank == 0:
            write_atomically(args.json, lambda sink: json.dump(record, sink))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
