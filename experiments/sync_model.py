"""Predicting a sync-SGD iteration on the test bed with the simulator (``dsgd_sim.sync``).

Inputs, none taken from the run being predicted:

* the network: ``NetworkInputs`` from the calibration: the ring rounds timed on a test bed of
  as many hosts at the same rate (``experiments/ring_probe.py``), which the simulator's
  all-reduce composes (``ClusterConfig.round_costs``); without that table, the payload rate
  with ACKs sharing the link, Gloo's per-message latency, the fixed cost of one all_reduce call,
  and the duplex start-up of each ring round, added to the simulator's iteration;
* the replica's step: a profile written by one process of ``real/sync.py`` run alone (no network)
  with the same model, batch and thread count (``--profile-out``): per-layer gradient sizes and
  the compute-time samples, plus the rest of its step (data, optimizer: ``idle_time_s``) as a
  fixed per-iteration overhead. With real compute those two are then taken again from one
  process run alone that waits, between its steps, as long as the first simulation's all-reduce
  (``paused_step``, ``real/sync.py --emulate-comm``): after a wait of tens of milliseconds a
  step's compute took 2-3 times as long on this machine and the rest of it 4-9 times (caches
  and the processor's state go cold; ``python -m experiments.after_pause``), and the bed's
  replicas run their step after one; a process asleep through its wait may cool more than a
  replica handling its links' packets (``LOG.md``). With emulated compute, the step of one
  process run alone with the same ``--emulate-compute`` (and ``--real-gradients`` where the run
  has it) gives the compute and the rest (``emulated_step``): its sleeps wake late and its gradients' hooks and zeros take
  time (an emulated 50 ms step of the mlp computed 50.8 ms alone, 50.7-50.9 on the test bed's
  replicas), and its rest of the step is not the real one's (1.0 ms alone against 0.42 for real
  compute; 1.1-1.2 on the bed);
* core sharing: with real compute every replica is a process on the same machine, one thread
  each, so the simulator's ``cores`` is the machine's CPU count; with emulated compute (sleep) the
  replicas take no CPU to compute and ``cores`` is left unset.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dsgd_sim.cluster import ClusterConfig
from dsgd_sim.compute import Constant
from dsgd_sim.sync import SyncConfig, SyncSimulation
from dsgd_sim.workload import load_profile

from .configs import SyncRunConfig
from .measure import seeded
from .model import NetworkInputs, allreduce_messages
from .single_process import RUNS

REPO = Path(__file__).resolve().parent.parent
THREADS = 1  # torch threads per replica, in the profile and on the test bed alike
EMULATED_STEPS = 40  # steps of the single-process emulated run, the first EMULATED_WARMUP not timed
EMULATED_WARMUP = 5
PAUSE_GRAIN_S = 1e-3  # a paused step's wait, to the millisecond: one run serves nearby waits
RUN_TIMEOUT_S = 600.0  # a single-process run that takes longer has hung


def run_alone(config: SyncRunConfig, steps: int, warmup_steps: int, *flags: str,
              profile: bool = False) -> tuple[dict, dict | None]:
    """Run ``real/sync.py`` as one process (no test bed) with ``config``'s model and batch and
    ``flags``: its summary, and its layer profile (``--profile-out``) where asked for."""
    with tempfile.TemporaryDirectory() as tmp:
        layers, summary = Path(tmp, "profile.json"), Path(tmp, "summary.json")
        argv = [sys.executable, str(REPO / "real/sync.py"), *seeded("real/sync.py", [
                "--nproc-per-node", "1", "--model", config.model,
                "--batch-size", str(config.batch_size), "--steps", str(steps),
                "--warmup-steps", str(warmup_steps), "--threads", str(THREADS), "--no-progress",
                *flags, *(["--profile-out", str(layers)] if profile else []),
                "--json", str(summary)])]
        subprocess.run(argv, check=True, capture_output=True, timeout=RUN_TIMEOUT_S,
                       env={**os.environ, "MASTER_ADDR": "127.0.0.1"})
        return (json.loads(summary.read_text()),
                json.loads(layers.read_text()) if profile else None)


def single_process_profile(config: SyncRunConfig) -> dict:
    """Run ``real/sync.py`` as one process (no test bed) and return its profile and summary."""
    def measure() -> dict:
        summary, layers = run_alone(config, config.steps, config.warmup_steps, profile=True)
        return {"profile_path": None, "profile": layers, "summary": summary}
    return RUNS.take("profile", (config.model, config.batch_size, config.steps), measure)


def emulated_step(config: SyncRunConfig) -> dict:
    """The summary of ``real/sync.py`` run as one process (no test bed) with ``config``'s emulated
    compute (``--emulate-compute``, and ``--real-gradients`` where ``config`` has them): its
    ``compute_time_s`` and ``idle_time_s`` (medians over the steps after the warm-up) price an
    emulated replica's step."""
    if not config.emulate_compute_s > 0:
        raise ValueError("an emulated step needs emulated compute (emulate_compute_s > 0)")
    return _step_alone("emulated_step", (config.emulate_compute_s, config.real_gradients), config,
                       "--emulate-compute", f"{config.emulate_compute_s}s",
                       *(["--real-gradients"] if config.real_gradients else []))


def _step_alone(kind: str, key: tuple, config: SyncRunConfig, *flags: str) -> dict:
    """The summary of ``run_alone`` with ``flags`` over ``EMULATED_STEPS`` steps, taken once per
    model, batch and ``key`` (``single_process.RUNS``, as ``kind``)."""
    return RUNS.take(kind, (config.model, config.batch_size, *key),
                     lambda: run_alone(config, EMULATED_STEPS, EMULATED_WARMUP, *flags)[0])


