"""``--plot FILE.png``: a timeline of the first sync iterations, speedup against replicas, the
async staleness histogram, and (with ``--replay``) loss against simulated time per mode."""

from __future__ import annotations

from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from .argparse_oneline import save_figure  # noqa: E402
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
    rows = min(config.cluster.replicas, TIMELINE_REPLICAS)
    ax.set_yticks(range(rows))
    ax.set_ylim(rows - 0.5, -0.5)  # replica 0 on top, one row per replica
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("replica")
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
        result = SyncSimulation(sub).run()
        speedups.append(summarize(result, baseline_iteration_s(sub, result))["speedup"])
    return counts, speedups


def _speedup(ax, configs: list[SyncConfig], summaries: list[dict]) -> None:
    counts, speedups = _speedup_points(configs, summaries)
    ax.plot(counts, counts, ls="--", color="grey", label="ideal (linear)")
    ax.plot(counts, speedups, marker="o", label="simulated")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("replicas")
    ax.set_ylabel("speedup over one replica")
    ax.set_title("scaling")
    ax.legend()


def _staleness(ax, summary: dict) -> None:
    counts = summary["staleness_hist"]
    ax.bar(range(len(counts)), counts, width=1.0, color="#6acc64")
    ax.axvline(summary["staleness_mean"], color="black", ls="--",
               label=f"mean {summary['staleness_mean']:.3g}")
    ax.set_xlabel("staleness (updates applied between pull and apply)")
    ax.set_ylabel("updates")
    ax.set_title(f"async staleness, {summary['workers']} workers")
    ax.legend()


def _convergence(ax, curves: dict) -> None:
    for mode, curve in curves.items():
        ax.plot(curve.time_s, curve.loss, label=mode)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("training loss (replay)")
    ax.set_title("error against runtime")
    ax.legend()


def supported_formats() -> set[str]:
    """Image file extensions matplotlib can write here (png, pdf, svg, ...)."""
    return set(plt.figure().canvas.get_supported_filetypes()) | {"jpg"}


def plot_run(path: str, runs) -> None:
    """Write a PNG with a panel for each part of ``runs`` (``cli.Runs``) that was simulated."""
    panels = []
    if runs.summaries:
        panels += [lambda ax: _timeline(ax, runs.configs[-1]),
                   lambda ax: _speedup(ax, runs.configs, runs.summaries)]
    if runs.async_summaries:
        panels.append(lambda ax: _staleness(ax, runs.async_summaries[-1]))
    if runs.curves:
        panels.append(lambda ax: _convergence(ax, runs.curves))
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(13, 4.5 * rows), squeeze=False)
    for ax, draw in zip(axes.flat, panels):
        draw(ax)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
