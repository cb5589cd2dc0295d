"""All-reduce written by hand from point-to-point messages, and a benchmark in nccl-tests' terms.

Two algorithms, both in place on any :class:`~real.comm.Communicator` (torch or MPI engine), any
number of ranks p >= 1, any length, any dtype the engine can move, ops sum/avg/max/min:

- ``naive``: every rank passes whole buffers around the ring for p-1 steps, adding each one it
  receives: (p-1)(alpha + n*beta). Each rank adds in a different order, so float results may
  differ between ranks in the last bits.
- ``ring``: the buffer is cut into p chunks; a reduce-scatter (p-1 steps, rank r ends owning the
  full sum of chunk r+1) then an all-gather (p-1 steps) send 2(p-1)/p*n bytes per rank, the
  bandwidth lower bound. Each chunk is cut into segments of ``segment_bytes`` that flow through
  the ring as a pipeline: a segment is forwarded (non-blocking send) as soon as it is received
  and reduced, while the next segments are still arriving. Every rank ends with identical bits.

``ALGORITHMS`` maps a name to ``fn(comm, tensor, op)``; ``backend`` is the engine's own all-reduce.
A buffer reduced again and again is planned once: ``plan = RingAllReduce(comm, tensor)`` lays
out the ring's chunks, segments, scratch buffers and views, and ``plan(op)`` runs it
(``plan_all_reduce`` gives such a ``run(op)`` for every name).

Benchmark (rank 0 prints a table; ``--json`` writes the rows under ``results``)::

    torchrun --standalone --nproc-per-node 4 real/allreduce.py --sizes 64KB,1MB,16MB \\
        --algorithms ring,naive,backend --json allreduce.json
    mpiexec -n 4 python real/allreduce.py --backend mpi --sizes 64KB,1MB,16MB --json mpi.json

time_s is the median over iterations of the slowest rank's time (each algorithm planned for the
buffer before any call is timed, a barrier before each call, warm-up discarded, algorithms
interleaved so they share the same background load);
algbw = bytes / time_s, busbw = algbw * 2(p-1)/p (nccl-tests' definitions).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if __name__ == "__main__":  # before torch loads OpenMP, which would only warn about a bad value
    from real.thread_env import exit_on_bad_omp_num_threads
    exit_on_bad_omp_num_threads("allreduce.py")

import torch

from dsgd_sim.argparse_oneline import (check_output_files, parse_flag, run_command_line,
                                       write_atomically)
from dsgd_sim.trace import Trace
from dsgd_sim.units import format_bytes, format_rate_Bps, format_time, parse_size
from real.comm import check_op, combine_into, divide_for_avg
from real.local_launch import RankArgumentParser, launcher_local_ranks, machine_memory_bytes

DEFAULT_SEGMENT_BYTES = 4 << 20  # fewest wake-ups on a busy 2-core host; see docs/communication.md
NAIVE_TAG, SCATTER_TAG, GATHER_TAG = 401, 402, 403  # tags of this module's messages
MAX_BUFFER_BYTES = 4 * 10**9  # the benchmark holds a few buffers of each size in memory
BUFFERS_PER_SIZE = 7  # ... at its peak, counted in buffers: the source (drawn as int64), the
                      # work copy, the algorithms' results checked against the engine's (one
                      # rank peaked at 7.07 GB for a 1 GB float32 buffer: `/usr/bin/time -v
                      # python real/allreduce.py --sizes 1GB --iters 1 --warmup 0`); the timing
                      # holds the source, the work copy and each planned ring's scratch (at most
                      # a buffer a ring), fewer with up to five ring variants


def chunk_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """Cut ``numel`` elements into ``parts`` contiguous chunks whose sizes differ by at most 1."""
    base, extra = divmod(numel, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def segment_bounds(start: int, stop: int, segment: int) -> list[tuple[int, int]]:
    """Cut ``[start, stop)`` into pieces of at most ``segment`` elements (none if empty)."""
    return [(a, min(a + segment, stop)) for a in range(start, stop, segment)]


def flat_work_buffer(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``tensor``, or a contiguous copy when no view exists (copied back later)."""
    return tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)


