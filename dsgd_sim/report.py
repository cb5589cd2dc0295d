"""From a simulated run to numbers people read: the JSON schema and the printed tables, for sync
and async SGD alone and side by side, with a one-line verdict."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .collectives import PARAMETER_SERVER, bus_bandwidth_factor
from .parameter_server import AsyncConfig, AsyncResult, timed_rate
from .sync import SyncConfig, SyncResult, SyncSimulation
from .units import (format_bandwidth_bps, format_bytes, format_count, format_rate_Bps,
                    format_time)


def baseline_iteration_s(config: SyncConfig, result: SyncResult | None = None) -> float:
    """Mean iteration time of the same workload on one replica at normal speed (no straggler:
    with half the replicas slowed, one replica alone would be a straggler by rounding). A
    replica alone that shares no cores and needs no server computes and nothing else: the mean
    of the compute times ``result``'s run drew (the same draws one replica would have made, so
    that one replica's speedup is exactly 1 and the draws' own noise cancels in the ratio), or,
    without a run, the expected compute time; otherwise one replica simulated."""
    if config.cluster.cores is None and config.algorithm != "ps":
        if result is not None and math.isfinite(result.drawn_compute_s):
            return result.drawn_compute_s
        return config.workload.compute.mean_s
    cluster = replace(config.cluster.with_replicas(1), straggler_fraction=0.0)
    single = replace(config, cluster=cluster, k_sync=None)
    return float(np.mean(SyncSimulation(single).run().iteration_s))


def summarize(result: SyncResult, single_iteration_s: float) -> dict:
    """The ``sync`` object of the JSON output (seconds, bytes per second)."""
    config = result.config
    p = config.cluster.replicas
    iteration = float(np.mean(result.iteration_s))
    comm = float(np.mean(result.comm_s))
    samples_per_s = config.gradients_used * config.workload.batch_size / iteration
    speedup = samples_per_s / (config.workload.batch_size / single_iteration_s)
    # no communication (one replica, no gradient): no rate, null in the JSON
    algbw = config.workload.grad_bytes / comm if comm > 0 else math.nan
    idle = float(np.mean(result.idle_s))
    if abs(idle) <= 1e-9 * iteration:  # what is left of iteration - compute - exposed: rounding
        idle = 0.0
    return {
        "iteration_time_s": iteration,
        "iteration_time_p50_s": float(np.percentile(result.iteration_s, 50)),
        "iteration_time_p99_s": float(np.percentile(result.iteration_s, 99)),
        "compute_time_s": float(np.mean(result.compute_s)),
        "comm_time_s": comm,
        "exposed_comm_s": float(np.mean(result.exposed_comm_s)),
        "idle_time_s": idle,
        "speedup": speedup,
        "efficiency": speedup / p,
        "samples_per_s": samples_per_s,
        "algbw_Bps": algbw,
        # nccl-tests' all-reduce factor: no figure for a parameter server's push and pull
        "busbw_Bps": (None if config.algorithm == PARAMETER_SERVER
                      else algbw * bus_bandwidth_factor(p)),
        "single_replica_iteration_time_s": single_iteration_s,
        "gradients_per_iteration": config.gradients_used,
    }


def config_json(config: SyncConfig) -> dict:
    """The ``config`` object: resolved inputs in SI units."""
    cluster, workload = config.cluster, config.workload
    return {
        "replicas": cluster.replicas,
        "bandwidth_bps": cluster.bandwidth_bps,
        "latency_s": cluster.latency_s,
        "ps_bandwidth_bps": cluster.server_bandwidth_bps,
        "ps_apply_s": config.ps_apply_s,
        "grad_bytes": workload.grad_bytes,
        "algorithm": config.algorithm,
        "iterations": config.iterations,
        "seed": config.seed,
        "k_sync": config.k_sync,
        "bucket_bytes": config.bucket_bytes,
        "overlap": config.overlap,
        "stragglers": {"fraction": cluster.straggler_fraction, "factor": cluster.straggler_factor},
        "cores": cluster.cores,
        "round_costs": cluster.round_costs.as_rows() if cluster.round_costs else None,
        "workload": workload.name,
        "batch_size": workload.batch_size,
        "compute": workload.compute.describe(),
        "compute_mean_s": workload.compute.mean_s,
    }


def counted(n: int, noun: str) -> str:
    """``counted(1, "replica")`` -> ``'1 replica'``; ``(16, "replica")`` -> ``'16 replicas'``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def describe_run(config: SyncConfig) -> str:
    """Two header lines naming what was simulated."""
    cluster, workload = config.cluster, config.workload
    params = format_count(workload.grad_bytes / 4)
    extras = []
    if config.k_sync and config.k_sync < cluster.replicas:
        extras.append(f"K-sync {config.k_sync}")
    if config.bucket_bytes:
        extras.append(f"buckets of {format_bytes(config.bucket_bytes)}")
    if config.overlap:
        extras.append("overlapped with backward")
    if cluster.straggler_fraction and cluster.straggler_factor > 1:
        slowed = int((cluster.slowdowns(0) > 1).sum())  # the count: round(fraction x replicas)
        extras.append(f"{slowed} of {cluster.replicas} replicas stragglers "
                      f"({cluster.straggler_fraction:.0%} asked) x{cluster.straggler_factor:g}")
    if cluster.cores:
        extras.append(f"{cluster.cores} shared cores")
    if config.algorithm == "ps":
        extras.append(f"server NIC {format_bandwidth_bps(cluster.server_bandwidth_bps)}, "
                      f"apply {format_time(config.ps_apply_s)} per update")
    network = (f"{format_bandwidth_bps(cluster.bandwidth_bps)}, {format_time(cluster.latency_s)} "
               "latency")
    if cluster.round_costs is not None:
        sizes = cluster.round_costs.sizes_bytes
        network = (f"measured all-reduce rounds ({len(sizes)} sizes, {format_bytes(sizes[0])} to "
                   f"{format_bytes(sizes[-1])})")
    return (f"synchronous SGD, {config.algorithm}, {counted(cluster.replicas, 'replica')}, "
            f"{network}{''.join(', ' + e for e in extras)}\n"
            f"workload: {workload.name}, {format_bytes(workload.grad_bytes)} of gradients "
            f"({params} fp32), batch {workload.batch_size}/replica, "
            f"compute {workload.compute.describe()}")


