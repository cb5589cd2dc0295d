"""Each all-reduce call by where it falls in the benchmark's rotation: measured and predicted.

    sudo python -m experiments.call_positions --hosts 4 --bandwidth 1000Mbps --beds 4

The benchmark (``real/allreduce.py``) times its algorithms taking turns (``call_order``), so a
call follows a different pair of calls from one iteration to the next, and where those sent
more than the link refills, it starts on fewer tokens in the shaper's bucket. The benchmark
reports the median over all of an algorithm's calls; this shows what it is the median of. On
each of ``--beds`` fresh test beds it runs what one point of the all-reduce experiment runs
there (``experiments.measure.run_bracketed``: the ring probe before and after, the benchmark
between, here traced), and prints for every size, algorithm and position (the two calls before
it, ``naive<ring<backend``: a naive call after a ring call after Gloo's) the median of the
slowest rank's calls there, and what the model predicts for that position
(``experiments.model.predict_stream_rotation_s``) from the bed's own probes and a network
calibration (``--calibration``: a run's ``calibration.json``, or ``measure``: calibrate the
network of this machine first, on a 2-host bed at the rate, as a quick run does). Then, per
position, the range over the beds of both and the median error; and, per position, the gap
before its calls read from the trace beside the gap the model takes from the probes
(``measured_gaps``). ``--json FILE`` writes every bed's figures and its probes' round table,
``--trace FILE`` every bed's benchmark trace (a process per bed); a run stopped or failing
part-way keeps the beds it finished.
Needs root (the test bed), as every experiment does.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type, check_output_files,
                                       read_json, run_command_line, write_json_output)
from dsgd_sim.units import format_bytes, parse_size
from experiments.configs import ALLREDUCE_ALGORITHMS, bed_label
from experiments import measure
from experiments.measure import (BENCHMARK_FLAGS, BRACKET_STREAM_CALLS, add_bed_arguments,
                                 add_host_cores_argument, add_probe_order_argument,
                                 calibrate_rate, round_sizes_up_to, run_bracketed,
                                 script_step, testbed_config)
from experiments.model import NetworkInputs, predict_stream_rotation_s
from real.allreduce import MAX_ITERS, MAX_SEED, call_order
from real.testbed.bed import run_reporting

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CALIBRATION = REPO / "experiments" / "results" / "full" / "calibration.json"
MEASURE = "measure"  # --calibration: calibrate this machine's network first
BED_TIMEOUT_S = 900.0
MAX_BEDS = 20
# the figures of a calibration record that the model reads (NetworkInputs.from_calibration)
CALIBRATION_FIELDS = ("goodput_bps", "gloo.latency_s", "gloo.all_reduce_1_element_s.median",
                      "latency_s", "frame_bytes", "duplex.goodput_bps", "gloo.stream_gap_s.median")


def position(algorithms: list[str], calls: list[int], k: int) -> str:
    """The name of call ``k``'s place in a sequence of calls (indices into ``algorithms``): its
    algorithm, then the one before it and the one before that (``naive<ring<backend``)."""
    return "<".join(algorithms[calls[j]] for j in (k, k - 1, k - 2))


def measured_positions(events: list[dict]) -> dict[int, dict[str, float]]:
    """Bytes -> position -> the median seconds of the slowest rank's calls there, from a
    benchmark trace (``real/allreduce.py --trace``: one track per rank, a span per timed call,
    matched across ranks by their order). A size's first two calls have no position."""
    return _by_position(events, lambda spans, before: max(s["dur"] for s in spans) / 1e6)


def measured_gaps(events: list[dict]) -> dict[int, dict[str, float]]:
    """Bytes -> position -> the median gap before the calls there, as the probes time the gap
    the model takes (``real.allreduce.stream_gaps``, ``NetworkInputs.call_gap_at``): per call,
    each rank's time from the start of the call before it to this one's start, less the slowest
    rank's time of the call before (the barrier and the loop's own work, when the links idle
    and the shaper's bucket refills), the median over the ranks. Same trace as
    ``measured_positions``."""
    def gap(spans, before):
        slowest = max(b["dur"] for b in before)
        return statistics.median((s["ts"] - b["ts"] - slowest) / 1e6
                                 for s, b in zip(spans, before))
    return _by_position(events, gap)


