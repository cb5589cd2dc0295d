"""What a stream of all-reduce calls puts on the wire, beyond its payload.

    sudo python -m experiments.wire_bytes --hosts 2 --bandwidth 200Mbps
    sudo python -m experiments.wire_bytes --hosts 4 --bandwidth 200Mbps --sizes 64KB,256KB

The model prices a stream of calls that the link paces from the calls' payload at the
calibration's duplex payload rate (``experiments.model.stream_rotation_s``). The shapers count
more than that: every message's own header and last, partial frame, the notice a Gloo receiver
sends back for each message, ACKs that find no data to ride in, and the barrier before each
call. This runs the benchmark (``real/allreduce.py``) on one test bed, one algorithm and one
size a launch: ``--iters`` calls, three times as many, and ``--iters`` again with a trace. Each
host's uplink shaper counts its bytes and packets before and after each of the first two; the
difference between them, per call, is what one cycle of the stream (barrier and call) sends,
the launches' start-up and ending cancelling (but for the benchmark's closing all-reduce of its
timings, 8 B a call, counted with the payload; the third launch, traced, is not counted, as the
trace's gathering grows with the calls too). From the trace: the stream's period (rank 0's start
to start) and the gap before a call (``launch_spread.trace_gaps``); the call is the record's. A
stream paced by its link has a period of its cycle's bytes at the link's rate.

Last, a least-squares fit over every algorithm and size of the cycle's bytes as
``per_call + per_payload_byte × payload + per_message × messages``, the payload and messages
being what each rank sends in one call (``experiments.model.allreduce_messages``,
``wire_messages``): what a message costs on the wire beyond its payload, and what a cycle costs
beyond its messages (the barrier's). Needs two sizes at least, and root (the test bed).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, check_output_file, run_command_line,
                                       write_json_output)
from dsgd_sim.units import format_bytes, parse_size
from experiments import measure
from experiments.launch_spread import trace_gaps
from experiments.measure import (BENCHMARK_FLAGS, add_bed_arguments, add_host_cores_argument,
                                 rank_command, testbed_config)
from experiments.model import SIM_ALGORITHM, allreduce_messages, wire_messages
from real.allreduce import MAX_BUFFER_BYTES, MAX_ITERS, MAX_SEED
from real.testbed import TestbedError, scratch_testbed
from real.testbed.bed import run_reporting

LAUNCH_TIMEOUT_S = 300.0
LONGER = 3  # the second launch makes this many times the first one's calls


def per_call(before: list[dict], after: list[dict], calls: int) -> tuple[float, float]:
    """(bytes, packets) one call adds, averaged over the hosts: ``before`` and ``after`` are
    each launch's counter differences per host (``{"sent_bytes", "sent_packets"}``), the
    second launch making ``calls`` calls more than the first."""
    if len(before) != len(after) or not before or calls <= 0:
        raise ValueError("need both launches' counts on every host and more calls in the second")
    def mean_added(key: str) -> float:
        return statistics.mean(b[key] - a[key] for a, b in zip(before, after)) / calls
    return mean_added("sent_bytes"), mean_added("sent_packets")


def trace_period_s(events: list[dict]) -> float:
    """Median seconds from one call's start to the next on rank 0's track of a trace."""
    starts = sorted(e["ts"] for e in events if e.get("ph") == "X" and int(e["tid"]) == 0)
    if len(starts) < 2:
        raise ValueError("the trace needs two calls on rank 0's track")
    return statistics.median(b - a for a, b in zip(starts, starts[1:])) / 1e6


def fit_overheads(rows: list[dict]) -> dict:
    """Least squares of each row's ``cycle_bytes`` over (1, ``payload_bytes``, ``messages``):
    ``per_call_bytes``, ``per_payload_byte`` and ``per_message_bytes``, and the largest
    residual. Needs three rows whose payloads and message counts are not in proportion."""
    if len(rows) < 3:
        raise ValueError(f"the fit needs at least 3 rows, got {len(rows)}")
    a = np.array([[1.0, r["payload_bytes"], r["messages"]] for r in rows])
    y = np.array([r["cycle_bytes"] for r in rows])
    if np.linalg.matrix_rank(a) < 3:
        raise ValueError("the rows do not tell a message from a payload byte apart: give two "
                         "sizes at least, or algorithms that send different messages")
    (c, per_byte, per_message), *_ = np.linalg.lstsq(a, y, rcond=None)
    return {"per_call_bytes": float(c), "per_payload_byte": float(per_byte),
            "per_message_bytes": float(per_message),
            "largest_residual_bytes": float(np.max(np.abs(a @ [c, per_byte, per_message] - y)))}


def counters(bed) -> list[dict]:
    return [bed.link_counters(rank)["up"] for rank in range(bed.config.hosts)]


TIMINGS_BYTES = 8  # the benchmark all-reduces each call's time (float64) once at its end


def launch(bed, folder: Path, algorithm: str, size: int, iters: int, seed: int,
           traced: bool = False) -> tuple[list[dict], dict, list | None]:
    """One benchmark launch: each host's counter differences, the record of the host that wrote
    one and, ``traced``, its trace's events."""
    name = f"{algorithm}-{size}-{iters}{'-traced' if traced else ''}"
    trace_path = folder / f"{name}.trace.json"
    command = rank_command("real/allreduce.py", [
        "--sizes", f"{size}B", "--algorithms", algorithm, "--iters", str(iters), "--warmup", "1",
        "--seed", str(seed), *BENCHMARK_FLAGS, *(["--trace", str(trace_path)] if traced else [])],
        f"{name}.json")
    first = counters(bed)
    result = bed.run(command, timeout_s=LAUNCH_TIMEOUT_S, echo=False)
    what = f"the benchmark ({algorithm}, {format_bytes(size)})"
    if not result.ok:
        raise TestbedError(f"{what} failed: {result.failure_line()}")
    sent = [{k: b[k] - a[k] for k in ("sent_bytes", "sent_packets")}
            for a, b in zip(first, counters(bed))]
    records = [h.json[f"{name}.json"] for h in result.hosts if f"{name}.json" in h.json]
    try:
        call_s = float(records[0]["results"][0]["time_s"])
        events = json.loads(trace_path.read_text())["traceEvents"] if traced else None
    except (IndexError, KeyError, TypeError, ValueError, OSError) as error:
        raise TestbedError(f"{what} wrote no record or trace to read: {error!r}") from None
    return sent, {"call_s": call_s}, events