def _share(part: float, whole: float) -> str:
    return f"({part / whole:5.1%})" if whole > 0 else ""


def format_single(config: SyncConfig, summary: dict) -> str:
    """The table printed for one replica count."""
    t = summary["iteration_time_s"]
    rows = [
        describe_run(config),
        "",
        f"  iteration time   {format_time(t):>10}   p50 {format_time(summary['iteration_time_p50_s'])}"
        f", p99 {format_time(summary['iteration_time_p99_s'])}",
        f"    compute        {format_time(summary['compute_time_s']):>10}   "
        f"{_share(summary['compute_time_s'], t)}",
        f"    exposed comm   {format_time(summary['exposed_comm_s']):>10}   "
        f"{_share(summary['exposed_comm_s'], t)}",
        f"    idle           {format_time(max(summary['idle_time_s'], 0.0)):>10}   "
        f"{_share(max(summary['idle_time_s'], 0.0), t)}",
        f"  communication    {format_time(summary['comm_time_s']):>10}   "
        f"algbw {_rate(summary['algbw_Bps'])}, busbw {_busbw(summary)}",
        f"  throughput       {summary['samples_per_s']:>10.4g}   samples/s",
        f"  speedup          {summary['speedup']:>10.3g}x  over one replica "
        f"(efficiency {summary['efficiency']:.0%})",
    ]
    return "\n".join(rows)


def _busbw(summary: dict) -> str:
    """The summary's bus bandwidth as read, or what stands for it where there is none."""
    return "n/a (ps)" if summary["busbw_Bps"] is None else _rate(summary["busbw_Bps"])


def _rate(bytes_per_s: float) -> str:
    """A rate as read; "n/a" for none (no communication to divide by)."""
    return format_rate_Bps(bytes_per_s) if math.isfinite(bytes_per_s) else "n/a"


