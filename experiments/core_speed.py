"""How steadily this machine's cores run: one fixed piece of CPU work, timed in short windows on
each core in turn, with nothing else of ours running.

    python -m experiments.core_speed
    python -m experiments.core_speed --cores 0 --seconds 30s --window 50ms --json speed.json \
        --trace speed-trace.json

The test bed's hosts share the machine's cores. A row whose time is set by CPU work and wake-ups
(the small all-reduce calls on 4 and 8 hosts, a replica's compute) runs at whatever speed the
cores give at that moment. On a virtual machine a core's speed can move with work outside it
(other tenants on the same physical core, the processor's clock) without ``/proc/stat``
counting any steal time, so the busy-machine check (``experiments.stage_samples.busy_cores``)
cannot see it. This pins itself to each core of ``--cores`` in turn, repeats the work for
``--seconds`` in windows of ``--window``, and reports each window's speed as a fraction of the
core's fastest (``FASTEST_QUANTILE`` of its windows): the 10th percentile, the median, the
slowest window, and the share of windows under ``SLOW`` with the longest run of them. On an
idle, steady core every window is near 1.0. ``--json FILE`` writes every window; ``--trace
FILE`` a Chrome trace, one track a core, one span a window, its speed in the span's arguments.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type, check_output_files,
                                       run_command_line, write_json_output)
from dsgd_sim.trace import Trace
from dsgd_sim.units import format_time, parse_time

WORK_ITERATIONS = 2_000   # one unit of work: this many multiply-adds of Python ints (~0.1 ms)
FASTEST_QUANTILE = 0.95   # a core's fastest speed: this quantile of its windows (not one outlier)
SLOW = 0.85               # a window under this fraction of the fastest counts as slow
MIN_WINDOW_S = 0.005      # shorter windows hold a few units of work: their speed is quantized
MAX_SECONDS = 600.0


def work_unit() -> int:
    """One unit of the work every window repeats: pure CPU, no memory beyond the core's caches."""
    total = 0
    for i in range(WORK_ITERATIONS):
        total += i * i
    return total


def time_windows(seconds: float, window_s: float, clock=time.perf_counter,
                 work=work_unit) -> list[tuple[float, float]]:
    """``work`` repeated for ``seconds`` in windows of ``window_s``: per window its start (seconds
    from the first) and its speed (units of work per second)."""
    windows = []
    start = clock()
    while True:
        t0 = clock()
        if t0 - start >= seconds:
            return windows
        units, t = 0, t0
        while t - t0 < window_s:
            work()
            units += 1
            t = clock()
        windows.append((t0 - start, units / (t - t0)))


@contextlib.contextmanager
def pinned(core: int):
    """Run the body on ``core`` alone, then restore the process's cores."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def quantile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile of ``sorted_values`` by nearest rank: the smallest value with at least
    a ``q`` share of the values at or below it."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def summarise(speeds: list[float], window_s: float) -> dict:
    """Windows' speeds as fractions of the fastest (``FASTEST_QUANTILE``): the 10th percentile
    (``p10``), the ``median``, the ``slowest`` window, the share under ``SLOW``
    (``slow_share``) and the longest run of slow windows in a row, in seconds
    (``longest_slow_s``); and in units of work a second, the
    fastest and the median (``fastest_units_per_s``, ``median_units_per_s``), which set one
    sample beside another: a core slow throughout a sample is steady against its own fastest."""
    if not speeds:
        raise ValueError("no windows to summarise")
    fastest = quantile(sorted(speeds), FASTEST_QUANTILE)
    relative = [s / fastest for s in speeds]
    longest = run = 0
    for r in relative:
        run = run + 1 if r < SLOW else 0
        longest = max(longest, run)
    ordered = sorted(relative)
    return {"windows": len(speeds), "p10": quantile(ordered, 0.10),
            "median": statistics.median(ordered), "slowest": ordered[0],
            "slow_share": sum(r < SLOW for r in relative) / len(relative),
            "longest_slow_s": longest * window_s, "fastest_units_per_s": fastest,
            "median_units_per_s": statistics.median(speeds)}


def sample_cores(cores: list[int], seconds: float, window_s: float) -> list[dict]:
    """Per core of ``cores``, one after the other, pinned there: its windows (``[start_s,
    units_per_s]``) and ``summarise``'s figures."""
    out = []
    for core in cores:
        with pinned(core):
            windows = time_windows(seconds, window_s)
        out.append({"core": core, **summarise([s for _, s in windows], window_s),
                    "windows_s": [[round(t, 6), s] for t, s in windows]})
    return out


