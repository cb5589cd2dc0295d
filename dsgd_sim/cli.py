"""Command line: ``python -m dsgd_sim --replicas 16 --bandwidth 10Gbps``.

Parses human units, builds the typed configs, runs the simulations (a sweep when ``--replicas``
lists several counts), prints a table, and writes ``--json`` / ``--trace`` / ``--plot``. Every bad
input ends in one line ``dsgd_sim: error: ...`` naming the value, and exit status 2.

``--mode both`` (the default) runs synchronous SGD and asynchronous SGD with a parameter server on
the same cluster and workload, side by side, and ends with a one-line verdict. To compare like
with like, async then applies as many gradients as sync uses (iterations x R, or x K with
``--k-sync``); in ``--mode async``, ``--iterations`` counts the server's updates directly.
``--replay`` adds loss against simulated time for sync, K-sync and async (``convergence.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace

from tqdm import tqdm

from . import convergence
from .argparse_oneline import (OneLineArgumentParser, argparse_type as _typed,
                               check_output_files, finite_json, run_command_line,
                               write_atomically)
from .cluster import ClusterConfig
from .collectives import (ALGORITHM_NAMES, PARAMETER_SERVER, allreduce_time_s, load_round_costs,
                          round_cost_notes)
from .compute import parse_compute
from .parameter_server import (DEFAULT_SERVER_MEMORY_BPS, AsyncConfig, AsyncSimulation,
                               apply_time_s)
from .presets import DEFAULT_PRESET, PRESETS
from .replay import ReplayConfig
from .report import (async_config_json, baseline_iteration_s, config_json, format_async,
                     format_async_sweep, format_side_by_side, format_single, format_sweep,
                     summarize, summarize_async, verdict)
from .sync import SyncConfig, SyncSimulation, make_buckets
from .trace import Trace
from .units import parse_bandwidth, parse_count, parse_size, parse_time
from .workload import MAX_BATCH, MAX_GRAD_BYTES, Workload, from_preset, load_profile

MAX_REPLICAS = 65_536
MAX_SECONDS = 1e6  # a compute step or a latency longer than 11 days is a typo, not a workload
MAX_BYTES = MAX_GRAD_BYTES  # 1 PB of gradients
MAX_SLOWDOWN = 1e3
MAX_ITERATIONS = 1_000_000  # a sync run keeps every iteration: 1M of 16 replicas take ~2 GB
MAX_REPLICA_ITERATIONS = 50_000_000  # iterations x replicas of a command's sync runs: ~40 bytes each
MAX_GRADIENT_EVENTS = 2_000_000  # gradients a command's async runs and replay serve: ~45 s here
MIN_BPS = 1.0  # slower is a typo; far slower overflows transfer times to infinity
MODES = ("sync", "async", "both")


def _positive_int(text: str, what: str, maximum: int) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value) or not 1 <= value <= maximum:
        raise ValueError(f"{what} {text!r} must be a whole number from 1 to {maximum:,}")
    return int(value)


def parse_replicas(text: str) -> list[int]:
    """``16``, ``1,2,4,8`` or ``1,2,4,...,1024`` (a geometric or arithmetic series, continued),
    in increasing order, each count once: a sweep's last run is its largest (the one traced)."""
    parts = [p.strip() for p in text.split(",")] if text.strip() else [""]
    if "..." in parts:
        return _expand_series(parts, text)
    return sorted({_positive_int(p, "replica count", MAX_REPLICAS) for p in parts})