def format_sweep(configs: list[SyncConfig], summaries: list[dict]) -> str:
    """One row per replica count."""
    header = (f"{'replicas':>8} {'iteration':>10} {'compute':>10} {'exp. comm':>10} {'idle':>10} "
              f"{'samples/s':>10} {'speedup':>8} {'effic.':>7} {'busbw':>11}")
    rows = [describe_run(configs[0]).replace(counted(configs[0].cluster.replicas, "replica"),
                                             "sweep of replicas"), "", header]
    for config, s in zip(configs, summaries):
        rows.append(f"{config.cluster.replicas:>8} {format_time(s['iteration_time_s']):>10} "
                    f"{format_time(s['compute_time_s']):>10} {format_time(s['exposed_comm_s']):>10} "
                    f"{format_time(max(s['idle_time_s'], 0.0)):>10} {s['samples_per_s']:>10.4g} "
                    f"{s['speedup']:>7.3g}x {s['efficiency']:>7.0%} "
                    f"{_busbw(s):>11}")
    return "\n".join(rows)


# -- asynchronous SGD -------------------------------------------------------------------------

def summarize_async(result: AsyncResult) -> dict:
    """The ``async`` object of the JSON output (seconds, counts; staleness in updates)."""
    config = result.config
    staleness = result.staleness
    applied = len(staleness)
    # as real/ps_server.py counts: after the first round (start-up), where more than a round is left
    skip, start_s, rate = timed_rate(result.update_end_s, config.cluster.replicas)
    # the compute draws of the gradients served in the timed window (dropped ones too), as one
    # worker alone would have drawn them: one worker's speedup is then exactly 1, and the
    # draws' noise cancels in the ratio
    drawn = result.drawn_s[result.drawn_after >= skip] if result.drawn_s is not None else []
    single_s = config.single_worker_update_s(float(np.mean(drawn)) if len(drawn) else None)
    rate = result.updates_per_s if rate is None else rate
    cycle = result.cycle_s
    return {
        "workers": config.cluster.replicas,
        "servers": config.servers,
        "updates": applied,
        "makespan_s": result.makespan_s,
        "updates_per_s": rate,
        "warmup_updates": skip,
        "warmup_s": start_s,
        "update_time_s": 1.0 / rate,
        "speedup": rate * single_s,
        "efficiency": rate * single_s / config.cluster.replicas,
        "samples_per_s": rate * config.workload.batch_size,
        "single_worker_update_time_s": single_s,
        "staleness_mean": float(staleness.mean()),
        "staleness_p50": float(np.percentile(staleness, 50)),
        "staleness_p99": float(np.percentile(staleness, 99)),
        "staleness_max": int(staleness.max()),
        "staleness_hist": np.bincount(staleness).tolist(),
        "max_staleness": config.max_staleness,
        "dropped_gradients": result.dropped,
        "dropped_compute_s": result.dropped_compute_s,
        "wasted_fraction": result.dropped / (applied + result.dropped),
        "compute_time_s": cycle["compute"],
        "push_time_s": cycle["push"],
        "queue_time_s": cycle["queue"],
        "apply_time_s": cycle["apply"],
        "reply_time_s": cycle["reply"],
        "service_time_s": config.service_s,
        "shard_bytes": config.shard_bytes,
    }


def async_config_json(config: AsyncConfig) -> dict:
    """Async inputs added to the ``config`` object."""
    return {"servers": config.servers, "max_staleness": config.max_staleness,
            "async_updates": config.updates, "ps_service_time_s": config.service_s,
            "server_memory_Bps": config.server_memory_Bps,
            "ps_notice_queue_s": config.notice_queue_s}


def describe_async(config: AsyncConfig) -> str:
    """One header line naming the parameter-server side of a run."""
    cluster = config.cluster
    bound = ("unbounded" if config.max_staleness is None
             else f"at most {config.max_staleness} (drop and recompute)")
    return (f"async: {counted(cluster.replicas, 'worker')} + "
            f"{counted(config.servers, 'server')} (NIC "
            f"{format_bandwidth_bps(cluster.server_bandwidth_bps)} each), apply "
            f"{format_time(config.service_s)} per update, staleness {bound}"
            + (f", notice queue {format_time(config.notice_queue_s)}"
               if config.notice_queue_s else ""))


def _staleness_text(s: dict) -> str:
    return (f"mean {s['staleness_mean']:.3g}, p50 {s['staleness_p50']:.3g}, "
            f"p99 {s['staleness_p99']:.3g}, max {s['staleness_max']}")


def _dropped_text(s: dict) -> str:
    if s["max_staleness"] is None:
        return ""
    return (f"  dropped          {s['dropped_gradients']:>10}   gradients too stale "
            f"({s['wasted_fraction']:.1%} of the work, {format_time(s['dropped_compute_s'])} "
            f"of compute)")