def _by_position(events: list[dict], value) -> dict[int, dict[str, float]]:
    """Bytes -> position -> the median of ``value(spans, spans_before)`` over the calls there,
    where ``spans`` are every rank's span of one call and ``spans_before`` of the call before
    it (``measured_positions``)."""
    tracks: dict[int, list[dict]] = {}
    for span in sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"]):
        tracks.setdefault(int(span["tid"]), []).append(span)
    if not tracks or len({len(t) for t in tracks.values()}) != 1:
        raise ValueError("the trace needs as many calls on every rank's track")
    calls = list(zip(*tracks.values()))  # per call, every rank's span
    by_size: dict[int, list[tuple[str, float]]] = {}
    for spans, before in zip(calls, [None, *calls]):
        names = {s["name"] for s in spans}
        if len(names) != 1 or len({int(s["args"]["bytes"]) for s in spans}) != 1:
            raise ValueError("the ranks' tracks disagree on the order of the calls")
        size = int(spans[0]["args"]["bytes"])
        # a size's first call follows another size's (or none): it has no position anyway
        same = before is not None and int(before[0]["args"]["bytes"]) == size
        by_size.setdefault(size, []).append(
            (names.pop(), value(spans, before) if same else math.nan))
    out: dict[int, dict[str, float]] = {}
    for size, seq in by_size.items():
        names = sorted({name for name, _ in seq})
        indices = [names.index(name) for name, _ in seq]
        samples: dict[str, list[float]] = {}
        for k in range(2, len(seq)):
            if not math.isnan(seq[k][1]):  # a gap after another size's call: none
                samples.setdefault(position(names, indices, k), []).append(seq[k][1])
        out[size] = {p: statistics.median(v) for p, v in samples.items()}
    return out


def predicted_positions(algorithms: list[str], hosts: int, n_bytes: int,
                        net: NetworkInputs) -> dict[str, float]:
    """Position -> predicted seconds of the call there, over a settled rotation of the stream
    (``predict_stream_rotation_s``; the rotation repeats, so the calls before its first are its
    last)."""
    rotation = predict_stream_rotation_s(algorithms, hosts, n_bytes, net)
    calls = [a for _, a in call_order(len(algorithms), len(algorithms))]
    taken = [0] * len(algorithms)
    out = {}
    for k, a in enumerate(calls):
        out[position(algorithms, calls, k)] = rotation[a][taken[a]]
        taken[a] += 1
    return out


def bed_step(args) -> str:
    """The benchmark as a point of the all-reduce experiment runs it, traced (a
    ``script_step``)."""
    return script_step("real/allreduce.py", [
        "--sizes", ",".join(f"{n}B" for n in args.sizes), "--algorithms",
        ",".join(ALLREDUCE_ALGORITHMS), "--iters", str(args.iters), "--warmup", "1",
        "--seed", str(args.seed), *BENCHMARK_FLAGS], "bench.json") + " --trace {out}/trace.json"


def run_bed(args, net: NetworkInputs, bed: int) -> tuple[dict, dict, dict]:
    """One bed's figures (per size and position, measured and predicted seconds, and the gap
    before the calls there, measured and as the model takes it), the round table its probes
    gave (``run_bracketed``), from which they were predicted, and its benchmark's trace."""
    files, rounds = run_bracketed(
        testbed_config(args.hosts, args.bandwidth), [bed_step(args)],
        ("bench.json", "trace.json"), f"bed {bed} ({bed_label(args.hosts, args.bandwidth)})",
        BED_TIMEOUT_S, round_sizes_up_to(args.probe_up_to, quick=False), ring=True,
        stream_gaps=BRACKET_STREAM_CALLS, gap_sizes=tuple(args.sizes))
    events = files["trace.json"]["traceEvents"]
    measured, gaps = measured_positions(events), measured_gaps(events)
    net = net.with_rounds(args.hosts, rounds)
    figures = {}
    for size in args.sizes:
        predicted = predicted_positions(list(ALLREDUCE_ALGORITHMS), args.hosts, size, net)
        figures[format_bytes(size)] = {
            p: {"measured_s": measured[size][p], "predicted_s": predicted[p],
                "gap_s": gaps[size][p], "gap_predicted_s": net.call_gap_at(size)}
            for p in sorted(predicted) if p in measured.get(size, {})}
        medians = {r["algorithm"]: r["time_s"] for r in files["bench.json"]["results"]
                   if r["bytes"] == size}
        figures[format_bytes(size)].update(
            {f"{a} (median)": {"measured_s": medians[a],
                               "predicted_s": statistics.median(
                                   predicted[p] for p in predicted if p.startswith(f"{a}<"))}
             for a in ALLREDUCE_ALGORITHMS if a in medians})
    for size, rows in figures.items():
        print(f"bed {bed}, {size}: " + ", ".join(
            f"{p} {r['measured_s'] * 1e3:.3f} ms ({r['predicted_s'] * 1e3:.3f})"
            + (f" after a gap of {r['gap_s'] * 1e3:.3f} ms ({r['gap_predicted_s'] * 1e3:.3f})"
               if "gap_s" in r else "")
            for p, r in rows.items()), flush=True)
    return figures, rounds, files["trace.json"]