def _expand_series(parts: list[str], text: str) -> list[int]:
    """The series continued to its last term: geometric where the terms before ``...`` are
    (``2,4,...,16`` is 2, 4, 8, 16), else arithmetic (``1,3,...,7``); with only two terms both
    may fit, and the geometric reading wins if it reaches the last term."""
    if parts.count("...") != 1 or parts.index("...") != len(parts) - 2 or len(parts) < 4:
        raise ValueError(f"replica series {text!r} must look like 1,2,4,...,1024")
    head = [_positive_int(p, "replica count", MAX_REPLICAS) for p in parts[:-2]]
    last = _positive_int(parts[-1], "replica count", MAX_REPLICAS)
    ratio, step = head[1] / head[0], head[1] - head[0]
    readings = []
    if all(b == a * ratio for a, b in zip(head, head[1:])) and ratio > 1:
        readings.append(lambda value: value * ratio)
    if all(b - a == step for a, b in zip(head, head[1:])) and step > 0:
        readings.append(lambda value: value + step)
    if not readings:
        raise ValueError(f"replica series {text!r} is neither geometric nor arithmetic")
    for following in readings:
        values = list(head)
        while (term := following(values[-1])) <= last and term == int(term):
            values.append(int(term))
        if values[-1] == last:  # a reading whose next term is no whole number stops short of it
            return values
    raise ValueError(f"replica series {text!r} does not reach {last}")


def _at_most(parse, maximum: float, unit: str):
    """A unit parser that also rejects values above ``maximum`` (in SI units)."""
    def parse_bounded(text: str):
        value = parse(text)
        if value > maximum:
            raise ValueError(f"{text!r} is too large (at most {maximum:g} {unit})")
        return value
    return parse_bounded


def _bounded_bandwidth(text: str) -> float:
    value = parse_bandwidth(text)
    if not MIN_BPS <= value < math.inf:
        raise ValueError(f"bandwidth {text!r} must be a finite rate of at least {MIN_BPS:g} bit/s")
    return value


def _bounded_compute(text: str):
    model = parse_compute(text)
    if model.mean_s > MAX_SECONDS:
        raise ValueError(f"compute {text!r} is too long (mean at most {MAX_SECONDS:g} s)")
    return model


def parse_stragglers(text: str) -> tuple[float, float]:
    """``0.1:3``: a tenth of the replicas compute three times slower."""
    fraction_text, sep, factor_text = text.partition(":")
    try:
        if not sep:
            raise ValueError
        fraction = float(fraction_text)
        factor = float(factor_text)
    except ValueError:
        raise ValueError(f"stragglers {text!r} must be FRACTION:FACTOR, e.g. 0.1:3") from None
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"stragglers {text!r}: the fraction must be between 0 and 1")
    if not (math.isfinite(factor) and 1 <= factor <= MAX_SLOWDOWN):
        raise ValueError(f"stragglers {text!r}: the slowdown factor must be from 1 to "
                         f"{MAX_SLOWDOWN:g}")
    return fraction, factor


def _whole_number(text: str, what: str, minimum: int, maximum: int) -> int:
    """``text`` as an integer, exactly (``12345678901234567``), or written as a float
    (``1e3``) where that is a whole number."""
    try:
        value = int(text.strip())
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            raise ValueError(f"{what} {text!r} is not a number") from None
        value = int(as_float) if math.isfinite(as_float) and as_float == int(as_float) else None
    if value is None or not minimum <= value <= maximum:
        raise ValueError(f"{what} {text!r} must be a whole number from {minimum} to {maximum:,}")
    return value


