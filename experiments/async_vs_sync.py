"""Async against sync SGD on the same test bed: throughput, staleness, loss against wall-clock.

W workers of one model at one rate, each gradient taking the same emulated compute time
(``--emulate-compute 50ms --real-gradients``: the real gradient and loss are computed and the
step padded with a sleep to 50 ms, so the runs learn while compute costs what an accelerator's
would, not what the shared CPU's does):

* **async:** ``real/async_ps.py``, the server on an extra host (W + 1 hosts), ``updates``
  gradients applied; time per applied update = 1 / ``updates_per_s`` (after the warm-up,
  ``configs.warmup_updates``);
* **sync:** ``real/sync.py``, W replicas on W hosts, ``updates / W`` steps (the same number of
  samples: every step takes one batch per replica); time per step = the median iteration.

Both predicted from the calibration alone: ``experiments.ps_model.simulate_async`` (what
``experiments.sync_model.predict_async`` runs; seconds per update and the staleness histogram,
one simulation) and ``predict_sync_s`` with the ring rounds timed on the sync run's own test
bed just before and after it (``measure.run_bracketed``) (fidelity rows, seconds). Throughput in samples/s; the loss curves (the
scripts' ``loss_curve``: per applied update / per step, seconds and loss) are measured only.
Each script keeps its own default learning rate (async: SGD lr 0.1 on each 32-sample gradient;
sync: SGD lr 0.05, momentum 0.9 on the W x 32-sample average), recorded in the results.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from dsgd_sim.argparse_oneline import save_figure

from .configs import (MBIT, AsyncRunConfig, Experiment, SyncRunConfig, push_window, replay_stored,
                      rows_named, warmup_updates)
from .model import NetworkInputs
from .measure import (gloo_round_sizes, rank_command, run_bracketed, run_collect, script_step,
                      testbed_config)
from .ps_model import reference_run, simulate_async

SYNC_WARMUP_STEPS = 5
DROPPED_KEYS = ("update_log",)  # per-update lists the results file does not keep
TESTBED_TIMEOUT_S = 600.0  # one test bed's command


@dataclass(frozen=True)
class AsyncVsSyncConfig:
    """One grid point: ``workers`` async workers (and a server) against as many sync replicas,
    at ``bandwidth_bps``, every gradient padded to ``emulate_compute_s`` seconds."""

    workers: int
    bandwidth_bps: float
    model: str = "mlp"
    emulate_compute_s: float = 0.05
    updates: int = 400  # async gradients applied; sync runs updates / workers steps
    batch_size: int = 32
    kind: str = field(default="async_vs_sync", init=False)

    def __post_init__(self):
        if self.workers < 2:
            raise ValueError(f"need at least 2 workers, got {self.workers}")
        if not self.bandwidth_bps > 0:
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth_bps} bit/s")
        if not self.emulate_compute_s > 0:
            raise ValueError(f"emulated compute must be > 0 s, got {self.emulate_compute_s}")
        if self.updates < self.workers * 2 * SYNC_WARMUP_STEPS:
            raise ValueError(f"updates ({self.updates}) must be at least {2 * SYNC_WARMUP_STEPS} "
                             f"per worker (the sync run's steps)")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {self.batch_size}")

    @property
    def steps(self) -> int:
        """Sync steps: as many samples as the async run's updates."""
        return self.updates // self.workers

    @property
    def async_run(self) -> AsyncRunConfig:
        return AsyncRunConfig(self.workers + 1, self.bandwidth_bps, self.model,
                              self.emulate_compute_s, self.updates, self.batch_size)

    @property
    def sync_run(self) -> SyncRunConfig:
        return SyncRunConfig(self.workers, self.bandwidth_bps, self.model, self.emulate_compute_s,
                             self.steps, SYNC_WARMUP_STEPS, self.batch_size, real_gradients=True)

    @property
    def label(self) -> str:
        return (f"{self.workers} workers {self.bandwidth_bps / MBIT:g}Mbps {self.model} "
                f"{self.emulate_compute_s * 1e3:g}ms")

    def as_dict(self) -> dict:
        return asdict(self)