def copy_back(tensor: torch.Tensor, flat: torch.Tensor) -> None:
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view(tensor.shape))


def naive_all_reduce(comm, tensor: torch.Tensor, op: str = "sum") -> None:
    """All-reduce ``tensor`` in place by passing whole buffers around the ring (p-1 steps)."""
    check_op(op)
    comm.check_signature("naive_all_reduce", tensor)
    p, rank = comm.world_size, comm.rank
    if p == 1:
        return
    flat = flat_work_buffer(tensor)
    right, left = (rank + 1) % p, (rank - 1) % p
    outgoing, incoming = flat.clone(), torch.empty_like(flat)
    for _ in range(p - 1):
        receive = comm.irecv(incoming, left, NAIVE_TAG)
        send = comm.isend(outgoing, right, NAIVE_TAG)
        receive.wait()
        send.wait()
        combine_into(flat, incoming, op)
        outgoing, incoming = incoming, outgoing  # pass on what just arrived
    if op == "avg":
        divide_for_avg(flat, p)
    copy_back(tensor, flat)


def ring_all_reduce(comm, tensor: torch.Tensor, op: str = "sum",
                    segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
    """All-reduce ``tensor`` in place: pipelined reduce-scatter then all-gather around the ring.
    Plans the call first (``RingAllReduce``); a buffer reduced again and again (a trainer's
    gradient bucket, the benchmark's buffer) keeps its plan instead (``plan_all_reduce``)."""
    check_op(op)  # before planning, which can be collective
    RingAllReduce(comm, tensor, segment_bytes)(op)


class RingAllReduce:
    """The ring all-reduce of one buffer, planned once and run as often as the buffer needs
    reducing, as MPI's persistent collectives (``MPI_Allreduce_init``) are: ``plan(op)``.

    The plan is everything a call needs besides the data: the buffer cut into a chunk a rank and
    each chunk into segments of ``segment_bytes``, two scratch buffers of a chunk each (one on 2
    ranks), and for each of the 2(p-1) receive steps the views it receives into, reduces and
    forwards. Steps 0 … p-2 are the reduce-scatter's (chunk r-s-1 from the left into a scratch
    buffer, added into its place in the buffer, each segment forwarded as soon as it is
    reduced), steps p-1 … 2p-3 the all-gather's (finished chunk r-t straight into place,
    forwarded but at the last step). Built in every call, this cost a call 0.1-0.3 ms more than
    the rounds it makes on 4 hosts (``experiments/LOG.md``); planned once, a call makes its
    rounds and little else.

    Step s+1's receives are always posted before any segment of step s is sent. Under Gloo a send
    moves no data until the peer has posted the matching receive (a "receive ready" notice travels
    back), and with p = 2 both neighbours are the same peer on one TCP connection: a receive posted
    after a send lets the send's megabytes go first, the notice queues behind them, and the
    peer's data for that receive cannot start until they have all arrived, so the two directions
    take turns instead of overlapping (4 MB at 50 Mbit/s: 1.33 s instead of ~0.7 s).

    The views alias ``tensor``'s memory: the plan holds for that tensor as long as its storage is
    the same (a call whose tensor was resized or given other memory is refused; a non-contiguous
    tensor is copied into a buffer of the plan's own, and back, in each call). With the
    communicator's ``check_sizes`` on, planning is collective: every rank plans at once, and
    ranks that disagree on the size or dtype get a ``CommError`` here."""

    def __init__(self, comm, tensor: torch.Tensor, segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        if segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes!r}")
        comm.check_signature("ring_all_reduce", tensor)
        p, rank = comm.world_size, comm.rank
        self.comm, self.tensor, self.p = comm, tensor, p
        self.planned_for = (tensor.data_ptr(), tensor.numel(), tensor.dtype)
        self.right, self.left = (rank + 1) % p, (rank - 1) % p
        self.first_sends: list[torch.Tensor] = []
        self.steps: list[_RingStep] = []
        if p == 1:  # nothing to send: no buffer of its own, even for a non-contiguous tensor
            return
        self.flat = flat_work_buffer(tensor)
        self.copied = not tensor.is_contiguous()
        segment = max(1, segment_bytes // self.flat.element_size())
        chunks = chunk_bounds(self.flat.numel(), p)
        pieces = [segment_bounds(a, b, segment) for a, b in chunks]
        longest = max(b - a for a, b in chunks)
        scratch = [torch.empty(longest, dtype=self.flat.dtype, device=self.flat.device)
                   for _ in range(2 if p > 2 else 1)]
        self.first_sends = [self.flat[a:b] for a, b in pieces[rank]]
        for step in range(2 * (p - 1)):
            reducing = step < p - 1
            chunk = (rank - step - 1) % p if reducing else (rank - (step - p + 1)) % p
            start = chunks[chunk][0]
            places = [self.flat[a:b] for a, b in pieces[chunk]]
            into = ([scratch[step % 2][a - start:b - start] for a, b in pieces[chunk]]
                    if reducing else places)
            last = step == 2 * (p - 1) - 1
            self.steps.append(_RingStep(
                receive_tag=SCATTER_TAG if reducing else GATHER_TAG, into=into, places=places,
                reduces=reducing, finishes=step == p - 2,
                send_tag=None if last else SCATTER_TAG if step < p - 2 else GATHER_TAG))

    def post(self, step: int) -> list:
        """Post every receive of ``step`` (none past the last step)."""
        if step >= len(self.steps):
            return []
        tag, comm, left = self.steps[step].receive_tag, self.comm, self.left
        return [comm.irecv(into, left, tag) for into in self.steps[step].into]

    def __call__(self, op: str = "sum") -> None:
        check_op(op)
        if (self.tensor.data_ptr(), self.tensor.numel(), self.tensor.dtype) != self.planned_for:
            raise ValueError("the tensor's memory, size or dtype changed since its ring was "
                             "planned (resize_, set_ or a new .data): plan it again")
        if self.p == 1:
            return
        if self.copied:
            self.flat.view(self.tensor.shape).copy_(self.tensor)
        comm, right = self.comm, self.right
        pending = self.post(0)  # before any send: see the class's notes
        sends = [comm.isend(place, right, SCATTER_TAG) for place in self.first_sends]
        for index, step in enumerate(self.steps):
            upcoming = self.post(index + 1)
            for work, into, place in zip(pending, step.into, step.places):
                work.wait()
                if step.reduces:
                    combine_into(place, into, op)
                    if step.finishes and op == "avg":
                        divide_for_avg(place, self.p)  # this rank owns the finished chunk
                if step.send_tag is not None:
                    sends.append(comm.isend(place, right, step.send_tag))
            pending = upcoming
        for work in sends:
            work.wait()
        copy_back(self.tensor, self.flat)


@dataclass(frozen=True)
class _RingStep:
    """One receive step of a planned ring: where its segments arrive (``into``), where they
    belong in the buffer and are forwarded from (``places``), whether they are added there
    (``reduces``, the reduce-scatter) and complete this rank's chunk (``finishes``), and the tag
    they are forwarded with (None: not forwarded)."""

    receive_tag: int
    into: list
    places: list
    reduces: bool
    finishes: bool
    send_tag: int | None


def backend_all_reduce(comm, tensor: torch.Tensor, op: str = "sum") -> None:
    """The engine's own all-reduce (Gloo's, NCCL's or MPI's)."""
    comm.all_reduce(tensor, op)


ALGORITHMS = {"ring": ring_all_reduce, "naive": naive_all_reduce, "backend": backend_all_reduce}


def plan_all_reduce(name: str, comm, tensor: torch.Tensor,
                    segment_bytes: int = DEFAULT_SEGMENT_BYTES):
    """``run(op="sum")``: the all-reduce ``name`` of this one buffer, in place, each time it is
    called. The ring plans once, here (``RingAllReduce``); the others have nothing to plan."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown all-reduce {name!r} (choose from {', '.join(ALGORITHMS)})")
    if name == "ring":
        return RingAllReduce(comm, tensor, segment_bytes)
    all_reduce = ALGORITHMS[name]
    return lambda op="sum": all_reduce(comm, tensor, op)


# -- benchmark ---------------------------------------------------------------------------------
MAX_ITERS = 1_000_000  # per size; the timings of every iteration are kept
MAX_SEED = 2**53  # a rank's buffers are seeded with seed * 1000 + rank, a 64-bit number
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32,
          "int64": torch.int64}


def parse_args(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    from real.comm_cli import add_comm_arguments
    parser = RankArgumentParser(description="Time all-reduce algorithms (nccl-tests' algbw "
                                            "and busbw).")
    parser.add_argument("--sizes", default="64KB,1MB,16MB", help="buffer sizes, comma-separated")
    parser.add_argument("--algorithms", default="ring,naive,backend",
                        help=f"comma-separated, from {', '.join(ALGORITHMS)} (ring@256KB: ring "
                             f"with that segment size)")
    parser.add_argument("--dtype", default="float32", choices=tuple(DTYPES),
                        help="the buffers' element type (default %(default)s)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    parser.add_argument("--segment", default=format_bytes_exact(DEFAULT_SEGMENT_BYTES),
                        help="ring's segment size (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the buffers' contents")
    parser.add_argument("--json", help="write the results to this file (rank 0)")
    parser.add_argument("--trace", help="write a Chrome trace of every timed call, one track per "
                                        "rank (rank 0 writes it)")
    add_comm_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.size_bytes = [parse_flag("--sizes", parse_size, s) for s in args.sizes.split(",")]
        args.segment_bytes = parse_flag("--segment", lambda text: parse_segment(text, args.dtype),
                                       args.segment)
    except ValueError as error:
        parser.error(str(error))
    args.algorithm_names = args.algorithms.split(",")
    for name in args.algorithm_names:
        if name.split("@")[0] not in ALGORITHMS or "@" in name and not name.startswith("ring@"):
            parser.error(f"--algorithms: unknown {name!r} (choose from {', '.join(ALGORITHMS)}; "
                         f"ring@SIZE sets ring's segment size)")
        if name.startswith("ring@"):
            try:
                parse_segment(name[len("ring@"):], args.dtype)
            except ValueError as error:
                parser.error(f"--algorithms: {name!r}: {error}")
    itemsize = torch.empty(0, dtype=DTYPES[args.dtype]).element_size()
    bad = [s for s in args.size_bytes if s <= 0 or s % itemsize]
    if bad:
        parser.error(f"--sizes: {bad[0]} bytes is not a positive multiple of {itemsize} ({args.dtype})")
    if max(args.size_bytes) > MAX_BUFFER_BYTES:
        parser.error(f"--sizes: {max(args.size_bytes)} bytes is more than this benchmark allocates "
                     f"({format_bytes(MAX_BUFFER_BYTES)} per buffer)")
    try:
        local = launcher_local_ranks() or 1
    except ValueError:  # a launcher variable that is no number: the join says so
        local = 1
    needed = BUFFERS_PER_SIZE * max(args.size_bytes) * local
    memory = machine_memory_bytes()
    if needed > memory:
        parser.error(f"--sizes: {local} rank(s) here with buffers of "
                     f"{format_bytes(max(args.size_bytes))} need about {format_bytes(needed)}, "
                     f"more than this machine's "
                     f"{format_bytes(memory)} of memory")
    if not (1 <= args.iters <= MAX_ITERS and 0 <= args.warmup <= MAX_ITERS):
        parser.error(f"--iters must be from 1 to {MAX_ITERS:,} and --warmup from 0 to "
                     f"{MAX_ITERS:,} (got {args.iters}, {args.warmup})")
    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed must be a whole number from 0 to {MAX_SEED:,}, got {args.seed}")
    return parser, args


def parse_segment(text: str, dtype: str) -> int:
    """Ring's segment size ``text`` (``--segment`` or ``ring@SIZE``) in bytes; ``ValueError``
    unless it holds at least one ``dtype`` element and at most the largest buffer allowed."""
    size = parse_size(text)
    if size < torch.empty(0, dtype=DTYPES[dtype]).element_size():
        raise ValueError(f"{text!r} is smaller than one {dtype} element")
    if size > MAX_BUFFER_BYTES:
        raise ValueError(f"{text!r} is more than the largest buffer this benchmark allocates "
                         f"({format_bytes(MAX_BUFFER_BYTES)})")
    return size


def format_bytes_exact(n: int) -> str:
    return f"{n // 2**20}MiB" if n % 2**20 == 0 else f"{n}B"


def make_planner(name: str, segment_bytes: int):
    """``plan(comm, tensor) -> run()``: ``name``'s all-reduce of that buffer, summing in place
    (``plan_all_reduce``); ``ring@256KB`` is ring with 256 KB segments. The benchmark plans its
    buffer before it times the calls, as a trainer plans its gradient buckets once."""
    if name.startswith("ring@"):
        segment_bytes = parse_size(name[len("ring@"):])
        name = "ring"
    return lambda comm, tensor: plan_all_reduce(name, comm, tensor, segment_bytes)


def check_against_backend(comm, planners, source: torch.Tensor) -> None:
    """Each algorithm must reproduce the engine's all-reduce on this buffer (once, untimed)."""
    expected = source.clone()
    comm.all_reduce(expected)
    for name, plan in planners.items():
        got = source.clone()
        plan(comm, got)()
        if not torch.allclose(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max())):
            raise RuntimeError(f"{name} all-reduce disagrees with the backend's")


def call_order(algorithms: int, iterations: int) -> list[tuple[int, int]]:
    """The benchmark's calls, in the order it makes them: (iteration, algorithm index). Each
    iteration calls every algorithm once, starting one further along than the last, so that no
    algorithm always goes first (what a call costs can depend on the call before it)."""
    return [(it, (it + k) % algorithms) for it in range(iterations) for k in range(algorithms)]


def time_size(comm, planners, source: torch.Tensor, iters: int, warmup: int,
              spans: list | None = None, t0: float = 0.0) -> dict[str, float]:
    """Median over iterations of the slowest rank's time, per algorithm (interleaved, in
    ``call_order``). With ``spans``, each timed call of this rank is appended as (algorithm,
    start - t0, seconds)."""
    names = list(planners)
    times = torch.zeros(len(names), iters, dtype=torch.float64)
    work = source.clone()
    runs = [planners[name](comm, work) for name in names]  # planned before any is timed
    for it, i in call_order(len(names), warmup + iters):
        work.copy_(source)
        comm.barrier()
        start = time.perf_counter()
        runs[i]()
        if work.is_cuda:
            torch.cuda.synchronize()
        if it >= warmup:
            times[i, it - warmup] = time.perf_counter() - start
            if spans is not None:
                spans.append((names[i], start - t0, float(times[i, it - warmup])))
    times = max_over_ranks(comm, times)
    return {name: statistics.median(times[i].tolist()) for i, name in enumerate(names)}


def max_over_ranks(comm, values: torch.Tensor) -> torch.Tensor:
    """Collective: the element-wise maximum of ``values`` over the ranks, on the CPU. It travels
    on the communicator's device (NCCL reduces GPU tensors only)."""
    on_device = values.to(comm.device)
    comm.all_reduce(on_device, op="max")
    return on_device.cpu()


def stream_gaps(comm, count: int, warmup: int = 3, copy_bytes: int = 4,
                whole_calls: bool = False) -> list[float]:
    """Seconds the links idle between two calls of a stream of ``count`` all-reduces made as
    ``time_size`` makes the benchmark's (the buffer refilled, a barrier, the call), as the
    benchmark times them: from the end of the slowest rank's call to the start of the next
    (this rank's start to start, less the slowest rank's call). On 4 emulated hosts at 1000
    Mbit/s the slowest rank's call ends 0.05-0.15 ms after rank 0's, so the gap after rank 0's
    own call is that much longer than the one the links get.

    Each call reduces one element of a buffer of ``copy_bytes``, refilled before it as the
    benchmark's at that size: the loop's own work at that size, without its call. With
    ``whole_calls``, each call is the engine's all-reduce of the whole buffer, as the
    benchmark's calls are: such a call leaves the caches and the links as the benchmark's do,
    and the refill and the barrier after it take longer than after a 1-element call. On 2-host
    beds at 1000 Mbit/s, with 1-element calls 0.20-0.25 ms at 1 MB and 0.28-0.55 at 4 MB where
    the benchmark's own gaps were 0.32-0.50 and 0.79-0.97 (four launches on two beds: two of a
    script not kept, two of ``python -m experiments.launch_spread --hosts 2 --launches 2
    --sizes 64B --gap-sizes 64KB,256KB,1MB,4MB --gap-calls element --benchmark
    64KB,256KB,1MB,4MB --iters 15``); with whole calls 0.36-0.37 and 0.88-0.90, where the
    benchmark's were 0.37 and 0.85-0.89 (the same command with ``--gap-calls whole``)."""
    if copy_bytes < 4 or copy_bytes % 4:
        raise ValueError(f"copy_bytes must be a positive multiple of 4, got {copy_bytes}")
    spans: list = []

    def plan(c, work):
        return plan_all_reduce("backend", c, work if whole_calls else work[:1])
    time_size(comm, {"backend": plan}, torch.ones(copy_bytes // 4, device=comm.device), count,
              warmup, spans)
    slowest = max_over_ranks(comm, torch.tensor([seconds for _, _, seconds in spans],
                                                dtype=torch.float64))
    return [b_start - a_start - a_slowest for (_, a_start, _), (_, b_start, _), a_slowest
            in zip(spans, spans[1:], slowest.tolist())]


def whole_call_s(comm, n_bytes: int) -> float:
    """Seconds the slowest rank took for one engine all-reduce of ``n_bytes`` after a barrier
    (every rank gets the same figure): how many such calls fit in a stream's time."""
    return time_size(comm, {"backend": make_planner("backend", DEFAULT_SEGMENT_BYTES)},
                     torch.ones(n_bytes // 4, device=comm.device), 1, 0)["backend"]


def write_trace(path: str, comm, spans: list[tuple[str, int, float, float]]) -> None:
    """Gather every rank's (algorithm, bytes, start, seconds) spans; rank 0 writes the trace.
    Each rank's clock starts after a common barrier, so the tracks line up to within it."""
    names = sorted({name for name, _, _, _ in spans})
    packed = torch.tensor([[names.index(n), b, s, d] for n, b, s, d in spans], dtype=torch.float64,
                          device=comm.device)
    gathered = [torch.empty_like(packed) for _ in range(comm.world_size)] if comm.rank == 0 else None
    comm.gather(packed, gathered, dst=0)
    if comm.rank != 0:
        return
    trace = Trace(process_name=f"all_reduce benchmark ({comm.backend})")
    for rank, rows in enumerate(gathered):
        trace.name_track(rank, f"rank {rank}")
        for index, n_bytes, start_s, dur_s in rows.tolist():
            trace.span(rank, names[int(index)], start_s, dur_s, "communication",
                       bytes=int(n_bytes))
    trace.write(path)


def result_row(name: str, size_bytes: int, p: int, time_s: float) -> dict:
    algbw = size_bytes / time_s
    return {"algorithm": name, "bytes": size_bytes, "world_size": p, "time_s": time_s,
            "algbw_Bps": algbw, "busbw_Bps": algbw * 2 * (p - 1) / p}


def print_table(rows: list[dict]) -> None:
    backend = {r["bytes"]: r["busbw_Bps"] for r in rows if r["algorithm"] == "backend"}
    print(f"{'algorithm':>12} {'size':>8} {'ranks':>5} {'time':>10} {'algbw':>11} {'busbw':>11}"
          f" {'busbw/backend':>13}")
    for r in rows:
        reference = backend.get(r["bytes"], 0.0)  # 0 with one rank: nothing crosses a link
        ratio = f"{r['busbw_Bps'] / reference:.2f}" if reference > 0 else "-"
        print(f"{r['algorithm']:>12} {format_bytes(r['bytes']):>8} {r['world_size']:>5} "
              f"{format_time(r['time_s']):>10} {format_rate_Bps(r['algbw_Bps']):>11} "
              f"{format_rate_Bps(r['busbw_Bps']):>11} {ratio:>13}")


def check_outputs(args) -> None:
    """ValueError naming an output rank 0 could not write."""
    check_output_files({"--json": args.json, "--trace": args.trace})


def main(argv=None) -> None:
    from real.comm_cli import check_outputs_together, open_comm
    parser, args = parse_args(argv)
    with open_comm(parser, args) as comm:
        check_outputs_together(parser, comm, lambda: check_outputs(args))  # rank 0 writes them
        dtype = DTYPES[args.dtype]
        planners = {name: make_planner(name, args.segment_bytes) for name in args.algorithm_names}
        generator = torch.Generator().manual_seed(args.seed * 1000 + comm.rank)
        rows, spans = [], []
        comm.barrier()
        t0 = time.perf_counter()
        for size_bytes in args.size_bytes:
            numel = size_bytes // torch.empty(0, dtype=dtype).element_size()
            source = torch.randint(-100, 100, (numel,), generator=generator).to(dtype).to(comm.device)
            check_against_backend(comm, planners, source)  # with the size check still on
            comm.check_sizes = False  # time the algorithms, not our safety net
            sized: list = []
            medians = time_size(comm, planners, source, args.iters, args.warmup, sized, t0)
            spans += [(name, size_bytes, start, dur) for name, start, dur in sized]
            comm.check_sizes = True
            rows += [result_row(name, size_bytes, comm.world_size, t) for name, t in medians.items()]
        if comm.rank == 0:
            print(f"all_reduce, {comm.world_size} ranks, {comm.engine}/{comm.backend}, {args.dtype}, "
                  f"median of {args.iters} (after {args.warmup} warm-up), ring segment "
                  f"{format_bytes_exact(args.segment_bytes)}, on {platform.node()} "
                  f"({os.cpu_count()} CPUs)")
            print_table(rows)
            if args.json:
                write_json(args, comm, rows)
        if args.trace:
            write_trace(args.trace, comm, spans)


def write_json(args, comm, rows) -> None:
    meta = {"benchmark": "all_reduce", "engine": comm.engine, "backend": comm.backend,
            "world_size": comm.world_size, "dtype": args.dtype, "iterations": args.iters,
            "warmup": args.warmup, "segment_bytes": args.segment_bytes, "seed": args.seed,
            "threads_per_rank": torch.get_num_threads(),
            "machine": {"node": platform.node(), "cpus": os.cpu_count(),
                        "processor": platform.processor() or platform.machine()},
            "results": rows}
    write_atomically(args.json, lambda handle: json.dump(meta, handle, indent=2))


if __name__ == "__main__":
    sys.exit(run_command_line(main))