def paused_step(config: SyncRunConfig, pause_s: float) -> dict:
    """The summary of ``real/sync.py`` run as one process (no test bed) with ``config``'s model and
    batch, real compute, waiting ``pause_s`` (to the ``PAUSE_GRAIN_S``) after each step's exchange
    (``--emulate-comm``): its ``compute_time_s`` and ``idle_time_s`` (medians over the steps after
    the warm-up) price a replica's compute and the rest of its step where the all-reduce between
    its steps takes that long. Taken once per model, batch and pause, and kept with the results
    (``single_process.RUNS``)."""
    grains = round(max(0.0, pause_s) / PAUSE_GRAIN_S)
    return _step_alone("paused_step", (grains,), config,
                       "--emulate-comm", f"{grains * PAUSE_GRAIN_S:.6f}s")


def predict_sync_s(config: SyncRunConfig, net: NetworkInputs, reference: dict | None = None,
                   cpu_cores: int | None = None, step: dict | None = None,
                   paused: dict | None = None, priced: dict | None = None) -> float:
    """Mean iteration seconds the simulator predicts for ``config`` on the test bed: the
    single-process profile ``reference`` (``single_process_profile``) gives the gradient; with
    emulated compute the single-process emulated ``step`` (``emulated_step``) gives the compute
    and the rest of the step. With real compute a first simulation from the profile's compute
    and rest gives the wait between a replica's compute and the rest of its step (the
    all-reduce, the straggler's wait included), and the step of one process run alone that
    waits that long (``paused``: ``paused_step``) gives the compute (a constant, as the emulated
    step's) and the rest the iteration is simulated with; a wait under half a ``PAUSE_GRAIN_S``
    (one replica) keeps the profile's. ``priced``, where given, is filled with the step priced:
    ``compute_s`` (the profile's median where it is kept), ``rest_s`` and, with real compute,
    the simulated ``wait_s`` (the paused run waits it to the ``PAUSE_GRAIN_S``)."""
    reference = reference or single_process_profile(config)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(reference["profile"], handle)
    try:
        workload = load_profile(handle.name)
    finally:
        os.unlink(handle.name)
    emulated = config.emulate_compute_s > 0
    taken = {"compute_s": statistics.median(reference["profile"]["compute_s"]),
             "rest_s": reference["summary"].get("idle_time_s") or 0.0}
    if emulated:
        step = step or emulated_step(config)
        taken = {"compute_s": step["compute_time_s"], "rest_s": step["idle_time_s"]}
        workload = workload.with_compute(Constant(taken["compute_s"]))
    table = net.rounds_for("backend", config.hosts)  # the gradient's all-reduce is Gloo's own
    cluster = ClusterConfig(replicas=config.hosts,
                            bandwidth_bps=net.for_ring_of(config.hosts).duplex_payload_bps,
                            latency_s=net.latency_s,
                            cores=None if emulated else (cpu_cores or os.cpu_count()),
                            round_costs=table)
    # the measured rounds hold the call's and the rounds' own costs; without them, those
    extra_s = 0.0 if table is not None else _unmeasured_call_s(config, net, workload.grad_bytes)
    result = _simulate(cluster, workload)
    wait_s = float((result.iteration_s - result.compute_s).mean()) + extra_s
    if not emulated and round(wait_s / PAUSE_GRAIN_S) > 0:
        paused = paused or paused_step(config, wait_s)
        taken = {"compute_s": paused["compute_time_s"], "rest_s": paused["idle_time_s"],
                 "wait_s": wait_s}
        result = _simulate(cluster, workload.with_compute(Constant(taken["compute_s"])))
    if priced is not None:
        priced.update(taken)
    return float(result.iteration_s.mean()) + taken["rest_s"] + extra_s


def _simulate(cluster: ClusterConfig, workload):
    """The simulator's sync iterations of ``workload`` on ``cluster`` (Gloo's ring, 50 of them)."""
    return SyncSimulation(SyncConfig(cluster, workload, algorithm="ring", iterations=50,
                                     seed=0)).run()


def _unmeasured_call_s(config: SyncRunConfig, net: NetworkInputs, grad_bytes: float) -> float:
    """What the simulator's all-reduce leaves out where no rounds were measured: the fixed cost
    of a call and the duplex start-up of every ring round (Gloo's ring over the whole gradient,
    one bucket for these models)."""
    call_s = net.call_overhead_s if config.hosts > 1 else 0.0
    return call_s + sum(net.startup_excess_s(size)
                        for size in allreduce_messages("backend", config.hosts, grad_bytes))


def predict_async(config, net: NetworkInputs, reference: dict | None = None) -> dict:
    """Seconds per applied update and mean staleness the simulator predicts for an
    ``AsyncRunConfig``: workers = hosts - 1, the server's link shared by pushes and replies, the
    server's apply time = the optimizer/data time of the single-process run (no network)."""
    from .ps_model import simulate_async  # it imports this module
    reference = reference or single_process_profile(SyncRunConfig(
        hosts=1, bandwidth_bps=config.bandwidth_bps, model=config.model,
        batch_size=config.batch_size))
    sim = simulate_async(config.workers, config.updates, config.emulate_compute_s, net, reference)
    return {"per_update_s": sim["per_update_s"], "staleness_mean": sim["staleness_mean"]}