def print_summary(beds: list[dict]) -> None:
    """Per size and position: the measured and predicted range over the beds, median error."""
    for size in beds[0]:
        print(f"{size}: position: measured (predicted) range over {len(beds)} beds; median "
              f"error; the gap before the calls, measured (as the model takes it)")
        for p in beds[0][size]:
            rows = [b[size][p] for b in beds if p in b[size]]
            measured = [r["measured_s"] * 1e3 for r in rows]
            predicted = [r["predicted_s"] * 1e3 for r in rows]
            error = statistics.median((r["predicted_s"] - r["measured_s"]) / r["measured_s"]
                                      for r in rows)
            gaps = [(r["gap_s"] * 1e3, r["gap_predicted_s"] * 1e3) for r in rows if "gap_s" in r]
            print(f"  {p}: {min(measured):.3f}-{max(measured):.3f} ms "
                  f"({min(predicted):.3f}-{max(predicted):.3f}); {error:+.1%}" + (
                      f"; gap {min(g for g, _ in gaps):.3f}-{max(g for g, _ in gaps):.3f} ms "
                      f"({min(m for _, m in gaps):.3f}-{max(m for _, m in gaps):.3f})"
                      if gaps else ""))


def check_calibration(path: str, record: dict) -> None:
    """Refuse a calibration record where a figure the model reads (``CALIBRATION_FIELDS``) is
    given and is not a positive finite number: ``ValueError`` naming the file and the field (a
    rate of 0 or a latency of ``"abc"`` would fail only once the test beds have run). A figure
    left out passes: ``from_calibration`` refuses a record without the ones it needs."""
    for name in CALIBRATION_FIELDS:
        value = record
        for key in name.split("."):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and 0 < value < math.inf):
                raise ValueError(f"--calibration {path}: {name} must be a positive finite "
                                 f"number, got {value!r}")


def load_calibration(path: str, bandwidth_bps: float) -> NetworkInputs:
    """The calibration record at ``bandwidth_bps`` in a run's ``calibration.json``."""
    try:
        records = read_json(path)
        by_rate = {float(c["bandwidth_bps"]): c for c in records}
        if bandwidth_bps not in by_rate:
            rates = ", ".join(f"{r / 1e6:g}" for r in sorted(by_rate)) or "none"
            raise ValueError(f"no calibration at {bandwidth_bps / 1e6:g} Mbit/s "
                             f"(it has {rates} Mbit/s)")
        check_calibration(path, by_rate[bandwidth_bps])
        return NetworkInputs.from_calibration(by_rate[bandwidth_bps])
    except (OSError, json.JSONDecodeError, TypeError, KeyError) as error:
        raise ValueError(f"--calibration {path}: not a run's calibration.json ({error})") \
            from error