def _positive_float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} {text!r} must be a positive number")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(prog="dsgd_sim", description="Predict synchronous and asynchronous data-parallel "
                "SGD on a modelled cluster: iteration time, where it goes, speedup, all-reduce "
                "bandwidth, parameter-server throughput and staleness.")
    p.add_argument("--replicas", type=_typed(parse_replicas, "replicas"), default=[16],
                   help="replica count (async: workers), or a sweep: 1,2,4,...,1024 (default 16)")
    p.add_argument("--bandwidth", type=_typed(_bounded_bandwidth, "bandwidth"), default=10e9,
                   help="each replica's NIC, each direction: 10Gbps, 100Mbit/s, 1.25GB/s (default 10Gbps)")
    p.add_argument("--latency", type=_typed(_at_most(parse_time, MAX_SECONDS, "s"), "latency"), default=10e-6,
                   help="per-message latency α: 5us, 0.5ms (default 10us)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--grad-bytes", type=_typed(_at_most(parse_size, MAX_BYTES, "bytes"), "size"),
                      help="gradient size: 25MB, 100MiB (0: free communication)")
    size.add_argument("--params", type=_typed(_at_most(parse_count, MAX_BYTES // 4, "parameters"),
                                              "count"),
                      help="parameter count, fp32 gradients: 25M")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--preset", help=f"model preset: {', '.join(PRESETS)} "
                        f"(default {DEFAULT_PRESET})")
    source.add_argument("--profile", help="profile JSON written by real/sync.py --profile-out")
    p.add_argument("--compute", type=_typed(_bounded_compute, "compute"),
                   help="per-step compute: 80ms, exp:80ms, shifted-exp:60ms,20ms, normal:80ms,5ms, "
                        "lognormal:80ms,0.2 (default: the preset's or profile's)")
    p.add_argument("--batch-size", type=_typed(lambda t: _positive_int(t, "batch size", MAX_BATCH),
                                               "batch"),
                   help="samples per replica per step (default: the preset's)")
    p.add_argument("--algorithm", default="ring",
                   help=f"sync: gradient all-reduce: {', '.join(ALGORITHM_NAMES)} (default ring)")
    p.add_argument("--iterations", type=_typed(
        lambda t: _positive_int(t, "iterations", MAX_ITERATIONS), "iterations"), default=100,
        help="sync iterations; in --mode async, the server's updates summed over workers "
             "(default 100)")
    p.add_argument("--seed", type=_typed(lambda t: _whole_number(t, "seed", 0, 2**63 - 1), "seed"),
                   default=0, help="seed of every random draw (compute times, stragglers, --replay; default 0)")
    p.add_argument("--k-sync", type=_typed(lambda t: _positive_int(t, "K", MAX_REPLICAS), "K"),
                   help="sync: update with the first K of R gradients (backup workers)")
    p.add_argument("--round-costs", metavar="FILE",
                   help="sync: all-reduce rounds measured on your cluster (experiments/"
                        "ring_probe.py --json): each round costs what it measured, not latency + "
                        "size/bandwidth")
    p.add_argument("--ps-bandwidth", type=_typed(_bounded_bandwidth, "bandwidth"),
                   help="parameter server's NIC, with --algorithm ps or async (default: as "
                        "--bandwidth)")
    p.add_argument("--bucket-size", type=_typed(parse_size, "size"),
                   help="sync: gradient buckets, e.g. 25MiB (DDP's default cap; its "
                        "first, 1 MiB bucket is not modelled)")
    p.add_argument("--overlap", action="store_true",
                   help="sync: all-reduce each bucket as soon as it is ready, during backward")
    p.add_argument("--stragglers", type=_typed(parse_stragglers, "stragglers"),
                   help="FRACTION:FACTOR, e.g. 0.1:3 (a tenth of the replicas 3x slower)")
    p.add_argument("--cores", type=_typed(lambda t: _positive_int(t, "cores", 10**6), "cores"),
                   help="replicas share this many CPU cores of one host")
    _add_async_options(p)
    p.add_argument("--json", metavar="FILE", help="write results as JSON (- for stdout)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto)")
    p.add_argument("--plot", metavar="FILE.png", help="draw a timeline and a speedup curve")
    return p


