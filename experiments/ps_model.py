"""The parameter server on the test bed, as the simulator sees it.

``simulate_async`` is ``experiments.sync_model.predict_async`` opened up: the same inputs (the
calibrated network, the single-process profile's gradient size and data/optimizer time as the
server's apply time, the first round dropped as the real server drops it) with two more knobs,
the server's link rate (``ps_bandwidth_bps``: a server host faster than the workers', capped
each way at half of what the whole bed carries where the calibration saw the machine set the
pace: ``server_link_bps``) and the
compute time (0: workers only exchange, the server's ceiling), and the whole staleness
histogram in the result; ``predict_async`` calls it with the defaults. Two inputs come from
measurements beside the run, none from it: the server's notice waits what the calibration's
queue probe measured (``NetworkInputs.notice_queue_s``, ``experiments/queue_probe.py``), and a
worker's emulated compute is drawn from its sleep timed in this process (``emulated_compute``):
its spread, a fraction of a millisecond, is what lets the simulated workers drift apart as the
real ones do (``docs/async.md``, the notice).

Runs on the test bed go through ``experiments.measure.run_collect`` (any ``TestbedConfig``, a
faster or slower host included) and ``experiments.measure.rank_command``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

from dsgd_sim.cluster import ClusterConfig
from dsgd_sim.compute import Constant, ComputeModel, Empirical
from dsgd_sim.parameter_server import (HEADER_LOOK_S, AsyncConfig, AsyncSimulation,
                                       leaves_a_round, timed_rate)
from dsgd_sim.workload import load_profile

from .configs import SyncRunConfig, warmup_updates
from .model import NetworkInputs
from .single_process import RUNS
from .sync_model import single_process_profile

def reference_run(model: str, batch_size: int) -> dict:
    """The single-process profile and summary of ``model`` (no network), as the other
    predictions use it: gradient sizes and the data/optimizer time of a step."""
    return single_process_profile(SyncRunConfig(hosts=1, bandwidth_bps=1.0, model=model,
                                                batch_size=batch_size))


EMULATED_DRAWS = 40
"""Sleeps timed per emulated compute time (``emulated_compute``): two seconds at 50 ms."""


def emulated_compute(compute_s: float) -> ComputeModel:
    """A worker's emulated compute of ``compute_s`` as it runs: ``real/ps_worker.py`` sleeps that
    long (after its real gradient, with ``--real-gradients``), and a sleep wakes a little late,
    by a little more or less each time. ``EMULATED_DRAWS`` sleeps timed in this process, once
    per time (``single_process.RUNS``, kept with the results; ``Empirical``); no compute (0)
    stays ``Constant``."""
    if compute_s <= 0:
        return Constant(0.0)

    def measure() -> tuple[float, ...]:
        samples = []
        for _ in range(EMULATED_DRAWS):
            start = time.perf_counter()
            time.sleep(compute_s)
            samples.append(time.perf_counter() - start)
        return tuple(samples)
    return Empirical(RUNS.take("sleeps", (compute_s,), measure))


def profile_workload(reference: dict, compute_s: float | ComputeModel):
    """The profile's workload with ``compute_s`` per gradient: seconds (constant) or a
    ``ComputeModel``."""
    compute = compute_s if isinstance(compute_s, ComputeModel) else Constant(compute_s)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(reference["profile"], handle)
    try:
        return load_profile(handle.name).with_compute(compute)
    finally:
        os.unlink(handle.name)


def server_link_bps(net: NetworkInputs, ps_bandwidth_bps: float | None,
                    message_bytes: float) -> float | None:
    """The server's link rate each way as the test bed can carry messages of ``message_bytes``:
    ``ps_bandwidth_bps`` (None: a worker's), but at most half of what the whole bed carries at
    this rate where the calibration saw the machine, not the links, set the pace
    (``NetworkInputs.bed_payload_bps``; every byte of a parameter server crosses the server's
    link, its pushes in and its replies out, as many each way); that cap is never below a
    worker's link."""
    bed_bps = net.bed_payload_bps(message_bytes)
    if bed_bps is None:
        return ps_bandwidth_bps
    worker_bps = net.duplex_payload_bps
    return min(ps_bandwidth_bps or worker_bps, max(worker_bps, bed_bps / 2))


STEADY_UPDATES = 20_000
"""Updates the simulator runs at least, timing the second half where it runs more than the bed
(``configs.warmup_updates`` otherwise): the rows compare steady states, and the simulated
workers, whose only spread is their sleeps', leave their in-step start more slowly than the real
ones. Two workers at 200 Mbit/s start with each push right behind the other's, no notice
waiting, and stay so while the spread keeps each push's header ahead of the other's reply; they
reach the state the test bed's trace shows, every push's notice behind the other's reply, after
some hundreds to several thousand updates (with a notice queue of 5.5 ms: 65.2 ms an update
over 100 updates, 67.9 over 2,000 to 20,000). 20,000 updates take under half a second."""


def simulate_async(workers: int, updates: int, compute_s: float, net: NetworkInputs,
                   reference: dict, ps_bandwidth_bps: float | None = None,
                   one_push_at_a_time: bool = False, fair_server_nic: bool = False) -> dict:
    """The simulator's async run of ``updates`` (at least ``STEADY_UPDATES``): ``per_update_s``
    (after ``warmup_updates``, as the real server is told to count, or the first half of a
    longer run), and of its last ``updates`` updates ``staleness_mean`` and ``staleness_hist``
    (counts indexed by staleness, as the real server's ``staleness_hist``).
    ``ps_bandwidth_bps`` None: the server's link is a worker's; either way as the bed carries it
    (``server_link_bps``).
    ``one_push_at_a_time`` False: the server's link takes as many pushes at once as its rate
    allows, in arrival order, as ``real/ps_server.py`` does with ``--push-window`` the link's
    rate over a worker's (``configs.push_window``); True: a server that
    receives one whole push before it takes the next. ``fair_server_nic``: the server's NICs
    share their rate fairly among the messages in flight instead of in arrival order."""
    skip = warmup_updates(workers, updates)
    if not leaves_a_round(skip, workers, updates):
        raise ValueError(f"{updates} updates leave a round or less of {workers} workers to time "
                         f"after a warm-up of {skip}")
    asked = updates
    if updates < STEADY_UPDATES:
        updates = STEADY_UPDATES
        skip = workers * (updates // (2 * workers))
    workload = profile_workload(reference, emulated_compute(compute_s))
    cluster = ClusterConfig(replicas=workers, bandwidth_bps=net.duplex_payload_bps,
                            latency_s=net.latency_s,
                            ps_bandwidth_bps=server_link_bps(net, ps_bandwidth_bps,
                                                             workload.grad_bytes))
    service_s = reference["summary"].get("idle_time_s") or 0.0
    result = AsyncSimulation(AsyncConfig(cluster, workload, updates=updates, seed=0,
                                         service_time_s=service_s,
                                         one_push_at_a_time=one_push_at_a_time,
                                         fair_server_nic=fair_server_nic,
                                         notice_queue_s=0.0 if fair_server_nic
                                         else net.notice_queue_s,
                                         header_look_s=0.0 if fair_server_nic
                                         else HEADER_LOOK_S)).run()
    _, _, rate = timed_rate(result.update_end_s, workers, skip)
    staleness = result.staleness[-asked:]  # as many as the run applies, from the steady state
    return {"per_update_s": 1.0 / rate,
            "staleness_mean": float(staleness.mean()),
            "staleness_hist": np.bincount(staleness).tolist()}