def async_vs_sync(quick: bool = False) -> Experiment:
    """Quick: 4 workers at 200 Mbit/s, 240 updates / 60 steps (2 test beds). Full: 2, 4 and 8
    workers at 200 Mbit/s, 800 updates each (6 test beds)."""
    if quick:
        points = (AsyncVsSyncConfig(4, 200 * MBIT, updates=240),)
    else:
        points = tuple(AsyncVsSyncConfig(w, 200 * MBIT, updates=800) for w in (2, 4, 8))
    return Experiment("async_vs_sync", "Async (parameter server) against sync SGD with the same "
                      "workers, compute and rate: time per update or step, throughput, staleness "
                      "and loss against wall-clock time.", points)


# -- measure and predict -----------------------------------------------------------------------
def measure(point: AsyncVsSyncConfig) -> dict:
    """The async run (W + 1 hosts) and the sync run (W hosts): their summaries, and the ring
    rounds timed on the sync run's test bed around it (``rounds``)."""
    from real.models import build_model, grad_bytes
    compute = ["--emulate-compute", f"{point.emulate_compute_s}s", "--real-gradients",
               "--threads", "1", "--no-progress", "--model", point.model,
               "--batch-size", str(point.batch_size)]
    run_async, run_sync = point.async_run, point.sync_run
    summary_async = run_collect(
        testbed_config(run_async.hosts, point.bandwidth_bps),
        rank_command("real/async_ps.py", compute + [
            "--updates", str(point.updates), "--push-window", str(push_window()),
            "--warmup-updates", str(warmup_updates(point.workers, point.updates))], "async.json"),
        "async.json", f"async {point.label}", TESTBED_TIMEOUT_S)
    files, rounds = run_bracketed(
        testbed_config(run_sync.hosts, point.bandwidth_bps),
        [script_step("real/sync.py", compute + ["--steps", str(run_sync.steps), "--warmup-steps",
                                                str(run_sync.warmup_steps)], "sync.json")],
        ("sync.json",), f"sync {point.label}", TESTBED_TIMEOUT_S,
        gloo_round_sizes(run_sync.hosts, grad_bytes(build_model(point.model, 0))))
    return {"async": {k: v for k, v in summary_async.items() if k not in DROPPED_KEYS},
            "sync": files["sync.json"], "rounds": rounds}


def predict(point: AsyncVsSyncConfig, net: NetworkInputs, reference: dict | None = None,
            sync_rounds: dict | None = None) -> dict:
    """Seconds per applied update (async) and per step (sync; its ring rounds from
    ``sync_rounds``, the table timed around the sync run on its own test bed, where given), the
    staleness histogram, and the throughputs they imply (samples/s)."""
    from .sync_model import predict_sync_s
    reference = reference or reference_run(point.model, point.batch_size)
    sim = simulate_async(point.workers, point.updates, point.emulate_compute_s, net, reference)
    step_s = predict_sync_s(point.sync_run, net.with_rounds(point.workers, sync_rounds), reference)
    return {"per_update_s": sim["per_update_s"], "staleness_mean": sim["staleness_mean"],
            "staleness_hist": sim["staleness_hist"], "step_s": step_s,
            "async_samples_per_s": point.batch_size / sim["per_update_s"],
            "sync_samples_per_s": point.workers * point.batch_size / step_s}


def rows(experiment: Experiment, net_by_rate: dict, measure_fn=measure, predict_fn=predict) -> list[dict]:
    """Per point an async row (seconds per applied update) and a sync row (seconds per step)."""
    out = []
    for point in experiment.points:
        measured = measure_fn(point)
        predicted = predict_fn(point, net_by_rate[point.bandwidth_bps],
                               sync_rounds=measured.get("rounds"))
        a, s = measured["async"], measured["sync"]
        common = {"workers": point.workers, "bandwidth_bps": point.bandwidth_bps}
        out.append({"config": f"async per update {point.label}", "mode": "async", **common,
                    "predicted_s": predicted["per_update_s"], "measured_s": 1.0 / a["updates_per_s"],
                    "predicted_samples_per_s": predicted["async_samples_per_s"],
                    "measured_samples_per_s": a["updates_per_s"] * point.batch_size,
                    "predicted_staleness_mean": predicted["staleness_mean"],
                    "measured_staleness_mean": a["staleness_mean"],
                    "predicted_staleness_hist": predicted["staleness_hist"],
                    "measured_staleness_hist": a["staleness_hist"],
                    "loss_curve": a["loss_curve"], "final_loss": a["final_loss"],
                    "measured": {k: v for k, v in a.items() if k != "loss_curve"}})
        out.append({"config": f"sync per step {point.label}", "mode": "sync", **common,
                    "predicted_s": predicted["step_s"], "measured_s": s["iteration_time_s"],
                    "predicted_samples_per_s": predicted["sync_samples_per_s"],
                    "measured_samples_per_s": s["samples_per_s"],
                    "loss_curve": [[t, loss] for _, t, loss in s["loss_curve"]],
                    "final_loss": s["final_loss"],
                    "measured": {k: v for k, v in s.items() if k != "loss_curve"},
                    **({"rounds": measured["rounds"]} if measured.get("rounds") else {})})
    return out