def _add_async_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=MODES, default="both",
                   help="sync, async (parameter server) or both side by side (default both)")
    p.add_argument("--servers", type=_typed(lambda t: _positive_int(t, "servers", 10**6),
                                            "servers"), default=1,
                   help="async: parameter shards, each on a server with its own NIC (default 1)")
    p.add_argument("--max-staleness", type=_typed(
        lambda t: _whole_number(t, "max staleness", 0, MAX_ITERATIONS), "staleness"),
        help="async: drop (and recompute) gradients more than this many updates stale")
    p.add_argument("--ps-service-time",
                   type=_typed(_at_most(parse_time, MAX_SECONDS, "s"), "time"),
                   help="parameter server (async, and sync with --algorithm ps): server time "
                        "to apply one update (default: 3 x shard bytes at --ps-memory-bandwidth)")
    p.add_argument("--ps-memory-bandwidth", type=_typed(_bounded_bandwidth, "bandwidth"),
                   default=8 * DEFAULT_SERVER_MEMORY_BPS,
                   help="parameter server (async, and sync with --algorithm ps): server memory "
                        "bandwidth for applying updates (default 20GB/s)")
    p.add_argument("--ps-notice-queue",
                   type=_typed(_at_most(parse_time, MAX_SECONDS, "s"), "time"), default=0.0,
                   help="async: how long a small message from the server waits behind a long "
                        "one it is sending (its link's queue under TCP); the notice that lets a "
                        "push in waits that long, as with Gloo (default 0)")
    p.add_argument("--replay", action="store_true",
                   help="replay the schedules on real SGD: loss against simulated time")
    p.add_argument("--lr", type=_typed(lambda t: _positive_float(t, "learning rate"), "lr"),
                   default=ReplayConfig.lr,
                   help=f"replay learning rate (default {ReplayConfig.lr:g})")
    p.add_argument("--staleness-lr", action="store_true",
                   help="replay: divide the async learning rate by 1 + staleness (Zhang et al.)")


def build_workload(args) -> Workload:
    if args.profile is not None:
        workload = load_profile(args.profile)
    else:
        workload = from_preset(DEFAULT_PRESET if args.preset is None else args.preset)
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
    round_costs = None
    if args.round_costs is not None:
        if args.algorithm == PARAMETER_SERVER:
            raise ValueError("--round-costs times the rounds of an all-reduce; the ps algorithm "
                             "has none (use --bandwidth and --latency)")
        round_costs = load_round_costs(args.round_costs)
    if args.mode != "async":
        total = args.iterations * sum(args.replicas)
        if total > MAX_REPLICA_ITERATIONS:
            runs = "" if len(args.replicas) == 1 else f" summed over {len(args.replicas):,} runs"
            raise ValueError(f"--iterations {args.iterations:,} of {max(args.replicas):,} "
                             f"replicas is {total:,} replica-iterations{runs}; a sync run keeps "
                             f"them all in memory, at most {MAX_REPLICA_ITERATIONS:,}")
    configs = []
    for replicas in args.replicas:
        cluster = ClusterConfig(replicas, args.bandwidth, args.latency, args.ps_bandwidth,
                                fraction, factor, args.cores, round_costs)
        configs.append(SyncConfig(cluster, workload, args.algorithm, args.iterations, args.seed,
                                  args.k_sync, args.bucket_size, args.overlap,
                                  sync_apply_s(args, workload.grad_bytes)))
        if round_costs is not None:  # a steep last slope can price a large round past any time
            for bucket in make_buckets(workload, args.bucket_size):
                seconds = allreduce_time_s(args.algorithm, replicas, bucket.grad_bytes, 0.0, 1.0,
                                           round_costs)
                if not seconds <= MAX_SECONDS:
                    raise ValueError(f"--round-costs {args.round_costs!r} prices an all-reduce of "
                                     f"{bucket.grad_bytes:,} B on {replicas:,} replicas at "
                                     f"{seconds:g} s (its last two sizes, extended), over "
                                     f"{MAX_SECONDS:g} s")
    if args.mode != "async":
        check_event_work(configs)
    return configs


def sync_apply_s(args, grad_bytes: int) -> float:
    """The sync parameter server's time to apply an update: ``--ps-service-time``, else the
    async server's rule (``apply_time_s``: one server holds the whole gradient); 0 for an
    all-reduce."""
    if args.algorithm != PARAMETER_SERVER:
        return 0.0
    if args.ps_service_time is not None:
        return args.ps_service_time
    return apply_time_s(grad_bytes, args.ps_memory_bandwidth / 8)