def cycle_row(bed, args, algorithm: str, size: int, folder: Path) -> dict:
    """What one cycle of ``algorithm``'s stream at ``size`` sends on ``bed``, and its times."""
    short, _, _ = launch(bed, folder, algorithm, size, args.iters, args.seed)
    long, _, _ = launch(bed, folder, algorithm, size, LONGER * args.iters, args.seed)
    _, record, trace = launch(bed, folder, algorithm, size, args.iters, args.seed, traced=True)
    cycle_bytes, cycle_packets = per_call(short, long, (LONGER - 1) * args.iters)
    hosts = args.hosts
    return {"algorithm": algorithm, "bytes": size,
            "payload_bytes": sum(allreduce_messages(algorithm, hosts, size))
            + TIMINGS_BYTES * 2 * (hosts - 1) / hosts,
            "messages": wire_messages(algorithm, hosts, size),
            "cycle_bytes": cycle_bytes, "cycle_packets": cycle_packets,
            "period_s": trace_period_s(trace),
            "bytes_at_rate_s": cycle_bytes * 8 / args.bandwidth,
            "call_s": record["call_s"],
            "gap_s": statistics.median(trace_gaps(trace).get(size) or [float("nan")])}


def measure_rows(args) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="wire-bytes-") as tmp, \
            scratch_testbed(testbed_config(args.hosts, args.bandwidth)) as bed:
        for size in args.sizes:
            for algorithm in args.algorithms:
                row = cycle_row(bed, args, algorithm, size, Path(tmp))
                print(f"{algorithm} {format_bytes(size)}: {row['cycle_bytes']:,.0f} B and "
                      f"{row['cycle_packets']:.1f} packets a cycle (payload "
                      f"{row['payload_bytes']:,.0f} B in {row['messages']:g} sends); period "
                      f"{row['period_s'] * 1e3:.3f} ms, its bytes at the rate "
                      f"{row['bytes_at_rate_s'] * 1e3:.3f} ms; call {row['call_s'] * 1e3:.3f} "
                      f"ms, gap {row['gap_s'] * 1e3:.3f} ms", flush=True)
                rows.append(row)
    return rows


def parse_args(argv=None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    add_bed_arguments(parser, hosts=2)
    parser.add_argument("--sizes", default="64KB,256KB", help="buffer sizes (default 64KB,256KB)")
    parser.add_argument("--algorithms", default="naive,ring,backend",
                        help="the benchmark's algorithms (default naive,ring,backend)")
    parser.add_argument("--iters", type=int, default=100,
                        help="calls of the shorter launch; the longer makes three times as many "
                             "(default 100)")
    parser.add_argument("--seed", type=int, default=0, help="the benchmark's buffers' seed")
    add_host_cores_argument(parser)
    parser.add_argument("--json", help="write every row and the fit here")
    args = parser.parse_args(argv)
    measure.HOST_CORES = args.host_cores
    try:
        check_output_file("--json", args.json)
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError as error:
        parser.error(str(error))
    args.algorithms = args.algorithms.split(",")
    unknown = [a for a in args.algorithms if a not in SIM_ALGORITHM]
    if unknown or len(set(args.algorithms)) != len(args.algorithms):
        parser.error(f"--algorithms takes each of {', '.join(SIM_ALGORITHM)} at most once, "
                     f"got {','.join(args.algorithms)}")
    if any(n < 4 or n % 4 or n > MAX_BUFFER_BYTES for n in args.sizes):
        parser.error(f"--sizes takes whole float32 buffers: multiples of 4 bytes up to "
                     f"{format_bytes(MAX_BUFFER_BYTES)}")
    if not (1 <= args.iters <= MAX_ITERS // LONGER and 0 <= args.seed <= MAX_SEED):
        parser.error(f"--iters must be from 1 to {MAX_ITERS // LONGER:,} and --seed from 0 to "
                     f"{MAX_SEED:,}, got {args.iters} and {args.seed}")
    return parser, args


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    status, rows = run_reporting("wire_bytes", lambda: measure_rows(args))
    if status:
        return status
    try:
        fit = fit_overheads(rows)
    except ValueError as error:
        fit = None
        print(f"no fit: {error}")
    if fit:
        print(f"fit over {len(rows)} rows: {fit['per_message_bytes']:.0f} B a message, "
              f"{fit['per_call_bytes']:.0f} B a cycle, {fit['per_payload_byte']:.4f} B a "
              f"payload byte (largest residual {fit['largest_residual_bytes']:.0f} B)")
    return write_json_output("wire_bytes", "--json", args.json, {
        "hosts": args.hosts, "bandwidth_bps": args.bandwidth, "iters": args.iters,
        "rows": rows, "fit": fit})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