def format_async(config: AsyncConfig, s: dict) -> str:
    """The table printed for an async run alone."""
    cluster = config.cluster
    rows = [f"asynchronous SGD, parameter server, {counted(cluster.replicas, 'worker')}, "
            f"{format_bandwidth_bps(cluster.bandwidth_bps)}, {format_time(cluster.latency_s)} latency",
            describe_run(config_as_sync(config)).split("\n")[1], describe_async(config), "",
            f"  update time      {format_time(s['update_time_s']):>10}   {_rate_text(s)}",
            "  per gradient (one worker's cycle):",
            f"    compute        {format_time(s['compute_time_s']):>10}",
            f"    push           {format_time(s['push_time_s']):>10}   incl. waiting for the "
            f"server's NIC",
            f"    server queue   {format_time(s['queue_time_s']):>10}",
            f"    apply          {format_time(s['apply_time_s']):>10}",
            f"    reply          {format_time(s['reply_time_s']):>10}",
            f"  staleness        {_staleness_text(s)}",
            f"  throughput       {s['samples_per_s']:>10.4g}   samples/s",
            f"  speedup          {s['speedup']:>10.3g}x  over one worker "
            f"(efficiency {s['efficiency']:.0%})"]
    return "\n".join(rows + _notes(s))


def _rate_text(s: dict) -> str:
    """How many updates the rate counts: those after the first round, as a real server counts."""
    rate = f"{s['updates_per_s']:.4g} updates/s"
    total = f"{s['updates']:,} updates in {format_time(s['makespan_s'])}"
    if s["warmup_updates"]:
        return f"{rate} after the first {s['warmup_updates']:,} (start-up); {total}"
    return f"{rate} with the start-up; {total}"