# A sync run that is not the closed-form plain case simulates every replica's every bucket:
# about a million of those a second on a 2-core machine (`python -m dsgd_sim --mode sync
# --replicas 4096 --iterations 20 --overlap --bucket-size 1MB`: 8.4 M in 7.5 s), and core sharing
# about 20,000 replica-iterations a second (`--replicas 65536 --iterations 10 --cores 16`: 31 s).
# Past these it runs for minutes on end: a typo, or a job to split.
MAX_BUCKET_EVENTS = 200_000_000
MAX_EVENT_ITERATIONS = 5_000_000  # replica-iterations simulated one replica at a time (--cores, ps)


def check_event_work(configs: list[SyncConfig]) -> None:
    """``ValueError`` where the sync runs of ``configs`` (one per replica count of a command)
    would simulate too many events to finish, summed over the runs."""
    # replica-iterations simulated one replica at a time: cores shared, or a parameter server's
    # pushes (about 25,000 a second), where an all-reduce alone has a closed form
    bucket_events = event_iterations = 0
    flags = set()
    for config in configs:
        c = config.cluster
        buckets = len(make_buckets(config.workload, config.bucket_bytes))
        if buckets > 1 or config.overlap:
            bucket_events += config.iterations * c.replicas * buckets
        shared = bool(c.cores and c.cores < c.replicas)
        if shared or config.algorithm == PARAMETER_SERVER:
            event_iterations += config.iterations * c.replicas
            flags.add("--cores" if shared else "--algorithm ps")
    largest = max(configs, key=lambda config: config.cluster.replicas)
    runs = "" if len(configs) == 1 else f", summed over {len(configs):,} runs"
    if bucket_events > MAX_BUCKET_EVENTS:
        buckets = len(make_buckets(largest.workload, largest.bucket_bytes))
        raise ValueError(f"{largest.iterations:,} iterations of {largest.cluster.replicas:,} "
                         f"replicas with {buckets:,} buckets each simulate {bucket_events:,} "
                         f"bucket transfers{runs}, at most {MAX_BUCKET_EVENTS:,} (fewer "
                         f"iterations, replicas or buckets)")
    if event_iterations > MAX_EVENT_ITERATIONS:
        cores = largest.cluster.cores
        how = f"sharing {cores:,} cores" if cores and cores < largest.cluster.replicas else \
            "and a parameter server"
        raise ValueError(f"{largest.iterations:,} iterations of {largest.cluster.replicas:,} "
                         f"replicas {how} are {event_iterations:,} replica-iterations"
                         f"{runs}, at most {MAX_EVENT_ITERATIONS:,} with "
                         f"{' or '.join(sorted(flags))} (fewer iterations or replicas)")


def input_notes(args, configs: list[SyncConfig]) -> list[str]:
    """Notes on what the sync run takes on trust: a round-cost table used beyond what it
    measured."""
    costs = configs[0].cluster.round_costs if configs and args.mode != "async" else None
    if costs is None:
        return []
    buckets = [b.grad_bytes for b in make_buckets(configs[0].workload, configs[0].bucket_bytes)]
    return round_cost_notes(costs, args.algorithm, [c.cluster.replicas for c in configs], buckets)


def gradient_events(config: AsyncConfig) -> float:
    """About how many gradients ``config``'s run computes and serves: every worker's first (a
    run of 65,536 workers starts them all, however few updates it serves), one an update, and
    with a staleness bound s each of W workers' gradients is dropped and computed again until it
    is at most s updates stale, so up to W / (s + 1) an update."""
    workers, bound = config.cluster.replicas, config.max_staleness
    return workers + config.updates * (1.0 if bound is None else max(1.0, workers / (bound + 1)))


