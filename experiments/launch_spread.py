"""How far one test bed's timings move from one launch of its processes to the next.

    sudo python -m experiments.launch_spread --hosts 4 --bandwidth 1000Mbps --launches 6
    sudo python -m experiments.launch_spread --hosts 2 --bandwidth 1000Mbps --benchmark 4B,64KB

An experiment point predicts its benchmark (``real/allreduce.py``) from probes
(``ring_probe.py``) launched before and after it on the same test bed: the same namespaces and
shapers, but new processes. This runs the probe ``--launches`` times on one test bed, each
launch its chains at ``--sizes`` (Python-driven, C++-driven as Gloo's own ring, and as the
hand-written ring drives them) and a stream of 1-element calls (``--stream-gaps``); with
``--benchmark SIZES``, each probe is followed by a launch of the benchmark at those sizes with
a trace, from which the gaps its own stream of calls left are read as the probe reads its
(``trace_gaps``); with ``--gap-sizes``, the probe also times its stream's gaps at those
buffer sizes, its calls as ``--gap-calls`` says (``ring_probe.py``), to set against the
benchmark's at each size. Prints, per launch, the median time of each driver's chains per size, the
probe's median gap and, for the benchmark, each size's median call per algorithm and median
gap; then each figure's range over the launches. ``--json FILE`` writes every launch's figures.
Needs root (the test bed), as every experiment does.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, check_output_file, run_command_line,
                                       write_json_output)
from dsgd_sim.units import format_bytes, parse_size
from experiments import measure
from experiments.measure import (BENCHMARK_FLAGS, add_bed_arguments, add_host_cores_argument,
                                 add_probe_order_argument, rank_command, testbed_config)
from experiments.probe_tables import chain_ends
from experiments.ring_probe import GAP_CALLS, MAX_REPEATS, MAX_STREAM_CALLS
from real.allreduce import MAX_BUFFER_BYTES, MAX_ITERS, MAX_SEED
from real.testbed import TestbedError, scratch_testbed
from real.testbed.bed import run_reporting

DRIVERS = {"python": "results", "engine": "engine_results", "ring": "ring_results"}
MAX_LAUNCHES = 50
LAUNCH_TIMEOUT_S = 300.0


def trace_gaps(events: list[dict]) -> dict[int, list[float]]:
    """Bytes -> seconds between two calls of that size in a benchmark trace
    (``real/allreduce.py --trace``: one track per rank, a span per timed call), as
    ``real.allreduce.stream_gaps`` times a stream: rank 0's start to start, less the slowest
    rank's call (the call the benchmark times). Calls are matched across ranks by their order."""
    spans = [e for e in events if e.get("ph") == "X"]
    tracks: dict[int, list[dict]] = {}
    for span in sorted(spans, key=lambda e: e["ts"]):
        tracks.setdefault(int(span["tid"]), []).append(span)
    if 0 not in tracks or len({len(t) for t in tracks.values()}) != 1:
        raise ValueError("the trace needs rank 0's track and as many calls on every rank's")
    gaps: dict[int, list[float]] = {}
    for k, (call, after) in enumerate(zip(tracks[0], tracks[0][1:])):
        size = int(call["args"]["bytes"])
        if int(after["args"]["bytes"]) != size:
            continue  # the next size's first call follows its own untimed check
        slowest_us = max(track[k]["dur"] for track in tracks.values())
        gaps.setdefault(size, []).append((after["ts"] - call["ts"] - slowest_us) / 1e6)
    return gaps


def probe_figures(record: dict) -> dict:
    """Median seconds of each driver's chains to their end, per size, and the median gap."""
    figures = {}
    for driver, key in DRIVERS.items():
        for size, ends in chain_ends([record.get(key) or []]).items():
            figures[f"{driver} {format_bytes(size)}"] = ends[-1]
    if record.get("stream_gap_s"):
        figures["probe gap"] = statistics.median(record["stream_gap_s"])
    for sized in record.get("sized_stream_gaps") or []:
        figures[f"probe gap {format_bytes(sized['bytes'])}"] = statistics.median(sized["gaps_s"])
    return figures


def benchmark_figures(record: dict, events: list[dict]) -> dict:
    """Median seconds per call of each algorithm and size, and each size's median gap."""
    figures = {f"{r['algorithm']} {format_bytes(r['bytes'])}": r["time_s"]
               for r in record["results"]}
    for size, gaps in sorted(trace_gaps(events).items()):
        figures[f"benchmark gap {format_bytes(size)}"] = statistics.median(gaps)
    return figures


def launch_commands(args, folder: Path, launch: int) -> list[tuple[str, str]]:
    """(what, command) of one launch: the probe, then the benchmark where asked for."""
    probe = rank_command("experiments/ring_probe.py", [
        "--sizes", ",".join(f"{n}B" for n in args.sizes), "--repeats", str(args.repeats),
        "--engine-rounds", "--ring-rounds", "--stream-gaps", str(args.stream_gaps),
        *(["--gap-sizes", ",".join(f"{n}B" for n in args.gap_sizes), "--gap-calls",
           args.gap_calls] if args.gap_sizes else []),
        "--order", args.probe_order, "--threads", "1",
        "--json", str(folder / f"probe{launch}.json")])
    commands = [("probe", probe)]
    if args.benchmark:
        commands.append(("benchmark", rank_command("real/allreduce.py", [
            "--sizes", ",".join(f"{n}B" for n in args.benchmark), "--iters", str(args.iters),
            "--warmup", "1", "--seed", str(args.seed), *BENCHMARK_FLAGS,
            "--json", str(folder / f"bench{launch}.json"),
            "--trace", str(folder / f"trace{launch}.json")])))
    return commands