def summary_line(record: dict) -> str:
    return (f"core {record['core']}: {record['windows']} windows, speed as a fraction of its "
            f"fastest: 10th percentile {record['p10']:.2f}, median {record['median']:.2f}, "
            f"slowest {record['slowest']:.2f}; "
            f"{record['slow_share']:.0%} of windows under {SLOW:.2f}, the longest run of them "
            f"{format_time(record['longest_slow_s'])}; {record['median_units_per_s']:,.0f} units "
            f"of work a second at the median")


def write_trace(path: str, records: list[dict], window_s: float) -> None:
    trace = Trace(process_name="core speed")
    offset = 0.0
    for record in records:  # the cores ran one after the other: lay their tracks so
        trace.name_track(record["core"], f"core {record['core']}")
        for start, speed in record["windows_s"]:
            trace.span(record["core"], "window", offset + start, window_s, cat="cpu",
                       units_per_s=speed)
        if record["windows_s"]:
            offset += record["windows_s"][-1][0] + window_s
    trace.write(path)


def parse_cores(text: str) -> list[int]:
    """``all`` or ``0,1``: cores this process may run on, each once."""
    allowed = sorted(os.sched_getaffinity(0))
    if text == "all":
        return allowed
    cores = []
    for item in text.split(","):
        try:
            core = int(item)
        except ValueError:
            raise ValueError(f"not a core number: {item!r}") from None
        if core not in allowed:
            raise ValueError(f"core {core} is not one this process may run on "
                             f"({', '.join(map(str, allowed))})")
        if core in cores:
            raise ValueError(f"core {core} given twice")
        cores.append(core)
    return cores


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m experiments.core_speed",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=argparse_type(parse_cores, "cores"), default="all",
                        help="cores to time, in turn: 'all' (the default) or e.g. 0,1")
    parser.add_argument("--seconds", type=argparse_type(parse_time, "time"), default=10.0,
                        help="how long to time each core (default 10s)")
    parser.add_argument("--window", type=argparse_type(parse_time, "time"), default=0.05,
                        help="one speed a window this long (default 50ms)")
    parser.add_argument("--json", help="write every window's speed here")
    parser.add_argument("--trace", help="write a Chrome trace of the windows here")
    args = parser.parse_args(argv)
    if not MIN_WINDOW_S <= args.window <= args.seconds <= MAX_SECONDS:
        parser.error(f"need {format_time(MIN_WINDOW_S)} <= --window <= --seconds <= "
                     f"{format_time(MAX_SECONDS)}, got {format_time(args.window)} and "
                     f"{format_time(args.seconds)}")
    try:
        check_output_files({"--json": args.json, "--trace": args.trace})
    except ValueError as error:
        parser.error(str(error))
    try:
        records = sample_cores(args.cores, args.seconds, args.window)
    except KeyboardInterrupt:
        print("python -m experiments.core_speed: interrupted; nothing written", file=sys.stderr)
        return 130
    print("\n".join(summary_line(r) for r in records))
    if args.trace:
        try:
            write_trace(args.trace, records, args.window)
        except OSError as error:
            print(f"python -m experiments.core_speed: error: --trace: {error}", file=sys.stderr)
            return 1
    return write_json_output("python -m experiments.core_speed", "--json", args.json,
                             {"window_s": args.window, "seconds": args.seconds,
                              "fastest_quantile": FASTEST_QUANTILE, "slow": SLOW,
                              "work_iterations": WORK_ITERATIONS, "cores": records})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