def check_async_work(args, configs: list[SyncConfig], async_configs: list[AsyncConfig]) -> None:
    """``ValueError`` where the command's async runs, and its replay's, would serve too many
    gradients to finish: the runs of every replica count together, and a replay's steps."""
    simulated = async_configs if args.mode != "sync" else []
    events = sum(gradient_events(c) for c in simulated)
    if args.replay:  # the largest count's schedules replayed step by step; in sync mode its
        last = async_configs[-1]  # async run is simulated for the replay alone
        updates = args.iterations * (configs[-1].gradients_used if args.mode != "async" else 1)
        events += updates + (gradient_events(replace(last, updates=updates))
                             if args.mode == "sync" else 0)
    if events > MAX_GRADIENT_EVENTS:
        raise ValueError(f"these runs would compute about {events:,.0f} gradients (each "
                         f"worker's first, the async updates, those dropped as too stale, and "
                         f"the replay's steps), at most {MAX_GRADIENT_EVENTS:,}: fewer "
                         f"--iterations or replicas")


def build_async_configs(args, configs: list[SyncConfig]) -> list[AsyncConfig]:
    """One ``AsyncConfig`` per replica count: ``--iterations`` updates in async mode, as many
    gradients as the sync run uses in both mode."""
    return [AsyncConfig(c.cluster, c.workload,
                        args.iterations * (c.gradients_used if args.mode == "both" else 1),
                        args.seed, args.servers, args.max_staleness, args.ps_service_time,
                        args.ps_memory_bandwidth / 8,
                        notice_queue_s=args.ps_notice_queue) for c in configs]


class Runs:
    """What a command simulated: per replica count, sync and async results and summaries."""

    def __init__(self, configs: list[SyncConfig], async_configs: list[AsyncConfig]):
        self.configs, self.async_configs = configs, async_configs
        self.sync_results, self.summaries = [], []
        self.async_results, self.async_summaries = [], []
        self.traces: list[Trace] = []
        self.curves, self.convergence = None, None


def run_all(args, runs: Runs) -> None:
    """Simulate every configuration (tracing the largest) with one progress bar on stderr."""
    do_sync, do_async = args.mode != "async", args.mode != "sync"
    total = (sum(c.iterations for c in runs.configs) if do_sync else 0) + \
        (sum(c.updates for c in runs.async_configs) if do_async else 0)
    with tqdm(total=total, desc="simulating", unit="it", delay=1.0, file=sys.stderr,
              leave=False, disable=None) as bar:  # no bar where stderr is no terminal
        for i, (config, async_config) in enumerate(zip(runs.configs, runs.async_configs)):
            last = i == len(runs.configs) - 1
            if do_sync:
                trace = Trace(process_name="sync: simulated cluster") if args.trace and last \
                    else None
                result = SyncSimulation(config, trace=trace, on_iteration=bar.update).run()
                runs.sync_results.append(result)
                runs.summaries.append(summarize(result, baseline_iteration_s(config, result)))
                runs.traces += [trace] if trace else []
            if do_async:
                trace = Trace(process_name="async: workers and parameter server", pid=1) \
                    if args.trace and last else None
                result = AsyncSimulation(async_config, trace=trace,
                                         on_update=lambda _n: bar.update()).run()
                runs.async_results.append(result)
                runs.async_summaries.append(summarize_async(result))
                runs.traces += [trace] if trace else []
    if args.replay:
        _replay(args, runs)


