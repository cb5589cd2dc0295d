"""``--plot FILE.png``: a timeline of the first iterations and speedup against replicas."""

from __future__ import annotations

from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from .report import baseline_iteration_s, summarize  # noqa: E402
from .sync import SyncConfig, SyncSimulation  # noqa: E402
from .trace import Trace  # noqa: E402

COLORS = {"compute": "#4878d0", "communication": "#ee854a"}
TIMELINE_ITERATIONS = 3
TIMELINE_REPLICAS = 16


def _timeline(ax, config: SyncConfig) -> None:
    shown = replace(config, iterations=min(config.iterations, TIMELINE_ITERATIONS))
    trace = Trace()
    SyncSimulation(shown, trace=trace).run()
    for event in trace.events:
        if event["ph"] == "X" and event["tid"] < TIMELINE_REPLICAS:
            # Compute in the upper half of a replica's row, communication in the lower half:
            # with --overlap the two run at the same time.
            lane = -0.4 if event["cat"] == "compute" else 0.0
            ax.broken_barh([(event["ts"] / 1e3, event["dur"] / 1e3)], (event["tid"] + lane, 0.4),
                           color=COLORS.get(event["cat"], "grey"))
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("replica")
    ax.invert_yaxis()
    ax.set_title(f"first {shown.iterations} iterations, {config.cluster.replicas} replicas "
                 f"({config.algorithm})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, list(COLORS), loc="upper right", fontsize="small")


def _speedup_points(configs: list[SyncConfig], summaries: list[dict]):
    if len(configs) > 1:
        return [c.cluster.replicas for c in configs], [s["speedup"] for s in summaries]
    config = configs[0]
    counts, r = [], 1
    while r < config.cluster.replicas:
        counts.append(r)
        r *= 2
    counts.append(config.cluster.replicas)
    speedups = []
    for count in counts:
        k_sync = min(config.k_sync, count) if config.k_sync else None
        sub = replace(config, cluster=config.cluster.with_replicas(count), k_sync=k_sync,
                      iterations=min(config.iterations, 50))
        speedups.append(summarize(SyncSimulation(sub).run(), baseline_iteration_s(sub))["speedup"])
    return counts, speedups


def plot_run(path: str, configs: list[SyncConfig], summaries: list[dict]) -> None:
    """Write a two-panel PNG for a run or a sweep."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    _timeline(left, configs[-1])
    counts, speedups = _speedup_points(configs, summaries)
    right.plot(counts, counts, ls="--", color="grey", label="ideal (linear)")
    right.plot(counts, speedups, marker="o", label="simulated")
    right.set_xscale("log", base=2)
    right.set_yscale("log", base=2)
    right.set_xlabel("replicas")
    right.set_ylabel("speedup over one replica")
    right.set_title("scaling")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
