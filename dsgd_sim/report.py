"""From a simulated run to numbers people read: the JSON schema and the printed tables."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .collectives import bus_bandwidth_factor
from .sync import SyncConfig, SyncResult, SyncSimulation
from .units import (format_bandwidth_bps, format_bytes, format_count, format_rate_Bps,
                    format_time)


def baseline_iteration_s(config: SyncConfig) -> float:
    """Mean iteration time of the same workload on one replica (no communication at all)."""
    single = replace(config, cluster=config.cluster.with_replicas(1), k_sync=None)
    return float(np.mean(SyncSimulation(single).run().iteration_s))


def summarize(result: SyncResult, single_iteration_s: float) -> dict:
    """The ``sync`` object of the JSON output (seconds, bytes per second)."""
    config = result.config
    p = config.cluster.replicas
    iteration = float(np.mean(result.iteration_s))
    comm = float(np.mean(result.comm_s))
    samples_per_s = config.gradients_used * config.workload.batch_size / iteration
    speedup = samples_per_s / (config.workload.batch_size / single_iteration_s)
    algbw = config.workload.grad_bytes / comm if comm > 0 else 0.0
    return {
        "iteration_time_s": iteration,
        "iteration_time_p50_s": float(np.percentile(result.iteration_s, 50)),
        "iteration_time_p99_s": float(np.percentile(result.iteration_s, 99)),
        "compute_time_s": float(np.mean(result.compute_s)),
        "comm_time_s": comm,
        "exposed_comm_s": float(np.mean(result.exposed_comm_s)),
        "idle_time_s": float(np.mean(result.idle_s)),
        "speedup": speedup,
        "efficiency": speedup / p,
        "samples_per_s": samples_per_s,
        "algbw_Bps": algbw,
        "busbw_Bps": algbw * bus_bandwidth_factor(p),
        "single_replica_iteration_time_s": single_iteration_s,
    }


def config_json(config: SyncConfig) -> dict:
    """The ``config`` object: resolved inputs in SI units."""
    cluster, workload = config.cluster, config.workload
    return {
        "replicas": cluster.replicas,
        "bandwidth_bps": cluster.bandwidth_bps,
        "latency_s": cluster.latency_s,
        "ps_bandwidth_bps": cluster.server_bandwidth_bps,
        "grad_bytes": workload.grad_bytes,
        "algorithm": config.algorithm,
        "iterations": config.iterations,
        "seed": config.seed,
        "k_sync": config.k_sync,
        "bucket_bytes": config.bucket_bytes,
        "overlap": config.overlap,
        "stragglers": {"fraction": cluster.straggler_fraction, "factor": cluster.straggler_factor},
        "cores": cluster.cores,
        "workload": workload.name,
        "batch_size": workload.batch_size,
        "compute": workload.compute.describe(),
        "compute_mean_s": workload.compute.mean_s,
    }


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
        extras.append(f"{cluster.straggler_fraction:.0%} stragglers x{cluster.straggler_factor:g}")
    if cluster.cores:
        extras.append(f"{cluster.cores} shared cores")
    if config.algorithm == "ps":
        extras.append(f"server NIC {format_bandwidth_bps(cluster.server_bandwidth_bps)}")
    return (f"synchronous SGD, {config.algorithm}, {cluster.replicas} replicas, "
            f"{format_bandwidth_bps(cluster.bandwidth_bps)}, {format_time(cluster.latency_s)} "
            f"latency{''.join(', ' + e for e in extras)}\n"
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
        f"algbw {format_rate_Bps(summary['algbw_Bps'])}, busbw {format_rate_Bps(summary['busbw_Bps'])}",
        f"  throughput       {summary['samples_per_s']:>10.4g}   samples/s",
        f"  speedup          {summary['speedup']:>10.3g}x  over one replica "
        f"(efficiency {summary['efficiency']:.0%})",
    ]
    return "\n".join(rows)


def format_sweep(configs: list[SyncConfig], summaries: list[dict]) -> str:
    """One row per replica count."""
    header = (f"{'replicas':>8} {'iteration':>10} {'compute':>10} {'exp. comm':>10} {'idle':>10} "
              f"{'samples/s':>10} {'speedup':>8} {'effic.':>7} {'busbw':>11}")
    rows = [describe_run(configs[0]).replace(f"{configs[0].cluster.replicas} replicas",
                                             "sweep of replicas"), "", header]
    for config, s in zip(configs, summaries):
        rows.append(f"{config.cluster.replicas:>8} {format_time(s['iteration_time_s']):>10} "
                    f"{format_time(s['compute_time_s']):>10} {format_time(s['exposed_comm_s']):>10} "
                    f"{format_time(max(s['idle_time_s'], 0.0)):>10} {s['samples_per_s']:>10.4g} "
                    f"{s['speedup']:>7.3g}x {s['efficiency']:>7.0%} "
                    f"{format_rate_Bps(s['busbw_Bps']):>11}")
    return "\n".join(rows)
