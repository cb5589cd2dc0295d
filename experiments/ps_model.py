"""The parameter server on the test bed, as the simulator sees it.

``simulate_async`` is ``experiments.sync_model.predict_async`` opened up: the same inputs (the
calibrated network, the single-process profile's gradient size and data/optimizer time as the
server's apply time, the first round dropped as the real server drops it) with two more knobs,
the server's link rate (``ps_bandwidth_bps``: a server host faster than the workers', capped
each way at half of what the whole bed carries where the calibration saw the machine set the
pace: ``server_link_bps``) and the
compute time (0: workers only exchange, the server's ceiling), and the whole staleness
histogram in the result; ``predict_async`` calls it with the defaults.

Runs on the test bed go through ``experiments.measure.run_collect`` (any ``TestbedConfig``, a
faster or slower host included) and ``experiments.measure.rank_command``.
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from dsgd_sim.cluster import ClusterConfig
from dsgd_sim.compute import Constant
from dsgd_sim.parameter_server import AsyncConfig, AsyncSimulation, leaves_a_round, timed_rate
from dsgd_sim.workload import load_profile

from .configs import SyncRunConfig, warmup_updates
from .model import NetworkInputs
from .sync_model import single_process_profile

def reference_run(model: str, batch_size: int) -> dict:
    """The single-process profile and summary of ``model`` (no network), as the other
    predictions use it: gradient sizes and the data/optimizer time of a step."""
    return single_process_profile(SyncRunConfig(hosts=1, bandwidth_bps=1.0, model=model,
                                                batch_size=batch_size))


def profile_workload(reference: dict, compute_s: float):
    """The profile's workload with a constant compute time of ``compute_s`` per gradient."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(reference["profile"], handle)
    try:
        return load_profile(handle.name).with_compute(Constant(compute_s))
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


def simulate_async(workers: int, updates: int, compute_s: float, net: NetworkInputs,
                   reference: dict, ps_bandwidth_bps: float | None = None,
                   one_push_at_a_time: bool = False, fair_server_nic: bool = False) -> dict:
    """The simulator's async run: ``per_update_s`` (after ``warmup_updates``, as the real
    server is told to count), ``staleness_mean`` and ``staleness_hist`` (counts indexed by
    staleness, as the real server's ``staleness_hist``). ``ps_bandwidth_bps`` None: the server's
    link is a worker's; either way as the bed carries it (``server_link_bps``).
    ``one_push_at_a_time`` False: the server's link takes as many pushes at once as its rate
    allows, in arrival order, as ``real/ps_server.py`` does with ``--push-window`` the link's
    rate over a worker's (``configs.push_window``); True: a server that
    receives one whole push before it takes the next. ``fair_server_nic``: the server's NICs
    share their rate fairly among the messages in flight instead of in arrival order."""
    skip = warmup_updates(workers, updates)
    if not leaves_a_round(skip, workers, updates):
        raise ValueError(f"{updates} updates leave a round or less of {workers} workers to time "
                         f"after a warm-up of {skip}")
    workload = profile_workload(reference, compute_s)
    cluster = ClusterConfig(replicas=workers, bandwidth_bps=net.duplex_payload_bps,
                            latency_s=net.latency_s,
                            ps_bandwidth_bps=server_link_bps(net, ps_bandwidth_bps,
                                                             workload.grad_bytes))
    service_s = reference["summary"].get("idle_time_s") or 0.0
    result = AsyncSimulation(AsyncConfig(cluster, workload, updates=updates, seed=0,
                                         service_time_s=service_s,
                                         one_push_at_a_time=one_push_at_a_time,
                                         fair_server_nic=fair_server_nic)).run()
    _, _, rate = timed_rate(result.update_end_s, workers, skip)
    return {"per_update_s": 1.0 / rate,
            "staleness_mean": float(result.staleness.mean()),
            "staleness_hist": np.bincount(result.staleness).tolist()}
