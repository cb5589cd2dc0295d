"""One all-reduce point in one launch: the ring probe, the benchmark, the probe again, all in the
same processes.

The all-reduce experiment prices each point from the ring rounds its own test bed ran just
before and just after it (``experiments/ring_probe.py``, ``experiments.measure.bracket``). Run as
three launches, each starts its processes anew, and on 4 or 8 emulated hosts at 1000 Mbit/s each
launch runs in a state of its own: six launches on one 4-host bed took the ring's 64 kB call
0.95 to 1.26 ms, while the probe's chains launched before them told nothing of which
(``python -m experiments.launch_spread``). In one launch the probe's chains and the benchmark's
calls share the processes, and with them that state. The probe still times only rounds, never
an all-reduce; the benchmark is ``real/allreduce.py``'s (``real.allreduce.benchmark``)::

    torchrun --nproc-per-node 4 experiments/allreduce_point.py --sizes 64KB,1MB --iters 45,9 \\
        --probe-sizes 64B,16KiB,64KiB --ring-rounds --stream-gaps 200 --json point.json

Writes (rank 0) ``results``, the benchmark's rows as ``real/allreduce.py --json`` writes them,
and ``rounds_before`` and ``rounds_after``, the probe's records as ``ring_probe.py --json``
writes them (always with ``--engine-rounds``: Gloo through torch.distributed only).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script by torchrun

from dsgd_sim.argparse_oneline import OneLineArgumentParser, check_output_file  # noqa: E402
from experiments import engine_rounds, ring_probe  # noqa: E402
from real import allreduce  # noqa: E402
from real.comm_cli import add_comm_arguments, open_comm  # noqa: E402


def parse_args(argv=None):
    """This launch's arguments, and the probe's and the benchmark's as their own parsers read
    them (so each is checked as those scripts check it)."""
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", required=True, help="the benchmark's buffer sizes")
    parser.add_argument("--iters", default="20",
                        help="timed iterations: one number for every size, or one per size")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations per size")
    parser.add_argument("--algorithms", default="ring,naive,backend")
    parser.add_argument("--seed", type=int, default=0, help="seed of the buffers' contents")
    parser.add_argument("--probe-sizes", required=True, help="the probe's round sizes")
    parser.add_argument("--rounds", type=int, help="rounds per chain (default: a ring's own)")
    parser.add_argument("--repeats", type=int, default=3, help="chains per size, each probe")
    parser.add_argument("--engine-max", default=f"{ring_probe.ENGINE_MAX_BYTES}B")
    parser.add_argument("--ring-rounds", action="store_true")
    parser.add_argument("--stream-gaps", type=int, default=0, metavar="N")
    parser.add_argument("--idle", default="0s")
    parser.add_argument("--json", help="write the point here (rank 0)")
    parser.add_argument("--trace", help="a Chrome trace of the benchmark's timed calls")
    add_comm_arguments(parser)
    args = parser.parse_args(argv)
    comm_argv = ["--backend", args.backend, "--timeout", args.timeout, "--threads",
                 str(args.threads)]
    try:
        check_output_file("--json", args.json)
        sizes = args.sizes.split(",")
        iters = [int(n) for n in args.iters.split(",")]
        if len(iters) == 1:
            iters *= len(sizes)
        if len(iters) != len(sizes):
            raise ValueError(f"--iters: {len(iters)} counts for {len(sizes)} sizes")
    except ValueError as error:
        parser.error(str(error))
    _, args.bench = allreduce.parse_args(
        ["--sizes", args.sizes, "--algorithms", args.algorithms, "--iters", str(max(iters)),
         "--warmup", str(args.warmup), "--seed", str(args.seed),
         *(["--trace", args.trace] if args.trace else []), *comm_argv])
    if min(iters) < 1:
        parser.error(f"--iters must be at least 1, got {min(iters)}")
    args.bench.iters_per_size = iters
    _, args.probe = ring_probe.parse_args(
        ["--sizes", args.probe_sizes, *(["--rounds", str(args.rounds)] if args.rounds else []),
         "--repeats", str(args.repeats), "--engine-rounds", "--engine-max", args.engine_max,
         *(["--ring-rounds"] if args.ring_rounds else []), "--stream-gaps", str(args.stream_gaps),
         "--idle", args.idle, *comm_argv])
    return parser, args


def main(argv=None) -> None:
    parser, args = parse_args(argv)
    try:  # every rank builds (or finds) it before any waits for another
        engine_rounds.load()
    except engine_rounds.EngineRoundsError as error:
        parser.error(str(error))
    bench = args.bench
    with open_comm(parser, args, check_sizes=False) as comm:
        if comm.world_size < 2:
            parser.error(f"a ring needs at least 2 ranks, got {comm.world_size}")
        try:
            engine_rounds.check_comm(comm)
        except engine_rounds.EngineRoundsError as error:
            parser.error(str(error))
        before = ring_probe.probe_record(comm, args.probe)
        comm.check_sizes = True
        runners = {name: allreduce.make_runner(name, bench.segment_bytes)
                   for name in bench.algorithm_names}
        rows, spans = allreduce.benchmark(comm, runners, bench.size_bytes, bench.iters_per_size,
                                          bench.warmup, allreduce.DTYPES[bench.dtype], bench.seed)
        comm.check_sizes = False
        after = ring_probe.probe_record(comm, args.probe)
        if comm.rank == 0 and args.json:
            Path(args.json).write_text(json.dumps(
                {"results": rows, "iterations": bench.iters_per_size, "warmup": bench.warmup,
                 "rounds_before": before, "rounds_after": after}, indent=1) + "\n")
        if args.trace:
            allreduce.write_trace(args.trace, comm, spans)


if __name__ == "__main__":
    main()