def parse_args(argv=None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    add_bed_arguments(parser, hosts=4)
    parser.add_argument("--beds", type=int, default=3, help="fresh test beds (default 3)")
    parser.add_argument("--sizes", default="64KB", help="the benchmark's sizes (default 64KB)")
    parser.add_argument("--iters", type=int, default=300,
                        help="the benchmark's timed iterations (default 300)")
    parser.add_argument("--probe-up-to", type=argparse_type(parse_size, "size"),
                        default=parse_size("16MB"),
                        help="the probe's sizes reach this one, as the point of the all-reduce "
                             "experiment whose largest size it is (default 16MB)")
    parser.add_argument("--calibration", default=str(DEFAULT_CALIBRATION),
                        help="a run's calibration.json (default: the committed full grid's), "
                             f"or '{MEASURE}': calibrate this machine's network first (about "
                             "10 s; needed on any other machine)")
    parser.add_argument("--seed", type=int, default=0, help="the benchmark's buffers' seed")
    parser.add_argument("--json", help="write every bed's figures and probes here")
    parser.add_argument("--trace", help="write every bed's benchmark trace here (Chrome trace "
                                        "format: a process per bed, a track per rank)")
    add_host_cores_argument(parser)
    add_probe_order_argument(parser)
    args = parser.parse_args(argv)
    measure.HOST_CORES, measure.PROBE_ORDER = args.host_cores, args.probe_order
    try:
        check_output_files({"--json": args.json, "--trace": args.trace},
                           {"the --calibration file": None if args.calibration == MEASURE
                            else args.calibration})
        args.sizes = list(dict.fromkeys(parse_size(s) for s in args.sizes.split(",")))
    except ValueError as error:
        parser.error(str(error))
    if not 1 <= args.beds <= MAX_BEDS:
        parser.error(f"--beds must be from 1 to {MAX_BEDS}, got {args.beds}")
    if not (3 <= args.iters <= MAX_ITERS and 0 <= args.seed <= MAX_SEED):
        parser.error(f"--iters must be from 3 (a position needs two calls before it) to "
                     f"{MAX_ITERS:,} and --seed from 0 to {MAX_SEED:,}, got {args.iters} and "
                     f"{args.seed}")
    if any(n <= 0 or n % (4 * args.hosts) for n in args.sizes):
        parser.error(f"--sizes must be positive multiples of 4 x hosts bytes, got "
                     f"{', '.join(f'{n} B' for n in args.sizes)}")
    return parser, args


def measured_calibration(bandwidth_bps: float) -> tuple[NetworkInputs, dict]:
    """This machine's network at ``bandwidth_bps``, calibrated now on a 2-host test bed (the
    quick run's calibration, without ring rounds: each bed's own probes give those), and its
    record."""
    record = calibrate_rate(bandwidth_bps, quick=True)
    return NetworkInputs.from_calibration(record), record


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    net, calibration = None, args.calibration
    if args.calibration != MEASURE:
        try:
            net = load_calibration(args.calibration, args.bandwidth)
        except ValueError as error:
            parser.error(str(error))

    beds: list[tuple[dict, dict, dict]] = []  # the beds finished, kept if a later one fails

    def work():
        nonlocal net, calibration
        if args.calibration == MEASURE:
            net, calibration = measured_calibration(args.bandwidth)
        for bed in range(args.beds):
            beds.append(run_bed(args, net, bed))

    stopped, _ = run_reporting("call_positions", work)
    if not beds:
        return stopped
    if stopped:
        print(f"call_positions: {len(beds)} of {args.beds} beds finished; their figures follow"
              f"{' and are written' if args.json or args.trace else ''}", file=sys.stderr)
    print_summary([figures for figures, _, _ in beds])
    status = write_json_output("call_positions", "--trace", args.trace, beds_trace(
        [trace for _, _, trace in beds], bed_label(args.hosts, args.bandwidth)), indent=None)
    # each bed's probes too, so that its calls can be priced again by a later model
    return write_json_output("call_positions", "--json", args.json, {
        "hosts": args.hosts, "bandwidth_bps": args.bandwidth, "calibration": calibration,
        "beds": [figures for figures, _, _ in beds],
        "probes": [rounds for _, rounds, _ in beds]}) or status or stopped


def beds_trace(traces: list[dict], label: str) -> dict:
    """The beds' benchmark traces as one Chrome trace: bed ``b``'s events as process ``b``,
    named ``bed b (label)``."""
    events = []
    for bed, trace in enumerate(traces):
        for event in trace["traceEvents"]:
            event = {**event, "pid": bed}
            if event.get("name") == "process_name":
                event["args"] = {"name": f"bed {bed} ({label})"}
            events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


if __name__ == "__main__":
    sys.exit(run_command_line(main))
