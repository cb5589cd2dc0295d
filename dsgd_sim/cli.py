"""Command line: ``python -m dsgd_sim --replicas 16 --bandwidth 10Gbps``.

Parses human units, builds the typed configs, runs the simulation (a sweep when ``--replicas``
lists several counts), prints a table, and writes ``--json`` / ``--trace`` / ``--plot``. Every bad
input ends in one line ``dsgd_sim: error: ...`` naming the value, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

from tqdm import tqdm

from .cluster import ClusterConfig
from .collectives import ALGORITHM_NAMES
from .compute import parse_compute
from .presets import DEFAULT_PRESET, PRESETS
from .report import baseline_iteration_s, config_json, format_single, format_sweep, summarize
from .sync import SyncConfig, SyncSimulation
from .trace import Trace
from .units import parse_bandwidth, parse_count, parse_size, parse_time
from .workload import Workload, from_preset, load_profile

MAX_REPLICAS = 65_536
MAX_ITERATIONS = 10_000_000


class _Parser(argparse.ArgumentParser):
    """argparse, but every error is one line and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _typed(parse, what: str):
    """Wrap a unit parser so that argparse reports ``ValueError`` text as the error."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = what
    return convert


def _positive_int(text: str, what: str, maximum: int) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value) or not 1 <= value <= maximum:
        raise ValueError(f"{what} {text!r} must be a whole number from 1 to {maximum:,}")
    return int(value)


def parse_replicas(text: str) -> list[int]:
    """``16``, ``1,2,4,8`` or ``1,2,4,...,1024`` (a geometric or arithmetic series, continued)."""
    parts = [p.strip() for p in text.split(",")] if text.strip() else [""]
    if "..." in parts:
        return _expand_series(parts, text)
    return [_positive_int(p, "replica count", MAX_REPLICAS) for p in parts]


def _expand_series(parts: list[str], text: str) -> list[int]:
    if parts.count("...") != 1 or parts.index("...") != len(parts) - 2 or len(parts) < 4:
        raise ValueError(f"replica series {text!r} must look like 1,2,4,...,1024")
    head = [_positive_int(p, "replica count", MAX_REPLICAS) for p in parts[:-2]]
    last = _positive_int(parts[-1], "replica count", MAX_REPLICAS)
    ratio, step = head[1] / head[0], head[1] - head[0]
    geometric = all(b == a * ratio for a, b in zip(head, head[1:])) and ratio > 1
    arithmetic = all(b - a == step for a, b in zip(head, head[1:])) and step > 0
    if not (geometric or arithmetic):
        raise ValueError(f"replica series {text!r} is neither geometric nor arithmetic")
    values = list(head)
    while True:
        nxt = values[-1] * ratio if geometric else values[-1] + step
        if nxt > last:
            break
        values.append(int(nxt))
    if values[-1] != last:
        raise ValueError(f"replica series {text!r} does not reach {last}")
    return values


def parse_stragglers(text: str) -> tuple[float, float]:
    """``0.1:3``: a tenth of the replicas compute three times slower."""
    fraction_text, sep, factor_text = text.partition(":")
    try:
        fraction = float(fraction_text)
        factor = float(factor_text) if sep else 2.0
    except ValueError:
        raise ValueError(f"stragglers {text!r} must be FRACTION:FACTOR, e.g. 0.1:3") from None
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"stragglers {text!r}: the fraction must be between 0 and 1")
    if not (math.isfinite(factor) and factor >= 1):
        raise ValueError(f"stragglers {text!r}: the slowdown factor must be >= 1")
    return fraction, factor


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dsgd_sim", description="Predict synchronous data-parallel SGD on a modelled "
                "cluster: iteration time, where it goes, speedup, all-reduce bandwidth.")
    p.add_argument("--replicas", type=_typed(parse_replicas, "replicas"), default=[16],
                   help="replica count, or a sweep: 1,2,4,...,1024 (default 16)")
    p.add_argument("--bandwidth", type=_typed(parse_bandwidth, "bandwidth"), default=10e9,
                   help="each replica's NIC, each direction: 10Gbps, 100Mbit/s, 1.25GB/s (default 10Gbps)")
    p.add_argument("--latency", type=_typed(parse_time, "latency"), default=10e-6,
                   help="per-message latency α: 5us, 0.5ms (default 10us)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--grad-bytes", type=_typed(parse_size, "size"),
                      help="gradient size: 25MB, 100MiB (0: free communication)")
    size.add_argument("--params", type=_typed(parse_count, "count"),
                      help="parameter count, fp32 gradients: 25M")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--preset", help=f"model preset: {', '.join(PRESETS)} "
                        f"(default {DEFAULT_PRESET})")
    source.add_argument("--profile", help="profile JSON written by real/sync.py --profile-out")
    p.add_argument("--compute", type=_typed(parse_compute, "compute"),
                   help="per-step compute: 80ms, exp:80ms, shifted-exp:60ms,20ms, normal:80ms,5ms, "
                        "lognormal:80ms,0.2 (default: the preset's or profile's)")
    p.add_argument("--batch-size", type=_typed(lambda t: _positive_int(t, "batch size", 10**9),
                                               "batch"),
                   help="samples per replica per step (default: the preset's)")
    p.add_argument("--algorithm", default="ring",
                   help=f"gradient all-reduce: {', '.join(ALGORITHM_NAMES)} (default ring)")
    p.add_argument("--iterations", type=_typed(
        lambda t: _positive_int(t, "iterations", MAX_ITERATIONS), "iterations"), default=100)
    p.add_argument("--seed", type=_typed(lambda t: _positive_int(str(int(t) + 1), "seed",
                                                                 2**63) - 1, "seed"), default=0)
    p.add_argument("--k-sync", type=_typed(lambda t: _positive_int(t, "K", MAX_REPLICAS), "K"),
                   help="update with the first K of R gradients (backup workers)")
    p.add_argument("--ps-bandwidth", type=_typed(parse_bandwidth, "bandwidth"),
                   help="parameter server's NIC (default: as --bandwidth)")
    p.add_argument("--bucket-size", type=_typed(parse_size, "size"),
                   help="gradient buckets as in DDP: 25MB")
    p.add_argument("--overlap", action="store_true",
                   help="all-reduce each bucket as soon as it is ready, during backward")
    p.add_argument("--stragglers", type=_typed(parse_stragglers, "stragglers"),
                   help="FRACTION:FACTOR, e.g. 0.1:3 (a tenth of the replicas 3x slower)")
    p.add_argument("--cores", type=_typed(lambda t: _positive_int(t, "cores", 10**6), "cores"),
                   help="replicas share this many CPU cores of one host")
    p.add_argument("--json", metavar="FILE", help="write results as JSON (- for stdout)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto)")
    p.add_argument("--plot", metavar="FILE.png", help="draw a timeline and a speedup curve")
    return p


def build_workload(args) -> Workload:
    if args.profile:
        workload = load_profile(args.profile)
    else:
        workload = from_preset(args.preset or DEFAULT_PRESET)
    if args.grad_bytes is not None:
        workload = workload.with_grad_bytes(args.grad_bytes)
    if args.params is not None:
        workload = workload.with_grad_bytes(4 * args.params)
    if args.compute is not None:
        workload = workload.with_compute(args.compute)
    if args.batch_size is not None:
        workload = replace(workload, batch_size=args.batch_size)
    return workload


def build_configs(args) -> list[SyncConfig]:
    """One ``SyncConfig`` per replica count; ``ValueError`` on inconsistent input."""
    workload = build_workload(args)
    fraction, factor = args.stragglers or (0.0, 1.0)
    configs = []
    for replicas in args.replicas:
        cluster = ClusterConfig(replicas, args.bandwidth, args.latency, args.ps_bandwidth,
                                fraction, factor, args.cores)
        configs.append(SyncConfig(cluster, workload, args.algorithm, args.iterations, args.seed,
                                  args.k_sync, args.bucket_size, args.overlap))
    return configs


def run_all(configs: list[SyncConfig], trace: Trace | None) -> list[dict]:
    """Simulate every configuration (tracing the largest) with one progress bar on stderr."""
    total = sum(c.iterations for c in configs)
    summaries = []
    with tqdm(total=total, desc="simulating", unit="it", delay=1.0, file=sys.stderr,
              leave=False) as bar:
        for config in configs:
            traced = trace if config is configs[-1] else None
            result = SyncSimulation(config, trace=traced, on_iteration=lambda: bar.update()).run()
            summaries.append(summarize(result, baseline_iteration_s(config)))
    return summaries


def write_outputs(args, configs: list[SyncConfig], summaries: list[dict], trace) -> None:
    runs = [{"config": config_json(c), "sync": s} for c, s in zip(configs, summaries)]
    document = runs[0] if len(runs) == 1 else {"runs": runs}
    if args.json == "-":
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.json:
        with open(args.json, "w") as handle:
            json.dump(document, handle, indent=2)
    if trace is not None:
        trace.write(args.trace)
    if args.plot:
        from .plot import plot_run
        plot_run(args.plot, configs, summaries)


def _attach_negative_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Turn ``--latency -1ms`` into ``--latency=-1ms`` so that the value, not the option, is
    reported as bad (argparse would take ``-1ms`` for an unknown option)."""
    takes_value = {opt for action in parser._actions if action.nargs is None and action.option_strings
                   for opt in action.option_strings}
    out: list[str] = []
    for token in argv:
        if out and out[-1] in takes_value and token[:1] == "-" and token[1:2] in "0123456789.in":
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(_attach_negative_values(parser, argv))
    try:
        configs = build_configs(args)
    except ValueError as error:
        parser.error(str(error))
    trace = Trace(process_name="dsgd_sim: simulated cluster") if args.trace else None
    summaries = run_all(configs, trace)
    table = (format_single(configs[0], summaries[0]) if len(configs) == 1
             else format_sweep(configs, summaries))
    print(table, file=sys.stderr if args.json == "-" else sys.stdout)
    try:
        write_outputs(args, configs, summaries, trace)
    except OSError as error:
        print(f"dsgd_sim: error: cannot write {error.filename}: {error.strerror}", file=sys.stderr)
        return 1
    return 0
