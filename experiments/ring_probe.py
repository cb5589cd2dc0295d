"""Time rounds of a ring on the cluster it runs on: what one all-reduce round costs, by size.

A round is what every round-based all-reduce is made of: each rank sends one message of ``n``
bytes to its right neighbour and receives one from its left, all at once. This probe runs chains
of ``--rounds`` such rounds (by default as many as a ring all-reduce on those ranks makes:
2(W - 1), at least 4) back to back after a barrier, at each size of ``--sizes``, through
the same communicator the all-reduces use (Gloo or MPI), and reports per size the median over
``--repeats`` chains of the slowest rank's time to the end of the first round (``first_s``: a
round started on an idle network) and of the later rounds' mean (``next_s``: a round that
follows another), each chain's own in ``first_chains_s`` and ``next_chains_s``, and the time
to the end of each of its rounds in ``ends_chains_s`` (the slowest rank's). After each chain
every rank also times what a hand-written ring does between rounds: adding the buffer that just
arrived into a sum (``reduce_s``, ``reduce_chains_s``). No algorithm: the simulator composes
those (``dsgd_sim.collectives.RoundCosts``)::

    torchrun --nproc-per-node 4 experiments/ring_probe.py --sizes 16KiB,256KiB,4MiB --json rounds.json

With ``--engine-rounds`` it then times the same chains driven from C++ as Gloo's own all-reduce
drives them (``experiments/engine_rounds.py``: each message in two halves in flight, no
interpreter between rounds) at its sizes up to ``--engine-max``, as ``engine_results``:
the rounds Gloo's all-reduce is priced from (``experiments.probe_tables.engine_table``). With
``--ring-rounds`` it times the same sizes' chains driven as ``real/allreduce.py``'s ring drives
its rounds (``ring_chain_marks``: the next receive posted before the current one is waited for,
the addition and the send inside the round, no send waited for until the chain's end), as
``ring_results``: the rounds that ring is priced from (``experiments.probe_tables.ring_table``). On 4
emulated hosts at 1000 Mbit/s a 16 KiB round took 0.19-0.21 ms in the plain chains and
0.23-0.25 ms driven as the ring drives it, its first round 0.29 against 0.45 ms. With
``--stream-gaps N`` it also times how long the links idle between two calls of the benchmark's
stream (``real.allreduce.stream_gaps``), as ``stream_gap_s``: in one full grid 0.11 ms on 2
hosts, 0.28-0.29 ms on 4 and 0.54-0.60 ms on 8, at every rate (the barrier before each call
takes ⌈log2 H⌉ rounds). With ``--gap-sizes SIZES`` as well, it times such a stream at each of
those sizes, the buffer refilled before each call that large as the benchmark's is
(``sized_stream_gaps``): the loop's own work grows with its buffer, and the links idle
meanwhile. Each call of such a stream is the engine's all-reduce of the whole buffer
(``--gap-calls whole``, ``sized_gaps``), as the benchmark's calls move its bytes: after such a
call the refill and the barrier take longer than after a 1-element call (``stream_gaps`` has
the figures: on 2-host beds at 1000 Mbit/s the 1-element calls' gaps came out 0.1-0.25 ms short
of the benchmark's at 1 MB and about 0.5 ms at 4 MB, the whole calls' within 0.04 ms). The probes of the
stored runs before a66db0b reduced one element (``--gap-calls element``), and their 2-host
calls of 256 kB and 1 MB at 1000 Mbit/s came out 2-3% over at the mean.

With ``--calls SIZES`` it also times, at each of those sizes and in turns within this one
launch, a hand-written ring call against the chain its table prices it from (``call_turns``, as
``calls_results``): a ring-driven chain of the 2(W - 1) rounds that a ring call of a chunk of
that size a rank makes, the same chain timed to its sends' completion, the same chain with the
ring's planning inside its timed span (``real.allreduce.RingAllReduce``: its chunks, segments,
scratch buffers and views), the hand-written ring's call planned once (as the benchmark and the
trainers run it) and planned in the call, and the engine's call. Launches of one
bed differ by more than the ring's calls miss their price at 64 kB (``experiments/LOG.md``); in
one launch they do not.

On the test bed it is the calibration of every H-host bed (``experiments/measure.py``, always
with ``--engine-rounds``): it measures the network of H hosts as the all-reduces use it, on
sizes of its own grid, and the gaps the benchmark's loop leaves between calls; the calls of its
sized streams are Gloo's all-reduces, but only the gaps between them are kept. Around an
all-reduce point with the hand-written ring it also times that ring's calls of 64 B a rank
(``--calls 64B``), far below the point's sizes: what such a call costs beyond its chain
(``experiments.model.ring_call_extra``) is the ablation's "rounds, the ring's own work".
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (check_output_file, run_command_line,  # noqa: E402
                                       write_text_atomically)
from dsgd_sim.units import format_bytes, parse_size, parse_time  # noqa: E402
from experiments import engine_rounds  # noqa: E402
from experiments.configs import PROBE_ORDER_HELP, PROBE_ORDERS  # noqa: E402
from real.allreduce import (DEFAULT_SEGMENT_BYTES, MAX_BUFFER_BYTES,  # noqa: E402
                            RingAllReduce, backend_all_reduce, ring_all_reduce, stream_gaps,
                            whole_call_s)
from real.comm import launched_by_mpi  # noqa: E402
from real.comm_cli import add_comm_arguments, check_outputs_together, open_comm  # noqa: E402
from real.local_launch import RankArgumentParser, own_error, report_error  # noqa: E402

TAG = 31
RING_TAG = 32  # the ring-driven rounds (--ring-rounds)
ENGINE_TAG = 33  # and 34: the C++ rounds' two halves (experiments/engine_rounds.py)
# --engine-rounds times the C++-driven rounds up to this size unless --engine-max says otherwise:
# where a round's fixed cost (the ranks' wake-ups, the interpreter) is a large part of it; above,
# both drivers' rounds pay the link, and the model takes the Python-driven rounds there. Where
# that is depends on the link and on how busy the cores are: on 8 hosts at 1000 Mbit/s a 128 KiB
# round took 1.11 ms driven from Python and 1.13 ms from a prototype of the C++ loop on one
# machine, but on a slower one 1.85 ms from Python where Gloo's own 1 MB all-reduce made its
# 125 kB rounds in 1.5 ms (the test bed sets the size by the link's rate:
# experiments.measure.engine_max_bytes)
ENGINE_MAX_BYTES = 64 << 10
# the default sizes: from a latency-sized message up; ×2 apart from 8 KiB to 256 KiB, where a
# round crosses from fitting in a shaper's bucket to paying its bytes at the rate and a straight
# line between two points ×4 apart misprices it, ×4 above
SIZE_GRID = (64, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20, 4 << 20)
MIN_CHAIN_ROUNDS = 4  # so that a chain's later rounds average over at least three
MAX_ROUNDS = MAX_REPEATS = 1000  # the end of every round of every chain is kept in memory
MAX_IDLE_S = 10.0  # --idle: a bucket refills in milliseconds; seconds a chain is a typo
MAX_STREAM_CALLS = 100_000  # --stream-gaps: a call takes about a millisecond on the test bed
# --gap-calls: whole (the default) or element, what each call of a sized stream reduces
GAP_CALLS = ("whole", "element")
# a sized stream of whole calls: as many as fit in this long (after one call timed to count
# them, which also warms the stream up), at least this many, at most --stream-gaps
SIZED_GAP_BUDGET_S = 0.5
SIZED_GAP_LEAST_CALLS = 4


def sized_gaps(comm, n_bytes: int, most: int, calls: str = GAP_CALLS[0]) -> dict:
    """The gaps of a stream of calls whose loop refills a buffer of ``n_bytes`` before each, as
    the benchmark's at that size (``real.allreduce.stream_gaps``): ``most`` calls reducing its
    first element (``calls`` "element"), or (``whole``) the engine's all-reduces of the whole
    buffer, as many as fit in ``SIZED_GAP_BUDGET_S`` by one call's time (at least
    ``SIZED_GAP_LEAST_CALLS``, or ``most`` where that is fewer; a call of seconds so takes its
    least calls' seconds, not the budget): the benchmark's own gaps follow calls that move its
    bytes. The record says which (``calls``)."""
    if calls not in GAP_CALLS:
        raise ValueError(f"calls must be one of {', '.join(GAP_CALLS)}, got {calls!r}")
    if calls == "element":
        return {"bytes": n_bytes, "calls": calls,
                "gaps_s": stream_gaps(comm, most, copy_bytes=n_bytes)}
    count = min(most, max(SIZED_GAP_LEAST_CALLS,
                          int(SIZED_GAP_BUDGET_S / max(whole_call_s(comm, n_bytes), 1e-9))))
    return {"bytes": n_bytes, "calls": calls,
            "gaps_s": stream_gaps(comm, count, warmup=0, copy_bytes=n_bytes, whole_calls=True)}


def chain_rounds(world_size: int) -> int:
    """Rounds per chain on ``world_size`` ranks: as many as the longest all-reduce there (a
    ring's 2(W - 1): reduce-scatter, then all-gather), at least ``MIN_CHAIN_ROUNDS``. What a
    later round costs depends on how long the chain has run when the ranks share cores (on 8
    emulated hosts on 2 cores at 1000 Mbit/s a later 8 KiB round took 1.3-1.6 ms in chains of 4
    rounds and 1.0 ms in chains of 14), so the probe runs the chain length it prices."""
    return max(MIN_CHAIN_ROUNDS, 2 * (world_size - 1))


def chain_marks(comm, buffers: tuple[torch.Tensor, torch.Tensor],
                rounds: int) -> tuple[list[float], torch.Tensor]:
    """After a barrier, ``rounds`` ring rounds back to back: the seconds at the end of each, and
    the buffer the last round received into."""
    outgoing, incoming = buffers
    right, left = (comm.rank + 1) % comm.world_size, (comm.rank - 1) % comm.world_size
    comm.barrier()
    start, marks = time.perf_counter(), []
    for _ in range(rounds):
        receive = comm.irecv(incoming, left, TAG)
        send = comm.isend(outgoing, right, TAG)
        receive.wait()
        send.wait()
        outgoing, incoming = incoming, outgoing  # pass on what arrived, as a ring does
        marks.append(time.perf_counter() - start)
    return marks, outgoing


def ring_chain_marks(comm, buffers: tuple[torch.Tensor, torch.Tensor],
                     rounds: int, setup=None) -> tuple[list[float], torch.Tensor]:
    """After a barrier, ``rounds`` ring rounds driven as ``real/allreduce.py``'s ring drives
    its own (one segment a chunk): the receive of round s + 1 posted before round s's is waited
    for, what arrived in the first half of the chain added into a slot of a buffer of its own and
    that slot sent on at once, what arrived in the second half (the all-gather's) received in
    place and sent on; no send waited for until the chain's end. The seconds at the end of each
    round (after its send is posted), and the buffer the last round received into (the same
    contract as ``chain_marks``). Takes ``rounds + 1`` slots of the message's size, allocated
    and cut into the views each round uses before the barrier, as the ring plans its views
    before its calls (``real.allreduce.RingAllReduce``). ``setup()``, where given, runs first
    inside the timed span (the ring's planning: ``call_turns``)."""
    outgoing, incoming = buffers
    right, left = (comm.rank + 1) % comm.world_size, (comm.rank - 1) % comm.world_size
    slots = list(outgoing.repeat(rounds + 1).view(rounds + 1, -1))  # 0: this rank's own chunk
    scratch, reduce_rounds = (incoming, torch.empty_like(incoming)), rounds // 2
    into = [scratch[step % 2] if step < reduce_rounds else slots[step + 1]
            for step in range(rounds)]  # laid out before the timer, as the ring plans its own

    comm.barrier()
    start, marks = time.perf_counter(), []
    if setup is not None:
        setup()
    pending = comm.irecv(into[0], left, RING_TAG)
    sends = [comm.isend(slots[0], right, RING_TAG)]
    for step in range(rounds):
        upcoming = comm.irecv(into[step + 1], left, RING_TAG) if step + 1 < rounds else None
        pending.wait()
        if step < reduce_rounds:
            slots[step + 1].add_(into[step])
        if step + 1 < rounds:
            sends.append(comm.isend(slots[step + 1], right, RING_TAG))
        pending = upcoming
        marks.append(time.perf_counter() - start)
    for work in sends:
        work.wait()
    return marks, slots[rounds]


def time_addition(arrived: torch.Tensor, total: torch.Tensor) -> float:
    """Seconds to add a buffer that has just arrived (in whatever cache state a round leaves it)
    into a running sum, as a hand-written ring does between its rounds; every rank at once,
    after the same chain."""
    start = time.perf_counter()
    total.add_(arrived)
    return time.perf_counter() - start


def _after_idle(chain, idle_s: float):
    """``chain``, each run after ``idle_s`` seconds of sleep."""
    def idle_then_chain(comm, buffers, rounds):
        time.sleep(idle_s)
        return chain(comm, buffers, rounds)
    return idle_then_chain


MAX_CALL_CHUNK_BYTES = 1 << 20  # --calls: a rank holds about 4 x hosts + 4 buffers this large
                               # (a call's two, the chain's slots and scratch, the planned
                               # ring's scratch; a turn that plans adds two more for a while)
CALL_TURNS = ("chain", "chain_sent", "chain_setup", "ring", "ring_unplanned",  # --calls: in
              "backend")                                                     # turns


def call_turns(comm, sizes: list[int], repeats: int, idle_s: float = 0.0) -> list[dict]:
    """Per size ``n``: in turns, a ring-driven chain of the ring's 2(W - 1) rounds of ``n``
    (``ring_chain_marks``, to its last round's end, as the ring's table prices a call), the same
    chain timed until its sends have completed too (``chain_sent``, as a call waits for its
    sends), the chain with the ring's planning first inside its timed span (``RingAllReduce``:
    its chunks, segments, scratch and views), the hand-written ring's call planned once before
    the turns (``ring``, as the benchmark and the trainers run it) and planned in every call
    (``ring_unplanned``, ``ring_all_reduce``), and the engine's own all-reduce of a W x ``n``
    buffer (a chunk of ``n`` a rank: the chain's rounds), each after a barrier as the benchmark
    times its calls; the median over ``repeats`` turns (``SMALL_FACTOR`` times as many up to
    ``SMALL_BYTES``) of the slowest rank's time of each (``<what>_s``), after one turn of
    warm-up. One launch, so the comparison is free of the spread between launches; a diagnostic
    of the ring's table, and what the ablation's "rounds, the ring's own work" charges
    (``experiments.model.ring_call_extra``). With ``idle_s``, every rank sleeps that long
    before each."""
    world = comm.world_size
    rows = []
    for n in sizes:
        chunk = max(1, n // 4)
        buffers = (torch.ones(chunk), torch.empty(chunk))
        source, work = torch.ones(chunk * world), torch.empty(chunk * world)
        planned = RingAllReduce(comm, work, DEFAULT_SEGMENT_BYTES)

        def chain_sent() -> float:
            started = []
            ring_chain_marks(comm, buffers, 2 * (world - 1),
                             lambda: started.append(time.perf_counter()))
            return time.perf_counter() - started[0]

        def call(all_reduce) -> float:
            work.copy_(source)
            comm.barrier()
            start = time.perf_counter()
            all_reduce(comm, work)
            return time.perf_counter() - start

        turns = {"chain": lambda: ring_chain_marks(comm, buffers, 2 * (world - 1))[0][-1],
                 "chain_sent": chain_sent,
                 "chain_setup": lambda: ring_chain_marks(
                     comm, buffers, 2 * (world - 1),
                     lambda: RingAllReduce(comm, work, DEFAULT_SEGMENT_BYTES))[0][-1],
                 "ring": lambda: call(lambda _comm, _work: planned("sum")),
                 "ring_unplanned": lambda: call(ring_all_reduce),
                 "backend": lambda: call(backend_all_reduce)}
        count = repeats * (SMALL_FACTOR if n <= SMALL_BYTES else 1)
        times = torch.zeros(len(CALL_TURNS), count, dtype=torch.float64)
        for turn in range(count + 1):  # the first turn warms up
            for k, what in enumerate(CALL_TURNS):
                if idle_s:
                    time.sleep(idle_s)
                took = turns[what]()
                if turn:
                    times[k, turn - 1] = took
        comm.all_reduce(times, op="max")  # each turn's time is its slowest rank's
        row = {"bytes": 4 * chunk, "call_bytes": 4 * chunk * world}
        for k, what in enumerate(CALL_TURNS):
            row[f"{what}_s"] = statistics.median(times[k].tolist())
            row[f"{what}_turns_s"] = times[k].tolist()
        rows.append(row)
    return rows


SMALL_BYTES = 256 << 10  # rounds this small take milliseconds, and wake-ups make them noisy:
SMALL_FACTOR = 9         # they get this many times the chains (for about the price of one large one)
COLUMNS = ("first", "next", "reduce")  # per chain: first round, mean later round, reduction


def probe(comm, sizes: list[int], rounds: int, repeats: int, chain=None,
          idle_s: float = 0.0, order: str = PROBE_ORDERS[0]) -> list[dict]:
    """Per size: the median over ``repeats`` chains (``SMALL_FACTOR`` times as many for sizes up
    to ``SMALL_BYTES``) of the slowest rank's first round, mean later round, and addition of
    what arrived last (``reduce_s``), after one warm-up chain per size; every chain's own
    figures too, and the slowest rank's time to the end of each round (``ends_chains_s``).
    By default (``order="blocks"``) each size's chains run one after another, so that a chain
    follows chains of its own size, as a call of the benchmark follows calls of its own size;
    with ``order="interleaved"`` the sizes take turns, so that a burst of other load spreads
    over all of them (a 64 KiB chain then slows the 32 KiB one after it on 8 hosts).
    ``chain(comm, buffers, rounds)`` runs one chain (default: ``chain_marks``, from Python).
    With ``idle_s``, every rank first sleeps that long before each chain, so that a shaped
    link's bucket refills and every chain starts on a full one (by default a chain starts on
    whatever the one before it left)."""
    if order not in PROBE_ORDERS:
        raise ValueError(f"order must be one of {', '.join(PROBE_ORDERS)}, got {order!r}")
    chain = chain_marks if chain is None else chain
    if idle_s:
        chain = _after_idle(chain, idle_s)
    buffers = {n: (torch.ones(max(1, n // 4)), torch.empty(max(1, n // 4))) for n in sizes}
    totals = {n: torch.zeros(max(1, n // 4)) for n in sizes}
    for n in sizes:
        chain(comm, buffers[n], rounds)
    chains = [repeats * (SMALL_FACTOR if n <= SMALL_BYTES else 1) for n in sizes]
    # per chain: the end of each round, then its mean later round and the addition
    ends = torch.zeros(len(sizes), max(chains), rounds, dtype=torch.float64)
    times = torch.zeros(len(sizes), max(chains), 2, dtype=torch.float64)
    runs = [(i, rep) for rep in range(max(chains)) for i in range(len(sizes)) if rep < chains[i]]
    if order == "blocks":
        runs.sort()
    for i, rep in runs:
        marks, arrived = chain(comm, buffers[sizes[i]], rounds)
        ends[i, rep] = torch.tensor(marks, dtype=torch.float64)
        times[i, rep] = torch.tensor([(marks[-1] - marks[0]) / (rounds - 1),
                                      time_addition(arrived, totals[sizes[i]])],
                                     dtype=torch.float64)
    comm.all_reduce(ends, op="max")   # each chain's time is its slowest rank's
    comm.all_reduce(times, op="max")
    rows = []
    for i, n in enumerate(sizes):
        row = {"bytes": 4 * max(1, n // 4)}
        first, (later, reduce) = ends[i, :chains[i], 0], times[i, :chains[i]].T
        per_chain = {c: t.tolist() for c, t in zip(COLUMNS, (first, later, reduce))}
        row.update({f"{c}_s": statistics.median(v) for c, v in per_chain.items()})
        row.update({f"{c}_chains_s": v for c, v in per_chain.items()})
        row["ends_chains_s"] = ends[i, :chains[i]].tolist()
        rows.append(row)
    return rows


def parse_args(argv=None):
    parser = RankArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(f"{n}B" for n in SIZE_GRID),
                        help="message sizes per rank and round, comma-separated (multiples of 4 "
                             "bytes; default: %(default)s)")
    parser.add_argument("--rounds", type=int,
                        help="rounds per chain, at least 2 (default: a ring all-reduce's 2(W - 1) "
                             f"on W ranks, at least {MIN_CHAIN_ROUNDS})")
    parser.add_argument("--repeats", type=int, default=5, help="chains per size (median)")
    parser.add_argument("--engine-rounds", action="store_true",
                        help="also time the rounds as Gloo's own all-reduce makes them (driven "
                             "from C++, two halves in flight; experiments/engine_rounds.py) at the "
                             f"sizes from {engine_rounds.MIN_BYTES} B to --engine-max: "
                             "'engine_results' "
                             "(torch.distributed with Gloo only; builds a C++ extension)")
    parser.add_argument("--ring-rounds", action="store_true",
                        help="also time the rounds as real/allreduce.py's ring drives them (the "
                             "next receive posted first, the addition and the send inside the "
                             "round, sends waited for at the chain's end) at the sizes up to "
                             "--engine-max: 'ring_results'")
    parser.add_argument("--calls", metavar="SIZES",
                        help="also time, at each of these sizes (comma-separated, multiples of 4 "
                             "bytes, up to 1 MiB: a chunk a rank), in turns in this one launch: "
                             "the ring-driven chain of a ring call's rounds (to its last round, "
                             "and to its sends' end), the same with the ring's planning inside "
                             "it, and the hand-written ring's (planned once, and planned in the "
                             "call) and the engine's all-reduce of a chunk of that size a rank: "
                             "'calls_results'")
    parser.add_argument("--engine-max",
                        help="with --engine-rounds or --ring-rounds, the largest size timed that "
                             f"way too (default: {ENGINE_MAX_BYTES}B)")
    parser.add_argument("--idle", default="0s",
                        help="sleep this long before every chain, so that a shaped link's bucket "
                             "refills (e.g. 3ms; default: %(default)s, a chain starts on what the "
                             "one before it left)")
    parser.add_argument("--stream-gaps", type=int, default=0, metavar="N",
                        help="also time a stream of N 1-element all-reduces made as "
                             "real/allreduce.py makes its calls, after the chains: how long the "
                             "links idle between two of its calls, from the end of the slowest "
                             "rank's call to the next call's start ('stream_gap_s', one per "
                             "pair of calls; default: none)")
    parser.add_argument("--gap-sizes", metavar="SIZES",
                        help="with --stream-gaps, also time such a stream at each of these sizes "
                             "(comma-separated, multiples of 4 bytes): the buffer refilled before "
                             "each call that large, as the benchmark's at that size "
                             "('sized_stream_gaps': per size its gaps)")
    parser.add_argument("--gap-calls", choices=GAP_CALLS,
                        help="what each call of a --gap-sizes stream reduces: whole (default: "
                             "the whole buffer with the engine's all-reduce, as the benchmark's "
                             "calls do, as many calls as fit in "
                             f"{SIZED_GAP_BUDGET_S:g} s and at least {SIZED_GAP_LEAST_CALLS}, "
                             "at most --stream-gaps) or element (its first element, --stream-gaps "
                             "calls; the probes of stored runs before the whole calls)")
    parser.add_argument("--order", choices=PROBE_ORDERS, default=PROBE_ORDERS[0],
                        help=PROBE_ORDER_HELP)
    parser.add_argument("--json", help="write the table here (rank 0)")
    add_comm_arguments(parser, gpu=False)
    args = parser.parse_args(argv)
    if args.engine_max is not None and not (args.engine_rounds or args.ring_rounds):
        parser.error("--engine-max needs --engine-rounds or --ring-rounds (the rounds it bounds)")
    if args.engine_max is None:
        args.engine_max = f"{ENGINE_MAX_BYTES}B"
    try:
        args.size_bytes = sorted({parse_size(s) for s in args.sizes.split(",")})
        args.engine_max_bytes = parse_size(args.engine_max)
        args.idle_s = parse_time(args.idle)
        args.gap_bytes = (sorted({parse_size(s) for s in args.gap_sizes.split(",")})
                          if args.gap_sizes else [])
    except ValueError as error:
        parser.error(str(error))
    try:
        args.call_bytes = (sorted({parse_size(s) for s in args.calls.split(",")})
                           if args.calls is not None else [])
    except ValueError as error:
        parser.error(f"--calls: {error}")
    backend = "mpi" if args.backend == "auto" and launched_by_mpi() else args.backend
    if args.engine_rounds and backend == "mpi":  # before building anything (every
        # rank builds, and one leaving before MPI_Init would leave the others waiting in it)
        parser.error(f"--engine-rounds: C++ rounds run on torch.distributed with Gloo, not "
                     f"--backend {backend}" + (" (mpiexec's)" if args.backend == "auto" else ""))
    if not 0 <= args.idle_s <= MAX_IDLE_S:
        parser.error(f"--idle: {args.idle!r} is not a time from 0 to {MAX_IDLE_S:g} s")
    if args.engine_max_bytes <= 0:
        parser.error(f"--engine-max: {args.engine_max!r} is not a positive size")
    bad = [n for n in args.size_bytes if n <= 0 or n % 4]
    if bad:
        parser.error(f"--sizes: {bad[0]} bytes is not a positive multiple of 4")
    if args.size_bytes[-1] > MAX_BUFFER_BYTES:
        parser.error(f"--sizes: {args.size_bytes[-1]} bytes is more than this probe allocates "
                     f"({format_bytes(MAX_BUFFER_BYTES)} per buffer)")
    if not (args.stream_gaps == 0 or 2 <= args.stream_gaps <= MAX_STREAM_CALLS):
        parser.error(f"--stream-gaps must be 0 (none) or from 2 to {MAX_STREAM_CALLS} calls "
                     f"(got {args.stream_gaps})")
    if args.gap_bytes and not args.stream_gaps:
        parser.error("--gap-sizes needs --stream-gaps N (the calls of each size's stream)")
    if args.gap_calls is not None and not args.gap_bytes:
        parser.error("--gap-calls needs --gap-sizes SIZES (the streams whose calls it chooses)")
    args.gap_calls = args.gap_calls or GAP_CALLS[0]
    bad = [n for n in args.gap_bytes if n <= 0 or n % 4 or n > MAX_BUFFER_BYTES]
    if bad:
        parser.error(f"--gap-sizes: {bad[0]} bytes is not a positive multiple of 4 up to "
                     f"{format_bytes(MAX_BUFFER_BYTES)}")
    bad = [n for n in args.call_bytes if n <= 0 or n % 4 or n > MAX_CALL_CHUNK_BYTES]
    if bad:
        parser.error(f"--calls: {bad[0]} bytes is not a positive multiple of 4 up to "
                     f"{MAX_CALL_CHUNK_BYTES >> 20} MiB (a chunk a rank)")
    if not (args.rounds is None or 2 <= args.rounds <= MAX_ROUNDS):
        parser.error(f"--rounds must be from 2 to {MAX_ROUNDS}, got {args.rounds}")
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must be from 1 to {MAX_REPEATS}, got {args.repeats}")
    return parser, args


def main(argv=None) -> None:
    parser, args = parse_args(argv)
    if args.engine_rounds:  # every rank builds (or finds) it before any waits for another
        try:
            engine_rounds.load()
        except engine_rounds.EngineRoundsError as error:  # a node's compiler: each rank says
            sys.exit(report_error(parser.prog, True, own_error(error), 2))
    with open_comm(parser, args, check_sizes=False) as comm:
        check_outputs_together(parser, comm, lambda: check_output_file("--json", args.json))
        if comm.world_size < 2:
            parser.error(f"a ring needs at least 2 ranks, got {comm.world_size}")
        rounds = args.rounds or chain_rounds(comm.world_size)
        record = {"probe": "ring rounds", "world_size": comm.world_size, "engine": comm.engine,
                  "backend": comm.backend, "rounds": rounds, "repeats": args.repeats,
                  "idle_s": args.idle_s, "order": args.order,
                  "threads_per_rank": torch.get_num_threads()}
        if args.engine_rounds:
            try:
                engine_rounds.check_comm(comm)
            except engine_rounds.EngineRoundsError as error:
                parser.error(str(error))
        record["results"] = probe(comm, args.size_bytes, rounds, args.repeats,
                                  idle_s=args.idle_s, order=args.order)
        tables = [("", record["results"])]
        ring_sizes = [n for n in args.size_bytes if n <= args.engine_max_bytes]
        if args.ring_rounds and ring_sizes:
            record["ring_results"] = probe(comm, ring_sizes, rounds, args.repeats,
                                           chain=ring_chain_marks, idle_s=args.idle_s,
                                           order=args.order)
            tables.append(("ring ", record["ring_results"]))
        engine_sizes = [n for n in args.size_bytes
                        if engine_rounds.MIN_BYTES <= n <= args.engine_max_bytes]
        if args.engine_rounds and engine_sizes:
            record["engine_results"] = probe(
                comm, engine_sizes, rounds, args.repeats,
                chain=lambda c, b, k: engine_rounds.chain_marks(c, b, k, ENGINE_TAG),
                idle_s=args.idle_s, order=args.order)
            tables.append(("C++ ", record["engine_results"]))
        if args.call_bytes:
            record["calls_results"] = call_turns(comm, args.call_bytes, args.repeats,
                                                 args.idle_s)
        if args.stream_gaps:
            record["stream_gap_s"] = stream_gaps(comm, args.stream_gaps)
            if args.gap_bytes:
                record["sized_stream_gaps"] = [sized_gaps(comm, n, args.stream_gaps,
                                                          args.gap_calls)
                                               for n in args.gap_bytes]
        if comm.rank == 0:
            for driver, rows in tables:
                for r in rows:
                    print(f"{driver}{r['bytes']:>10} B  first {r['first_s'] * 1e3:9.3f} ms  "
                          f"next {r['next_s'] * 1e3:9.3f} ms  reduce {r['reduce_s'] * 1e3:8.3f} ms")
            for r in record.get("calls_results", []):
                print(f"{r['call_bytes']:>10} B calls: ring-driven chain {r['chain_s'] * 1e3:.3f} ms, "
                      f"to its sends' end {r['chain_sent_s'] * 1e3:.3f} ms, "
                      f"with the ring's planning {r['chain_setup_s'] * 1e3:.3f} ms, the ring's "
                      f"planned call {r['ring_s'] * 1e3:.3f} ms, planned in the call "
                      f"{r['ring_unplanned_s'] * 1e3:.3f} ms, the engine's "
                      f"{r['backend_s'] * 1e3:.3f} ms")
            if record.get("stream_gap_s"):
                print(f"stream of {args.stream_gaps} calls: median gap "
                      f"{statistics.median(record['stream_gap_s']) * 1e3:.3f} ms")
            for sized in record.get("sized_stream_gaps", []):
                print(f"stream of {len(sized['gaps_s']) + 1} calls ({sized['calls']}) refilling "
                      f"{sized['bytes']} B: median gap "
                      f"{statistics.median(sized['gaps_s']) * 1e3:.3f} ms")
            if args.json:
                write_text_atomically(args.json, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    # a rank whose stdout's reader goes keeps its status: a failing rank would end the others
    sys.exit(run_command_line(main, keep_status=True))
