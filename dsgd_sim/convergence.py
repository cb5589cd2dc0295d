"""Sync, K-sync and async side by side in loss against simulated time (``--replay``).

Simulates the schedules the replay needs (full sync and K-sync on the run's cluster, or reuses
the ones already simulated), replays each on the synthetic task of ``replay.py``, and sums the
curves up: the best loss every mode reaches, and how long each takes to get there.

Every mode processes the same simulated run length: sync and K-sync ``iterations`` iterations,
async the updates of its own run (in ``--mode both``, as many gradients as sync uses).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .parameter_server import AsyncResult
from .replay import Curve, LogisticTask, ReplayConfig, replay
from .sync import SyncConfig, SyncResult, SyncSimulation
from .units import format_time


def replay_k(sync_config: SyncConfig) -> int:
    """K of the K-sync curve: ``--k-sync`` if below R, else half the replicas."""
    replicas = sync_config.cluster.replicas
    if sync_config.k_sync and sync_config.k_sync < replicas:
        return sync_config.k_sync
    return max(1, replicas // 2)


def _sync_curve(task, config: ReplayConfig, mode: str, sync_config: SyncConfig,
                result: SyncResult | None) -> Curve:
    if result is None:
        result = SyncSimulation(sync_config).run()
    return replay(task, config, mode, np.cumsum(result.iteration_s), sync_config.gradients_used)


def curves(sync_config: SyncConfig, sync_result: SyncResult | None, async_result: AsyncResult,
           config: ReplayConfig) -> dict[str, Curve]:
    """Loss curves keyed by mode (``sync``, ``k-sync`` when it differs from sync, ``async``).

    ``sync_result`` is reused for whichever of sync and K-sync ``sync_config`` describes."""
    task = LogisticTask(config)
    replicas = sync_config.cluster.replicas
    k = replay_k(sync_config)
    full = replace(sync_config, k_sync=None)
    is_full = sync_config.gradients_used == replicas
    out = {"sync": _sync_curve(task, config, "sync", full, sync_result if is_full else None)}
    if k < replicas and not sync_config.overlap:
        k_config = replace(sync_config, k_sync=k)
        out["k-sync"] = _sync_curve(task, config, "k-sync", k_config,
                                    None if is_full else sync_result)
    out["async"] = replay(task, config, "async", async_result.update_end_s,
                          staleness=async_result.staleness)
    return out


def summarize(found: dict[str, Curve], k: int | None = None) -> dict:
    """The best loss every mode reaches, and each mode's simulated seconds and updates to it."""
    target = max(float(curve.loss.min()) for curve in found.values())
    return {"target_loss": target,
            "time_to_target_s": {m: c.time_to_reach(target) for m, c in found.items()},
            "updates_to_target": {m: c.updates_to_reach(target) for m, c in found.items()},
            "final_loss": {m: float(c.loss[-1]) for m, c in found.items()},
            "k_sync": k}


def format_summary(summary: dict, staleness_lr: bool) -> str:
    """One line: how long each mode takes to the loss all of them reach, and where each ends."""
    times = summary["time_to_target_s"]
    finals = [f"{mode} {loss:.3g}" for mode, loss in summary["final_loss"].items()]
    rate = ", async with the staleness-aware rate" if staleness_lr else ""
    if not any(summary["updates_to_target"].values()):  # the best all reach is the start
        return (f"convergence: not every mode got below the starting loss "
                f"{summary['target_loss']:.4g}, so no loss they all reach compares them (a "
                f"smaller --lr may). Final loss: {', '.join(finals)}{rate}")
    fastest = min(times, key=lambda m: times[m])
    parts = [f"{mode} {format_time(t)}" for mode, t in times.items()]
    return (f"convergence: to loss {summary['target_loss']:.4g} (the best every mode reaches): "
            f"{', '.join(parts)}; {fastest} first. Final loss: {', '.join(finals)}{rate}")
