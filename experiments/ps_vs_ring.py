"""Parameter server against ring all-reduce: where each wins (the BytePS argument).

W workers, every link at rate B. The parameter server sits on its own extra host (host 0) whose
link is k x B (``TestbedConfig(slow_host_bps=k*B, slow_rank=0)``: "slow" host, here a faster
one). One *round* is every worker's gradient in and the weights out once:

* **PS, measured:** ``real/async_ps.py --emulate-compute 0 --push-window k`` (workers only
  exchange: the server's ceiling; k gradients let in at once, in arrival order,
  ``configs.push_window``); round = W / ``updates_per_s`` (after the warm-up,
  ``configs.warmup_updates``).
* **Ring, measured:** Gloo's own all-reduce of the same gradient bytes on W hosts at B
  (``real/allreduce.py --algorithms backend``, median of the slowest rank), with ring rounds
  timed on the same test bed just before and after it (``measure.run_bracketed``).
* **Predicted from the calibration alone:** the PS with the simulator's async model, the server's
  link at k x the calibrated duplex payload rate, but each way at most half of what the whole
  bed carries where the calibration's ring rounds found the machine, not the links, the limit
  (``experiments.ps_model.simulate_async`` with ``server_link_bps``; 8 hosts at 200 Mbit/s on
  2 cores),
  taking pushes in arrival order, as many at once as its link carries at a worker's rate, as
  the real server's window lets them in, and the ring from the rounds timed around its run; also, for the plot, the simulator's server taking one push at a time
  (``predicted_one_push_s``, ``AsyncConfig.one_push_at_a_time``: its inbound is one flow at the
  worker's rate whatever k is, so k buys nothing); the ring with
  ``experiments.model.predict_allreduce_stream_s`` (its calls come back to back, as measured).
* **Alpha-beta closed forms** (``alpha_beta_s``) for the plot and the crossover: ring
  2(W-1)a + 2(W-1)/W n/B; our PS (push the whole gradient, then pull the whole model: a worker's
  link carries 2n serially) max(2a + 2n/B, W n/(kB)); a BytePS-like PS (push and pull
  pipelined in chunks) max(a + n/B, W n/(kB)). The ring's 2(W-1)/W n/B is below 2n/B for every
  W, so our PS never crosses it; the pipelined one does at k* = W n/B / ring, about
  W^2 / (2(W-1)) (``crossover_k``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from dsgd_sim.argparse_oneline import save_figure

from .configs import MBIT, Experiment, push_window, replay_stored, rows_named, warmup_updates
from .model import NetworkInputs, predict_allreduce_stream_s
from .measure import (gloo_round_sizes, rank_command, run_bracketed, run_collect, script_step,
                      testbed_config)
from .ps_model import profile_workload, reference_run, simulate_async

SCHEMES = ("ring", "ps", "ps-pipelined")  # alpha_beta_s's schemes
DROPPED_KEYS = ("update_log", "loss_curve")  # long per-update lists not kept in the results file
TESTBED_TIMEOUT_S = 600.0  # one test bed's command


@dataclass(frozen=True)
class PsVsRingConfig:
    """One grid point: ``workers`` workers at ``bandwidth_bps``; the server's link at each of
    ``server_factors`` x that rate (one test bed each), and one ring test bed of the workers."""

    workers: int
    bandwidth_bps: float
    server_factors: tuple[float, ...] = (1, 2, 4, 8)
    model: str = "mlp"
    updates: int = 120  # PS: gradients applied per run (the first quarter's rounds not timed)
    iters: int = 9      # ring: timed all-reduces (after one warm-up)
    kind: str = field(default="ps_vs_ring", init=False)

    def __post_init__(self):
        if self.workers < 2:
            raise ValueError(f"a ring needs at least 2 workers, got {self.workers}")
        if not self.bandwidth_bps > 0:
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth_bps} bit/s")
        if not self.server_factors or not all(k > 0 for k in self.server_factors):
            raise ValueError(f"server link factors must be positive, got {self.server_factors}")
        if self.updates < 4 * self.workers:
            raise ValueError(f"updates ({self.updates}) must be at least 4 per worker")
        if self.iters < 1:
            raise ValueError(f"iters must be at least 1, got {self.iters}")

    @property
    def label(self) -> str:
        return f"{self.workers} workers {self.bandwidth_bps / MBIT:g}Mbps {self.model}"

    def as_dict(self) -> dict:
        return asdict(self)


def ps_vs_ring(quick: bool = False) -> Experiment:
    """Quick: 4 workers at 200 Mbit/s, server link 1x and 4x (3 test beds). Full: 4 workers at
    50 and 200 Mbit/s and 8 workers at 200 Mbit/s, server link 1x, 2x, 4x, 8x (15 test beds)."""
    if quick:
        points = (PsVsRingConfig(4, 200 * MBIT, server_factors=(1, 4), updates=100, iters=9),)
    else:
        points = tuple(PsVsRingConfig(w, rate * MBIT, updates=30 * w)
                       for w, rate in ((4, 50), (4, 200), (8, 200)))
    return Experiment("ps_vs_ring", "Parameter server on a k-times faster host against Gloo's "
                      "ring all-reduce: seconds per round (every worker's gradient in, the "
                      "weights out once) against k.", points)


# -- closed forms -------------------------------------------------------------------------------
def alpha_beta_s(scheme: str, workers: int, n_bytes: float, rate_bps: float, latency_s: float,
                 server_factor: float = 1.0) -> float:
    """Seconds per round in the alpha-beta model (``scheme`` in ``SCHEMES``, see the module)."""
    beta_n = 8.0 * n_bytes / rate_bps
    server_s = workers * beta_n / server_factor  # W gradients through the server's link
    if scheme == "ring":
        return 2 * (workers - 1) * latency_s + 2 * (workers - 1) / workers * beta_n
    if scheme == "ps":
        return max(2 * latency_s + 2 * beta_n, server_s)
    if scheme == "ps-pipelined":
        return max(latency_s + beta_n, server_s)
    raise ValueError(f"unknown scheme {scheme!r} (known: {', '.join(SCHEMES)})")


def crossover_k(scheme: str, workers: int, n_bytes: float, rate_bps: float,
                latency_s: float) -> float | None:
    """The server-link factor k from which a PS ``scheme`` is as fast as the ring; None when
    its floor (what the workers' own links need) is above the ring at any k."""
    ring_s = alpha_beta_s("ring", workers, n_bytes, rate_bps, latency_s)
    floor_s = alpha_beta_s(scheme, workers, n_bytes, rate_bps, latency_s, server_factor=1e12)
    if floor_s >= ring_s:
        return None
    return workers * 8.0 * n_bytes / rate_bps / ring_s


# -- measure and predict -----------------------------------------------------------------------
def measure(point: PsVsRingConfig) -> dict:
    """One ring test bed, then one PS test bed per server factor; seconds per round of each."""
    from real.models import build_model, grad_bytes
    n = grad_bytes(build_model(point.model, 0))
    ring_args = ["--sizes", f"{n}B", "--algorithms", "backend", "--iters", str(point.iters),
                 "--warmup", "1", "--timeout", "120s"]
    files, rounds = run_bracketed(testbed_config(point.workers, point.bandwidth_bps),
                                  [script_step("real/allreduce.py", ring_args, "ring.json")],
                                  ("ring.json",), f"ring {point.label}", TESTBED_TIMEOUT_S,
                                  gloo_round_sizes(point.workers, n))
    ring = files["ring.json"]["results"][0]
    ps = []
    for k in point.server_factors:
        bed = testbed_config(point.workers + 1, point.bandwidth_bps,
                             slow_host_bps=k * point.bandwidth_bps, slow_rank=0)
        args = ["--model", point.model, "--updates", str(point.updates), "--warmup-updates",
                str(warmup_updates(point.workers, point.updates)), "--emulate-compute", "0",
                "--push-window", str(push_window(k)), "--threads", "1", "--no-progress"]
        summary = run_collect(bed, rank_command("real/async_ps.py", args, "ps.json"), "ps.json",
                              f"PS k={k:g} {point.label}", TESTBED_TIMEOUT_S)
        ps.append({"server_factor": k, "round_s": point.workers / summary["updates_per_s"],
                   "summary": {key: v for key, v in summary.items() if key not in DROPPED_KEYS}})
    return {"grad_bytes": n, "ring_s": ring["time_s"], "ring": ring, "rounds": rounds, "ps": ps}


def predict(point: PsVsRingConfig, net: NetworkInputs, reference: dict | None = None,
            ring_rounds: dict | None = None) -> dict:
    """Seconds per round, predicted from the calibration: the ring (its rounds from
    ``ring_rounds``, the table timed around the ring's run on its own test bed, where given), and
    per server factor the
    simulator's PS with the server's link at k x the duplex payload rate (each way at most half
    of what the bed carries, ``ps_model.server_link_bps``): as the real server
    works, taking pushes in arrival order, k at once (``ps_s``, the fidelity rows), and as a
    server that takes one push at a time (``one_push_s``: k then buys nothing)."""
    reference = reference or reference_run(point.model, 32)
    n = profile_workload(reference, 0.0).grad_bytes
    rate = net.duplex_payload_bps

    def ps_round_s(server_bps, one_push_at_a_time=False):
        sim = simulate_async(point.workers, point.updates, 0.0, net, reference, server_bps,
                             one_push_at_a_time=one_push_at_a_time)
        return point.workers * sim["per_update_s"]

    ring_net = net.with_rounds(point.workers, ring_rounds)
    ring_s = predict_allreduce_stream_s(["backend"], point.workers, n, ring_net)["backend"]
    return {"grad_bytes": n, "ring_s": ring_s,
            "ps_s": {k: ps_round_s(k * rate) for k in point.server_factors},
            "one_push_s": {k: ps_round_s(k * rate, True) for k in point.server_factors}}


def rows(experiment: Experiment, net_by_rate: dict, measure_fn=measure, predict_fn=predict) -> list[dict]:
    """One row for the ring and one per server factor, each a fidelity comparison (seconds)."""
    out = []
    for point in experiment.points:
        net = net_by_rate[point.bandwidth_bps]
        measured = measure_fn(point)
        predicted = predict_fn(point, net, ring_rounds=measured.get("rounds"))
        common = {"workers": point.workers, "bandwidth_bps": point.bandwidth_bps,
                  "grad_bytes": measured["grad_bytes"], "duplex_payload_bps": net.duplex_payload_bps,
                  "latency_s": net.latency_s}
        ab = dict(workers=point.workers, n_bytes=measured["grad_bytes"],
                  rate_bps=net.duplex_payload_bps, latency_s=net.latency_s)
        out.append({"config": f"ring (Gloo) {point.label}", "scheme": "ring", "server_factor": None,
                    **common, "predicted_s": predicted["ring_s"], "measured_s": measured["ring_s"],
                    "alpha_beta_s": alpha_beta_s("ring", **ab), "measured": measured["ring"],
                    **({"rounds": measured["rounds"]} if measured.get("rounds") else {})})
        for ps in measured["ps"]:
            k = ps["server_factor"]
            out.append({"config": f"PS server link {k:g}x {point.label}", "scheme": "ps",
                        "server_factor": k, **common, "predicted_s": predicted["ps_s"][k],
                        "measured_s": ps["round_s"], "predicted_one_push_s": predicted["one_push_s"][k],
                        "alpha_beta_s": alpha_beta_s("ps", server_factor=k, **ab),
                        "alpha_beta_pipelined_s": alpha_beta_s("ps-pipelined", server_factor=k, **ab),
                        "measured": ps["summary"]})
    return out


def stored_measurements(point: PsVsRingConfig, stored_rows: list[dict]) -> dict:
    """What ``measure(point)`` returned in a stored run (``ps_vs_ring.json``), rebuilt from its
    rows (found by their configs, as ``rows`` names them): to predict it again."""
    ring, *ps = rows_named(stored_rows, [f"ring (Gloo) {point.label}"] + [
        f"PS server link {k:g}x {point.label}" for k in point.server_factors])
    return {"grad_bytes": ring["grad_bytes"], "ring_s": ring["measured_s"],
            "ring": ring["measured"], "rounds": ring.get("rounds"),
            "ps": [{"server_factor": row["server_factor"], "round_s": row["measured_s"],
                    "summary": row["measured"]} for row in ps]}


def repredict(result: dict, net_by_rate: dict, predict_fn=predict) -> list[dict]:
    """The rows of a stored run predicted again from ``net_by_rate`` (its own calibration):
    same measurements, today's model. The single-process profile behind the server's apply time
    is the one kept with the result where ``run.py --repredict`` loaded it
    (``experiments.single_process``), else taken on this machine (it moves a prediction by well
    under 1%); with no compute its workers draw no sleeps."""
    points = tuple(PsVsRingConfig(**{**{k: v for k, v in p.items() if k != "kind"},
                                     "server_factors": tuple(p["server_factors"])})
                   for p in result["points"])
    return replay_stored(result, points, stored_measurements, rows, net_by_rate,
                         predict_fn=predict_fn)


# -- plot ---------------------------------------------------------------------------------------
def plot(rows_: list[dict], path) -> None:
    """Seconds per round against the server's link factor k, one panel per (workers, rate): PS
    measured and predicted, ring measured and predicted (flat in k), the alpha-beta lines and
    the pipelined PS's crossover with the ring."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    panels = sorted({(r["workers"], r["bandwidth_bps"]) for r in rows_})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels) + 2.8, 4.2), squeeze=False)
    for ax, (workers, rate) in zip(axes.flat, panels):
        sel = [r for r in rows_ if (r["workers"], r["bandwidth_bps"]) == (workers, rate)]
        ring = next(r for r in sel if r["scheme"] == "ring")
        ps = sorted((r for r in sel if r["scheme"] == "ps"), key=lambda r: r["server_factor"])
        ks = [r["server_factor"] for r in ps]
        grid = np.geomspace(min(ks + [1]), max(ks + [8]), 60)
        ab = dict(workers=workers, n_bytes=ring["grad_bytes"], rate_bps=ring["duplex_payload_bps"],
                  latency_s=ring["latency_s"])
        ax.plot(ks, [r["measured_s"] for r in ps], "o", color="C0", label="PS measured")
        ax.plot(ks, [r["predicted_s"] for r in ps], "-", color="C0", alpha=0.6,
                label="PS simulator (as the real server: k pushes at a time)")
        if all("predicted_one_push_s" in r for r in ps):
            ax.plot(ks, [r["predicted_one_push_s"] for r in ps], ":", color="C0", alpha=0.8,
                    label="PS simulator, one push at a time")
        ax.axhline(ring["measured_s"], color="C1", ls="-",
                   label="ring (Gloo) measured")
        ax.axhline(ring["predicted_s"], color="C1", ls="--", alpha=0.6, label="ring predicted")
        for scheme, style, name in (("ps", "-", "PS alpha-beta (push, then pull)"),
                                    ("ps-pipelined", "--", "PS alpha-beta, pipelined (BytePS)")):
            ax.plot(grid, [alpha_beta_s(scheme, server_factor=k, **ab) for k in grid], style,
                    color="grey", lw=0.8, label=name)
            cross = crossover_k(scheme, **ab)
            if cross is not None:
                ax.axvline(cross, color="grey", ls=":", lw=0.8)
                ax.annotate(f"pipelined PS = ring at k = {cross:.2f}", (cross, ring["measured_s"]),
                            fontsize=7, rotation=90, va="bottom", ha="right")
        ax.set(xscale="log", xlabel="server link / worker link (k)", ylabel="seconds per round",
               title=f"{workers} workers, {rate / 1e6:g} Mbit/s, {ring['grad_bytes'] / 1e6:.2f} MB")
        ax.set_xticks(sorted(set(ks) | {1, 2, 4, 8}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes.flat[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