def run_launches(args) -> list[dict]:
    """Every launch's figures, all on one test bed."""
    launches = []
    with tempfile.TemporaryDirectory(prefix="launch-spread-") as tmp, \
            scratch_testbed(testbed_config(args.hosts, args.bandwidth)) as bed:
        folder = Path(tmp)
        for launch in range(args.launches):
            for what, command in launch_commands(args, folder, launch):
                result = bed.run(command, timeout_s=LAUNCH_TIMEOUT_S, echo=False)
                if not result.ok:
                    raise TestbedError(f"launch {launch}: the {what} failed: "
                                       f"{result.failure_line()}")
            figures = probe_figures(json.loads((folder / f"probe{launch}.json").read_text()))
            if args.benchmark:
                trace = json.loads((folder / f"trace{launch}.json").read_text())
                figures.update(benchmark_figures(
                    json.loads((folder / f"bench{launch}.json").read_text()),
                    trace["traceEvents"]))
            print(f"launch {launch}: " + ", ".join(f"{k} {v * 1e3:.3f} ms"
                                                   for k, v in figures.items()), flush=True)
            launches.append(figures)
    return launches


def print_ranges(launches: list[dict]) -> None:
    for name in launches[0]:
        print(range_line(name, [figures[name] * 1e3 for figures in launches]))


def range_line(name: str, values: list[float]) -> str:
    """One figure's range over the launches (ms). A gap is start to start less the slowest
    call, which can come to zero or less: there a ratio means nothing, and the spread is given."""
    low, high = min(values), max(values)
    spread = f"max/min {high / low:.2f}" if low > 0 else f"max − min {high - low:.3f} ms"
    return (f"{name}: {low:.3f} to {high:.3f} ms (median {statistics.median(values):.3f}, "
            f"{spread})")


def parse_args(argv=None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    add_bed_arguments(parser, hosts=2)
    parser.add_argument("--launches", type=int, default=6, help="probe launches (default 6)")
    parser.add_argument("--sizes", default="64B,16KB", help="the probe's chain sizes")
    parser.add_argument("--repeats", type=int, default=5, help="chains per size and driver")
    parser.add_argument("--stream-gaps", type=int, default=200,
                        help="1-element calls of the probe's stream (default 200)")
    parser.add_argument("--gap-sizes", metavar="SIZES",
                        help="the probe also times its stream's gaps with a buffer of each of "
                             "these sizes (ring_probe.py --gap-sizes)")
    parser.add_argument("--gap-calls", choices=GAP_CALLS,
                        help="what each call of those streams reduces (ring_probe.py "
                             f"--gap-calls; default {GAP_CALLS[0]})")
    parser.add_argument("--benchmark", metavar="SIZES",
                        help="after each probe, the all-reduce benchmark at these sizes, traced")
    parser.add_argument("--iters", type=int, default=45, help="the benchmark's timed iterations")
    parser.add_argument("--seed", type=int, default=0, help="the benchmark's buffers' seed")
    add_host_cores_argument(parser)
    add_probe_order_argument(parser)
    parser.add_argument("--json", help="write every launch's figures here")
    args = parser.parse_args(argv)
    measure.HOST_CORES = args.host_cores
    try:
        check_output_file("--json", args.json)
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
        args.benchmark = [parse_size(s) for s in args.benchmark.split(",")] if args.benchmark else []
        args.gap_sizes = [parse_size(s) for s in args.gap_sizes.split(",")] if args.gap_sizes else []
    except ValueError as error:
        parser.error(str(error))
    if not 2 <= args.launches <= MAX_LAUNCHES:
        parser.error(f"--launches must be from 2 to {MAX_LAUNCHES}, got {args.launches}")
    if not (1 <= args.repeats <= MAX_REPEATS and 1 <= args.iters <= MAX_ITERS
            and 2 <= args.stream_gaps <= MAX_STREAM_CALLS and 0 <= args.seed <= MAX_SEED):
        parser.error(f"--repeats must be from 1 to {MAX_REPEATS:,}, --iters from 1 to "
                     f"{MAX_ITERS:,}, --stream-gaps from 2 to {MAX_STREAM_CALLS:,} and --seed "
                     f"from 0 to {MAX_SEED:,}, got {args.repeats}, {args.iters}, "
                     f"{args.stream_gaps} and {args.seed}")
    if any(n < 4 or n % 4 for n in args.sizes + args.benchmark + args.gap_sizes):
        parser.error("--sizes, --gap-sizes and --benchmark take whole float32 buffers: "
                     "multiples of 4 bytes")
    if args.gap_calls is not None and not args.gap_sizes:
        parser.error("--gap-calls needs --gap-sizes SIZES (the streams whose calls it chooses)")
    args.gap_calls = args.gap_calls or GAP_CALLS[0]
    if any(n > MAX_BUFFER_BYTES for n in args.gap_sizes):
        parser.error(f"--gap-sizes: at most {format_bytes(MAX_BUFFER_BYTES)} a buffer, as the "
                     f"probe allocates")
    return parser, args


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    status, launches = run_reporting("launch_spread", lambda: run_launches(args))
    if status:
        return status
    print_ranges(launches)
    return write_json_output("launch_spread", "--json", args.json, {
        "hosts": args.hosts, "bandwidth_bps": args.bandwidth, "launches": launches})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