def _notes(s: dict, gradients_per_iteration: int = 1) -> list[str]:
    """The dropped-gradients line, and a note where the run is too short to time after its
    start-up, naming the ``--iterations`` that would leave a round (each iteration applying
    ``gradients_per_iteration`` updates: 1 in async mode, the sync run's in both mode)."""
    dropped = _dropped_text(s)
    notes = [dropped] if dropped else []
    if not s["warmup_updates"]:
        workers = s["workers"]
        enough = -(-(2 * workers + 1) // gradients_per_iteration)
        notes.append(f"note: {s['updates']:,} updates leave no round of {workers:,} workers to "
                     f"time after the first round: the rate and the staleness are the start-up's "
                     f"(--iterations {enough:,} or more leave one)")
    return notes


def config_as_sync(config: AsyncConfig) -> SyncConfig:
    """A sync config with the same cluster and workload (for the shared header lines)."""
    return SyncConfig(config.cluster, config.workload, "ps", 1, config.seed)


def _side(label: str, left: str, right: str) -> str:
    return f"  {label:<17}{left:<34}{right}"


def format_side_by_side(sync_config: SyncConfig, sync: dict, async_config: AsyncConfig,
                        asyn: dict) -> str:
    """Sync and async next to each other, for the same cluster, workload and gradient count."""
    t = sync["iteration_time_s"]
    gradients = sync_config.gradients_used
    header = describe_run(sync_config).split("\n")
    header[0] = header[0].replace("synchronous SGD, ", "synchronous SGD (") \
        .replace(f", {counted(sync_config.cluster.replicas, 'replica')}", f") against asynchronous "
                 f"SGD (parameter server), {counted(sync_config.cluster.replicas, 'replica')}", 1)
    pct = lambda part: f" ({part / t:.1%})" if t > 0 else ""  # noqa: E731
    rows = header + [describe_async(async_config), "",
        _side("", f"sync ({sync_config.algorithm})", "async (parameter server)"),
        _side("workload", f"{sync_config.iterations} iterations x {gradients} gradients",
              f"{asyn['updates']} updates x 1 gradient"),
        _side("finishes in", format_time(t * sync_config.iterations),
              format_time(asyn["makespan_s"])),
        _side("iteration time", f"{format_time(t)} per iteration",
              f"{format_time(asyn['update_time_s'])} per update"),
        _side("  compute", f"{format_time(sync['compute_time_s'])}{pct(sync['compute_time_s'])}",
              f"{format_time(asyn['compute_time_s'])} per gradient"),
        _side("  exposed comm", f"{format_time(sync['exposed_comm_s'])}"
              f"{pct(sync['exposed_comm_s'])}", f"push {format_time(asyn['push_time_s'])}, "
              f"reply {format_time(asyn['reply_time_s'])}"),
        _side("  idle", f"{format_time(max(sync['idle_time_s'], 0.0))}"
              f"{pct(max(sync['idle_time_s'], 0.0))}", f"server queue "
              f"{format_time(asyn['queue_time_s'])}, apply {format_time(asyn['apply_time_s'])}"),
        _side("communication", f"{format_time(sync['comm_time_s'])}, busbw "
              f"{_busbw(sync)}", f"{format_bytes(async_config.shard_bytes)}"
              f" each way per server"),
        _side("throughput", f"{sync['samples_per_s']:.4g} samples/s",
              f"{asyn['samples_per_s']:.4g} samples/s"),
        _side("speedup", f"{sync['speedup']:.3g}x (efficiency {sync['efficiency']:.0%})",
              f"{asyn['speedup']:.3g}x over one worker (efficiency {asyn['efficiency']:.0%})"),
        _side("staleness", "none", _staleness_text(asyn))]
    return "\n".join(rows + _notes(asyn, gradients))


def verdict(sync_config: SyncConfig, sync: dict, asyn: dict) -> str:
    """One line: which finishes the same gradients first under this network, and at what cost."""
    sync_s = sync["iteration_time_s"] * sync_config.iterations
    async_s = asyn["makespan_s"]
    samples = asyn["updates"] * sync_config.workload.batch_size
    network = format_bandwidth_bps(sync_config.cluster.bandwidth_bps)
    work = f"the {asyn['updates']:,} gradients ({samples:,} samples)"
    if abs(async_s - sync_s) <= 1e-3 * max(async_s, sync_s):  # as alike as the figures show
        return (f"verdict: sync and async finish {work} together on {network}: "
                f"{format_time(sync_s)} each, and async's gradients are "
                f"{asyn['staleness_mean']:.3g} updates stale on average")
    if async_s < sync_s:
        return (f"verdict: async finishes {work} first on {network}: {format_time(async_s)} "
                f"against {format_time(sync_s)} for sync ({sync_s / async_s:.3g}x sooner), "
                f"but its gradients are {asyn['staleness_mean']:.3g} updates stale on average")
    phases = {"compute": asyn["compute_time_s"], "the push (server NIC)": asyn["push_time_s"],
              "the server queue": asyn["queue_time_s"], "the apply": asyn["apply_time_s"],
              "the reply (server NIC)": asyn["reply_time_s"]}
    slowest = max(phases, key=phases.get)
    return (f"verdict: sync finishes {work} first on {network}: {format_time(sync_s)} against "
            f"{format_time(async_s)} for async ({async_s / sync_s:.3g}x sooner); async's "
            f"gradients spend most time in {slowest}")


def format_async_sweep(configs: list[AsyncConfig], summaries: list[dict],
                       sync_summaries: list[dict] | None = None) -> str:
    """One row per worker count; with sync results, which finishes the same gradients first."""
    header = (f"{'workers':>8} {'updates/s':>10} {'update':>10} {'speedup':>8} "
              f"{'stale mean':>10} {'p99':>6} {'max':>6}" + ("   first" if sync_summaries else ""))
    rows = [describe_async(configs[0]).replace(counted(configs[0].cluster.replicas, "worker"),
                                               "sweep of workers"), "", header]
    for i, (config, s) in enumerate(zip(configs, summaries)):
        row = (f"{config.cluster.replicas:>8} {s['updates_per_s']:>10.4g} "
               f"{format_time(s['update_time_s']):>10} {s['speedup']:>7.3g}x "
               f"{s['staleness_mean']:>10.3g} {s['staleness_p99']:>6.3g} {s['staleness_max']:>6}")
        if sync_summaries:
            sync_s = sync_summaries[i]["iteration_time_s"] * s["updates"] / \
                max(1, sync_summaries[i]["gradients_per_iteration"])
            row += "   async" if s["makespan_s"] < sync_s else "   sync"
        rows.append(row + ("" if s["warmup_updates"] else "   *"))
    if not all(s["warmup_updates"] for s in summaries):
        rows.append("* too few updates to time after the first round: the rate and the "
                    "staleness are the start-up's (give more --iterations)")
    return "\n".join(rows)