def stored_measurements(point: AsyncVsSyncConfig, stored_rows: list[dict]) -> dict:
    """What ``measure(point)`` returned in a stored run (``async_vs_sync.json``), rebuilt from its
    two rows (found by their configs, as ``rows`` names them): to predict it again. The sync loss
    curve's first field, which the rows leave out, comes back as None."""
    a, s = rows_named(stored_rows, [f"async per update {point.label}",
                                    f"sync per step {point.label}"])
    return {"async": {**a["measured"], "loss_curve": a["loss_curve"]},
            "sync": {**s["measured"], "loss_curve": [[None, t, loss] for t, loss in s["loss_curve"]]},
            "rounds": s.get("rounds")}


def repredict(result: dict, net_by_rate: dict, predict_fn=predict) -> list[dict]:
    """The rows of a stored run predicted again from ``net_by_rate`` (its own calibration):
    same measurements, today's model; the single-process runs (the profile, the workers' timed
    sleeps, the sync half's emulated step) are the ones kept with the result where
    ``run.py --repredict`` loaded them (``experiments.single_process``), else taken on this
    machine."""
    points = tuple(AsyncVsSyncConfig(**{k: v for k, v in p.items() if k != "kind"})
                   for p in result["points"])
    return replay_stored(result, points, stored_measurements, rows, net_by_rate,
                         predict_fn=predict_fn)


# -- plot ---------------------------------------------------------------------------------------
def smoothed(curve: list[list], window: int) -> tuple[list[float], list[float]]:
    """Times and the mean loss of each ``window`` consecutive points (losses that are null are
    left out): async losses are one worker's batch each, so a window of W updates holds as
    many samples as one sync step."""
    points = [(t, x) for t, x in curve if x is not None]
    times, means = [], []
    for i in range(0, len(points) - window + 1, window):
        chunk = points[i:i + window]
        times.append(chunk[-1][0])
        means.append(sum(x for _, x in chunk) / window)
    return times, means


def plot(rows_: list[dict], path) -> None:
    """Left: training loss against wall-clock seconds, async and sync, per W. Then one panel
    per W: the staleness histogram measured against the simulator's (counts, log scale: with
    constant compute nearly every update has staleness W - 1; the start-up fills the rest)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    workers = sorted({r["workers"] for r in rows_})
    fig, axes = plt.subplots(1, 1 + len(workers), figsize=(5.2 * (1 + len(workers)), 3.9))
    loss_ax = axes[0]
    for i, w in enumerate(workers):
        for r in (r for r in rows_ if r["workers"] == w):
            window = w if r["mode"] == "async" else 1
            times, means = smoothed(r["loss_curve"], window)
            loss_ax.plot(times, means, "-" if r["mode"] == "async" else "--", color=f"C{i}",
                         label=f"{r['mode']}, {w} workers")
    loss_ax.set(xlabel="wall-clock seconds", ylabel="training loss (mean over W batches)",
                title="loss against time")
    loss_ax.grid(True, alpha=0.3)
    loss_ax.legend(fontsize=7)
    for ax, w in zip(axes[1:], workers):
        r = next(r for r in rows_ if r["workers"] == w and r["mode"] == "async")
        measured, predicted = r["measured_staleness_hist"], r["predicted_staleness_hist"]
        size = max(len(measured), len(predicted))
        x = np.arange(size)
        for offset, counts, name in ((-0.2, measured, "measured"), (0.2, predicted, "simulator")):
            padded = np.zeros(size)
            padded[:len(counts)] = counts
            ax.bar(x + offset, padded, width=0.4, label=name)
        ax.set(xlabel="staleness (updates)", ylabel="applied updates", yscale="log",
               title=f"staleness, {w} workers", xticks=x)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