def _replay(args, runs: Runs) -> None:
    """Convergence replay of the largest replica count's schedules (in async mode, sync runs
    as many iterations as use the async run's gradients)."""
    config = runs.configs[-1]
    if args.mode == "async":
        config = replace(config, iterations=-(-args.iterations // config.gradients_used))
    async_result = runs.async_results[-1] if runs.async_results else AsyncSimulation(
        replace(runs.async_configs[-1], updates=args.iterations * config.gradients_used)).run()
    sync_result = runs.sync_results[-1] if runs.sync_results else None
    replay_config = ReplayConfig(lr=args.lr, staleness_lr=args.staleness_lr, seed=args.seed)
    runs.curves = convergence.curves(config, sync_result, async_result, replay_config)
    k = convergence.replay_k(config) if "k-sync" in runs.curves else None
    runs.convergence = convergence.summarize(runs.curves, k)


def _run_json(args, runs: Runs, i: int) -> dict:
    config = config_json(runs.configs[i])
    config["mode"] = args.mode
    run = {"config": config}
    if args.mode != "sync":
        config.update(async_config_json(runs.async_configs[i]))
    if runs.summaries:
        run["sync"] = runs.summaries[i]
    if runs.async_summaries:
        run["async"] = runs.async_summaries[i]
    if runs.summaries and runs.async_summaries:
        run["verdict"] = verdict(runs.configs[i], runs.summaries[i], runs.async_summaries[i])
    return run


def format_tables(args, runs: Runs) -> str:
    """The printed report for the mode and the number of replica counts."""
    single = len(runs.configs) == 1
    if args.mode == "both" and single:
        text = (format_side_by_side(runs.configs[0], runs.summaries[0], runs.async_configs[0],
                                    runs.async_summaries[0]) + "\n"
                + verdict(runs.configs[0], runs.summaries[0], runs.async_summaries[0]))
    else:
        sections = []
        if runs.summaries:
            sections.append(format_single(runs.configs[0], runs.summaries[0]) if single
                            else format_sweep(runs.configs, runs.summaries))
        if runs.async_summaries:
            sections.append(format_async(runs.async_configs[0], runs.async_summaries[0])
                            if single else format_async_sweep(runs.async_configs,
                                                              runs.async_summaries,
                                                              runs.summaries or None))
        text = "\n\n".join(sections)
    if runs.convergence:
        text += "\n" + convergence.format_summary(runs.convergence, args.staleness_lr)
    return text


def write_outputs(args, runs: Runs) -> None:
    documents = [_run_json(args, runs, i) for i in range(len(runs.configs))]
    document = documents[0] if len(documents) == 1 else {"runs": documents}
    if runs.curves:
        document["convergence"] = {mode: c.points() for mode, c in runs.curves.items()}
        document["convergence_summary"] = runs.convergence
    document = finite_json(document)  # a speedup over no time is null, not NaN: strict parsers
    if args.json == "-":
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.json:
        write_atomically(args.json, lambda handle: json.dump(document, handle, indent=2))
    if args.trace:
        _write_traces(args.trace, runs.traces)
    if args.plot:
        from .plot import plot_run
        plot_run(args.plot, runs)


def _write_traces(path: str, traces: list[Trace]) -> None:
    """One Chrome trace file; sync and async each a process of their own."""
    events, dropped = [], 0
    for trace in traces:
        data = trace.to_json()
        events += data["traceEvents"]
        dropped += data["otherData"]["dropped_events"]
    write_atomically(path, lambda handle: json.dump(
        {"traceEvents": events, "displayTimeUnit": "ms",
         "otherData": {"dropped_events": dropped}}, handle))


def check_output_paths(args) -> None:
    """Refuse unusable output files before simulating, not after (``ValueError`` names them)."""
    for flag, path in (("--trace", args.trace), ("--plot", args.plot)):
        if path == "-":
            raise ValueError(f"{flag} '-': only --json writes to stdout; name a file")
    check_output_files({"--json": None if args.json == "-" else args.json,
                        "--trace": args.trace, "--plot": args.plot},
                       {"the --profile file": args.profile,
                        "the --round-costs file": args.round_costs})
    if args.plot:
        from .plot import supported_formats
        extension = os.path.splitext(args.plot)[1].lstrip(".").lower()
        if extension not in supported_formats():
            raise ValueError(f"--plot {args.plot!r}: unknown image format {extension!r} "
                             f"(use .png, .svg or .pdf)")


_NOT_GIVEN = object()

# Flags that change only one mode's run, and the runs they change.
_SYNC_ONLY = ("algorithm", "k_sync", "round_costs", "bucket_size", "overlap")
_ASYNC_ONLY = ("servers", "max_staleness", "ps_notice_queue")
_SERVER_ONLY = ("ps_bandwidth", "ps_service_time", "ps_memory_bandwidth")  # any parameter server
_REPLAY_ONLY = ("lr", "staleness_lr")


def given_flags(argv: list[str] | None) -> dict[str, str]:
    """The flags on the command line (not left at their defaults), by ``dest``: their names."""
    parser = build_parser()
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    parser.set_defaults(**{dest: _NOT_GIVEN for dest in flags})
    args = parser.parse_args(argv)
    return {dest: flag for dest, flag in flags.items() if getattr(args, dest) is not _NOT_GIVEN}


def check_flags_apply(args, given: dict[str, str]) -> None:
    """Refuse a flag the run would ignore (``ValueError`` names it): a replay flag without
    ``--replay``, a flag of the mode that does not run, the server's NIC where no run has a
    server. ``--replay`` simulates every mode's schedule, whatever ``--mode``: there every mode's
    flags count."""
    ignored: list[tuple[tuple[str, ...], str]] = []
    if not args.replay:
        ignored.append((_REPLAY_ONLY, "--replay"))
        if args.mode == "async":
            ignored.append((_SYNC_ONLY, "the sync run (--mode sync or both), not --mode async"))
        if args.mode == "sync":
            ignored.append((_ASYNC_ONLY, "the async run (--mode async or both), not --mode sync"))
            if args.algorithm != PARAMETER_SERVER:
                ignored.append((_SERVER_ONLY, "a parameter server (--algorithm ps, or "
                                              "--mode async or both)"))
    for dests, where in ignored:
        for dest in dests:
            if dest in given:
                raise ValueError(f"{given[dest]} applies to {where}; this run would ignore it")
    if "overlap" in given and "bucket_size" not in given:
        raise ValueError("--overlap all-reduces each bucket during backward, and without "
                         "--bucket-size the gradient is one bucket, ready when backward ends: "
                         "give --bucket-size (25MiB is DDP's default cap)")
    if "ps_memory_bandwidth" in given and "ps_service_time" in given:
        raise ValueError("--ps-service-time gives the server's apply time, which "
                         "--ps-memory-bandwidth would otherwise set: give one of them")
    if "round_costs" in given and args.mode == "sync" and not args.replay:
        for dest in ("latency", "bandwidth"):
            if dest in given:
                raise ValueError(f"{given[dest]}: with --round-costs every round of the sync "
                                 f"run costs what it measured; this run would ignore it")


def main(argv: list[str] | None = None) -> int:
    return run_command_line(lambda: _main(argv), "dsgd_sim")


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_flags_apply(args, given_flags(argv))
        check_output_paths(args)
        configs = build_configs(args)
        runs = Runs(configs, build_async_configs(args, configs))
        check_async_work(args, configs, runs.async_configs)
    except ValueError as error:
        parser.error(str(error))
    for note in input_notes(args, configs):
        print(note, file=sys.stderr)
    try:
        run_all(args, runs)
    except ValueError as error:  # found only by running: a replay that diverges at this --lr
        parser.error(str(error))
    # stdout's own failures (a closed pipe, a full disk) are run_command_line's
    print(format_tables(args, runs), file=sys.stderr if args.json == "-" else sys.stdout)
    try:
        write_outputs(args, runs)
    except OSError as error:
        # a full disk names no file: the outputs being written are then the ones to name
        where = error.filename or ", ".join(
            name for name in (args.json, args.trace, args.plot) if name)
        print(f"dsgd_sim: error: cannot write {where}: {error.strerror}", file=sys.stderr)
        return 1
    return 0
