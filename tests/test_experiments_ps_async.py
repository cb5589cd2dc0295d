"""The two parameter-server experiments (``experiments/ps_vs_ring.py``, ``experiments/async_vs_sync.py``):
config validation, grid shapes, predictions and rows from a hand-made calibration and reference,
the alpha-beta crossover, the plots; and the loss curves ``real/async_ps.py`` and ``real/sync.py``
write (small real runs on loopback, 2-3 ranks)."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import async_vs_sync as avs
from experiments import ps_vs_ring as pvr
from experiments.configs import EXPERIMENTS, select
from experiments.fidelity import fidelity_row
from experiments.model import NetworkInputs, predict_allreduce_stream_s
from experiments.ps_model import server_link_bps, simulate_async
from dsgd_sim.parameter_server import HEADER_LOOK_S
from experiments import measure, sync_model
from experiments.configs import SyncRunConfig
from experiments.sync_model import emulated_step, paused_step, predict_async, predict_sync_s
from tests.dist_helpers import run_script

CALIBRATION = {"bandwidth_bps": 200e6, "goodput_bps": 191e6, "frame_bytes": 1514,
               "gloo": {"latency_s": 100e-6, "all_reduce_1_element_s": {"median": 300e-6}}}
GRAD_BYTES = 940_000
REPO = Path(__file__).resolve().parent.parent
# What sync_model.single_process_profile returns, made by hand: one layer, 2 ms of compute,
# 1 ms of data and optimizer per step (the server's apply time in the async model).
REFERENCE = {"profile": {"model": "hand-made", "batch_size": 32,
                         "layers": [{"name": "w", "grad_bytes": GRAD_BYTES, "backward_s": 0.001}],
                         "compute_s": [0.002] * 5},
             "summary": {"idle_time_s": 0.001}}
# What sync_model.emulated_step returns, made by hand: an emulated step of one process alone,
# its compute past the emulated time and the rest of its step longer than the real one's.
STEP = {"compute_time_s": 0.0508, "idle_time_s": 0.0011}
# What sync_model.paused_step returns, made by hand: the profile's own compute and rest, so that a
# real-compute price is the profile's unless a test says otherwise.
PAUSED = {"compute_time_s": 0.002, "idle_time_s": 0.001}


@pytest.fixture(autouse=True)
def no_single_process_runs_kept():
    """Every test starts and ends with no single-process run kept (``single_process.RUNS``)."""
    from experiments.single_process import RUNS
    RUNS.clear()
    yield
    RUNS.clear()


@pytest.fixture(autouse=True)
def hand_made_emulated_step(monkeypatch):
    """Emulated steps priced from ``STEP``: no single-process run."""
    asked = []
    monkeypatch.setattr(sync_model, "emulated_step", lambda config: asked.append(config) or STEP)
    return asked


@pytest.fixture(autouse=True)
def hand_made_paused_step(monkeypatch):
    """Real-compute steps priced from ``PAUSED``: no single-process run; the waits asked."""
    asked = []
    monkeypatch.setattr(sync_model, "paused_step",
                        lambda config, pause_s: asked.append((config, pause_s)) or PAUSED)
    return asked


@pytest.fixture
def net():
    return NetworkInputs.from_calibration(CALIBRATION)


# -- configs and grids --------------------------------------------------------------------
def test_both_experiments_are_registered_and_selectable_by_name():
    assert {"ps_vs_ring", "async_vs_sync"} <= set(EXPERIMENTS)
    assert [e.name for e in select(["ps_vs_ring", "async_vs_sync"], quick=True)] == \
        ["ps_vs_ring", "async_vs_sync"]


def test_quick_grids_are_three_and_two_test_beds_and_the_full_ones_larger():
    (ring_point,) = pvr.ps_vs_ring(True).points
    assert 1 + len(ring_point.server_factors) == 3  # one ring bed, one PS bed per factor
    (point,) = avs.async_vs_sync(True).points
    full_ring, full_avs = pvr.ps_vs_ring(False).points, avs.async_vs_sync(False).points
    assert sum(1 + len(p.server_factors) for p in full_ring) == 15
    assert {p.server_factors for p in full_ring} == {(1, 2, 4, 8)}
    assert sorted(p.workers for p in full_avs) == [2, 4, 8] and point.workers == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(workers=1, bandwidth_bps=200e6), "at least 2 workers"),
    (dict(workers=4, bandwidth_bps=0), "bandwidth"),
    (dict(workers=4, bandwidth_bps=200e6, server_factors=()), "factors"),
    (dict(workers=4, bandwidth_bps=200e6, server_factors=(1, -2)), "factors"),
    (dict(workers=4, bandwidth_bps=200e6, updates=10), "updates \\(10\\)"),
    (dict(workers=4, bandwidth_bps=200e6, iters=0), "iters"),
])
def test_ps_vs_ring_config_rejects_bad_values_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pvr.PsVsRingConfig(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(workers=1, bandwidth_bps=200e6), "at least 2 workers"),
    (dict(workers=4, bandwidth_bps=-1), "bandwidth"),
    (dict(workers=4, bandwidth_bps=200e6, emulate_compute_s=0), "emulated compute"),
    (dict(workers=4, bandwidth_bps=200e6, updates=30), "updates \\(30\\)"),
])
def test_async_vs_sync_config_rejects_bad_values_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        avs.AsyncVsSyncConfig(**kwargs)


def test_async_vs_sync_runs_the_same_samples_on_one_more_host_for_the_server():
    point = avs.AsyncVsSyncConfig(4, 200e6, updates=320)
    assert point.async_run.hosts == 5 and point.async_run.workers == 4
    assert point.sync_run.hosts == 4 and point.sync_run.steps == 80
    assert point.async_run.updates * 32 == point.sync_run.steps * 4 * 32
    assert point.sync_run.emulate_compute_s == point.async_run.emulate_compute_s == 0.05


# -- alpha-beta forms and the crossover -----------------------------------------------------
def test_alpha_beta_ring_is_the_reference_formula():
    w, n, rate, alpha = 4, 1e6, 100e6, 1e-4
    assert pvr.alpha_beta_s("ring", w, n, rate, alpha) == pytest.approx(
        2 * 3 * alpha + 2 * 3 / 4 * 8e6 / rate)
    with pytest.raises(ValueError, match="'tree'"):
        pvr.alpha_beta_s("tree", w, n, rate, alpha)


def test_push_then_pull_ps_never_catches_the_ring_and_the_pipelined_one_does_at_w2_over_2w_minus_2():
    n, rate = 1e6, 100e6
    for w in (3, 4, 8):
        assert pvr.crossover_k("ps", w, n, rate, 0.0) is None
        assert pvr.alpha_beta_s("ps", w, n, rate, 0.0, server_factor=1e6) > \
            pvr.alpha_beta_s("ring", w, n, rate, 0.0)
        k = pvr.crossover_k("ps-pipelined", w, n, rate, 0.0)
        assert k == pytest.approx(w * w / (2 * (w - 1)))
        assert pvr.alpha_beta_s("ps-pipelined", w, n, rate, 0.0, server_factor=k) == \
            pytest.approx(pvr.alpha_beta_s("ring", w, n, rate, 0.0))
    assert pvr.crossover_k("ps-pipelined", 2, n, rate, 0.0) is None  # W = 2: n/B = ring's n/B


# -- predictions from a hand-made calibration -----------------------------------------------
def test_ps_ceiling_with_a_slow_server_link_is_w_gradients_through_it(net):
    """Zero compute, server link at the workers' rate: the server's link carries W pushes per
    round back to back (each apply overlaps the next push), so a round takes W n/B."""
    sim = simulate_async(4, 120, 0.0, net, REFERENCE)
    n_over_b = 8 * GRAD_BYTES / net.duplex_payload_bps
    assert 4 * sim["per_update_s"] == pytest.approx(4 * n_over_b, rel=0.01)


def test_emulated_compute_is_the_workers_sleep_timed_here_and_none_stays_constant():
    from dsgd_sim.compute import Constant, Empirical
    from experiments.ps_model import EMULATED_DRAWS, emulated_compute
    drawn = emulated_compute(0.002)
    assert isinstance(drawn, Empirical) and len(drawn.samples_s) == EMULATED_DRAWS
    assert min(drawn.samples_s) >= 0.002  # a sleep never wakes early
    assert emulated_compute(0.002).samples_s == drawn.samples_s  # timed once per time
    assert emulated_compute(0.0) == Constant(0.0)


def test_two_workers_pushes_wait_for_the_notice_behind_the_others_reply(net, monkeypatch):
    """2 workers at 200 Mbit/s, 50 ms of compute: the server's link idles between pushes, and in
    the steady state each push's notice leaves while the other worker's reply fills the link.
    The compute is 50 ms and a sleep's lateness drawn from 0, 50, ... 200 µs, made by hand: the
    sleeps timed in this process (``emulated_compute``; tens of µs late, by a little more or less
    each time) once came out so even that the two workers kept to a phase in which no notice
    waited, as they do with no lateness at all (the first assertion below)."""
    from dsgd_sim.compute import Constant, Empirical
    from experiments import ps_model
    queued = dataclasses.replace(net, notice_queue_s=0.0055)
    monkeypatch.setattr(ps_model, "emulated_compute", Constant)
    assert simulate_async(2, 100, 0.05, queued, REFERENCE)["per_update_s"] == \
        pytest.approx(simulate_async(2, 100, 0.05, net, REFERENCE)["per_update_s"], rel=1e-9)
    monkeypatch.setattr(ps_model, "emulated_compute", lambda compute_s: Empirical(
        tuple(compute_s + 5e-5 * (k % 5) for k in range(40))))
    free = simulate_async(2, 100, 0.05, net, REFERENCE)["per_update_s"]
    waited = simulate_async(2, 100, 0.05, queued, REFERENCE)["per_update_s"]
    n_over_b = 8 * GRAD_BYTES / net.duplex_payload_bps
    # compute, push, the server's look for the other worker's header (asleep: the whole look),
    # apply, reply: a worker's turn
    cycle_s = 0.05 + 2 * n_over_b + HEADER_LOOK_S + 0.001
    assert free == pytest.approx(cycle_s / 2, rel=0.01)
    assert waited == pytest.approx((cycle_s + 0.0055) / 2, rel=0.01)
    # a fair server NIC posts every receive ahead (no notice to wait for): the queue is ignored
    assert simulate_async(2, 100, 0.05, queued, REFERENCE, fair_server_nic=True) == \
        simulate_async(2, 100, 0.05, net, REFERENCE, fair_server_nic=True)


def test_ps_vs_ring_prediction_a_faster_server_link_helps_only_a_server_taking_pushes_at_once(net):
    point = pvr.PsVsRingConfig(4, 200e6, server_factors=(1, 2, 4, 8), updates=120)
    predicted = pvr.predict(point, net, REFERENCE)
    n_over_b = 8 * GRAD_BYTES / net.duplex_payload_bps
    # one push at a time: W pushes in turn at the worker's rate, whatever the server's link
    one_push = [predicted["one_push_s"][k] for k in (1, 2, 4, 8)]
    assert one_push == pytest.approx([4 * n_over_b] * 4, rel=0.01)
    # as the real server, k pushes at once: faster with k, down to the workers' own floor
    ps = [predicted["ps_s"][k] for k in (1, 2, 4, 8)]
    assert all(later <= earlier * (1 + 1e-9) for earlier, later in zip(ps, ps[1:]))
    assert ps[0] > 1.8 * ps[2]
    assert ps[-1] >= 2 * n_over_b  # push then pull: 2n/B at least
    assert predicted["ring_s"] == predict_allreduce_stream_s(["backend"], 4, GRAD_BYTES,
                                                             net)["backend"]
    assert predicted["ring_s"] < ps[-1]


def _rounds(hosts_rate_bps: dict) -> dict:
    """Ring-round tables in which each host moves 1 MiB a round at the given payload rate."""
    mib = 1 << 20
    return {str(h): {"results": [{"bytes": mib // 4, "first_s": 0.001, "next_s": 2 * mib / rate},
                                 {"bytes": mib, "first_s": 0.001, "next_s": 8 * mib / rate}]}
            for h, rate in hosts_rate_bps.items()}


def test_bed_limit_comes_only_from_tables_whose_hosts_fell_short_of_their_links(net):
    rate = net.duplex_payload_bps
    at_links = NetworkInputs.from_calibration({**CALIBRATION, "rounds": _rounds({2: rate,
                                                                                 4: 0.98 * rate})})
    assert at_links.bed_payload_bps(GRAD_BYTES) is None  # every table ran at its links' rate
    held = NetworkInputs.from_calibration({**CALIBRATION, "rounds": _rounds({4: rate,
                                                                             8: 0.7 * rate})})
    assert held.bed_payload_bps(GRAD_BYTES) == pytest.approx(8 * 0.7 * rate)
    assert held.bed_payload_bps(2 << 20) is None  # no table reaches 2 MiB: not known


def test_the_beds_cap_never_takes_the_servers_link_below_a_workers_nor_lifts_a_slower_one(net):
    rate = net.duplex_payload_bps
    crowded = NetworkInputs.from_calibration({**CALIBRATION, "rounds": _rounds({2: 0.3 * rate})})
    assert crowded.bed_payload_bps(GRAD_BYTES) == pytest.approx(0.6 * rate)
    assert server_link_bps(crowded, None, GRAD_BYTES) == rate
    assert server_link_bps(crowded, 4 * rate, GRAD_BYTES) == rate
    assert server_link_bps(crowded, 0.5 * rate, GRAD_BYTES) == 0.5 * rate
    assert server_link_bps(net, 4 * rate, GRAD_BYTES) == 4 * rate  # no tables: no cap


def test_a_bed_held_back_by_the_machine_caps_the_servers_link_at_half_of_it_each_way(net):
    """8 workers, server link 8x: the links allow a round of 2n/B (push, then pull); a bed that
    carries 4 workers' worth of traffic in all gives the server 2 workers' worth each way, so
    a round takes W n / (2B) instead."""
    rate = net.duplex_payload_bps
    held = NetworkInputs.from_calibration({**CALIBRATION, "rounds": _rounds({8: 0.5 * rate})})
    n_over_b = 8 * GRAD_BYTES / rate
    free = 8 * simulate_async(8, 160, 0.0, net, REFERENCE, 8 * rate)["per_update_s"]
    capped = 8 * simulate_async(8, 160, 0.0, held, REFERENCE, 8 * rate)["per_update_s"]
    assert free == pytest.approx(2 * n_over_b, rel=0.05)
    assert capped == pytest.approx(8 * n_over_b / 2, rel=0.05)
    # a server link slower than the cap keeps its own rate
    one_x = [8 * simulate_async(8, 160, 0.0, inputs, REFERENCE)["per_update_s"]
             for inputs in (net, held)]
    assert one_x[1] == pytest.approx(one_x[0], rel=1e-9)


def test_ps_vs_ring_rows_are_one_ring_and_one_per_factor_all_fidelity_rows(net):
    point = pvr.PsVsRingConfig(4, 200e6, server_factors=(1, 4), updates=40)
    experiment = pvr.Experiment("ps_vs_ring", "?", (point,))
    measured = {"grad_bytes": GRAD_BYTES, "ring_s": 0.07, "ring": {"time_s": 0.07},
                "ps": [{"server_factor": k, "round_s": r, "summary": {}}
                       for k, r in ((1, 0.2), (4, 0.17))]}
    rows = pvr.rows(experiment, {200e6: net}, lambda p: measured,
                    lambda p, n, **kw: pvr.predict(p, n, REFERENCE, **kw))
    assert [r["scheme"] for r in rows] == ["ring", "ps", "ps"]
    assert [r["measured_s"] for r in rows] == [0.07, 0.2, 0.17]
    assert len({r["config"] for r in rows}) == 3
    predicted = pvr.predict(point, net, REFERENCE)
    assert [r["predicted_s"] for r in rows] == [predicted["ring_s"], predicted["ps_s"][1],
                                                predicted["ps_s"][4]]
    for r in rows:
        row = fidelity_row("ps_vs_ring", r["config"], r["predicted_s"], r["measured_s"])
        assert row["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)


def test_a_stored_run_is_predicted_again_with_its_measurements_kept(net):
    point = pvr.PsVsRingConfig(8, 200e6, server_factors=(1, 8), updates=160)
    experiment = pvr.Experiment("ps_vs_ring", "?", (point,))
    measured = {"grad_bytes": GRAD_BYTES, "ring_s": 0.07, "ring": {"time_s": 0.07},
                "ps": [{"server_factor": k, "round_s": r, "summary": {"updates_per_s": 1 / r}}
                       for k, r in ((1, 0.5), (8, 0.11))]}
    predict = lambda p, n, **kw: pvr.predict(p, n, REFERENCE, **kw)  # noqa: E731
    stored = {"name": "ps_vs_ring", "question": "?", "points": [point.as_dict()],
              "rows": json.loads(json.dumps(pvr.rows(experiment, {200e6: net},
                                                     lambda p: measured, predict)))}
    held = NetworkInputs.from_calibration(
        {**CALIBRATION, "rounds": _rounds({8: 0.5 * net.duplex_payload_bps})})
    again = pvr.repredict(stored, {200e6: held}, predict)
    assert [r["config"] for r in again] == [r["config"] for r in stored["rows"]]
    assert [r["measured_s"] for r in again] == [0.07, 0.5, 0.11]
    assert [r["measured"] for r in again] == [r["measured"] for r in stored["rows"]]
    assert again[2]["predicted_s"] == pytest.approx(predict(point, held)["ps_s"][8])
    assert again[2]["predicted_s"] > 1.5 * stored["rows"][2]["predicted_s"]  # the bed's cap
    stored["rows"].pop()
    with pytest.raises(ValueError, match="no row 'PS server link 8x 8 workers"):
        pvr.repredict(stored, {200e6: held}, predict)


def _probe(next_s: float) -> dict:
    """A ring-probe table (``measure.bracket``'s) whose rounds take ``next_s`` per MiB."""
    mib = 1 << 20
    return {"results": [{"bytes": mib // 4, "first_s": 1e-3, "next_s": next_s / 4},
                        {"bytes": mib, "first_s": 1e-3, "next_s": next_s}]}


def test_the_ring_is_priced_from_the_rounds_timed_around_it_and_again_from_a_stored_run(net):
    point = pvr.PsVsRingConfig(4, 200e6, server_factors=(1,), updates=40)
    experiment = pvr.Experiment("ps_vs_ring", "?", (point,))
    own = _probe(0.2)
    measured = {"grad_bytes": GRAD_BYTES, "ring_s": 0.07, "ring": {"time_s": 0.07}, "rounds": own,
                "ps": [{"server_factor": 1, "round_s": 0.2, "summary": {}}]}
    predict = lambda p, n, **kw: pvr.predict(p, n, REFERENCE, **kw)  # noqa: E731
    rows = pvr.rows(experiment, {200e6: net}, lambda p: measured, predict)
    ring_s = predict_allreduce_stream_s(["backend"], 4, GRAD_BYTES, net.with_rounds(4, own))["backend"]
    assert rows[0]["predicted_s"] == pytest.approx(ring_s) and rows[0]["rounds"] == own
    assert rows[0]["predicted_s"] != pytest.approx(predict(point, net)["ring_s"])
    assert rows[1]["predicted_s"] == pytest.approx(predict(point, net)["ps_s"][1])  # PS: calibration
    stored = {"name": "ps_vs_ring", "question": "?", "points": [point.as_dict()],
              "rows": json.loads(json.dumps(rows))}
    again = pvr.repredict(stored, {200e6: net}, predict)
    assert [r["predicted_s"] for r in again] == pytest.approx([r["predicted_s"] for r in rows])


def test_async_vs_sync_prices_the_sync_run_from_the_rounds_timed_around_it(net):
    point = avs.AsyncVsSyncConfig(4, 200e6, updates=80)
    own = _probe(0.2)
    predicted = avs.predict(point, net, REFERENCE, sync_rounds=own)
    assert predicted["step_s"] == predict_sync_s(point.sync_run, net.with_rounds(4, own), REFERENCE)
    assert predicted["step_s"] > avs.predict(point, net, REFERENCE)["step_s"]
    measured = {"async": {"updates_per_s": 20.0, "staleness_mean": 3.0, "staleness_hist": [80],
                          "loss_curve": [], "final_loss": 1.0},
                "sync": {"iteration_time_s": 0.3, "samples_per_s": 400.0, "loss_curve": [],
                         "final_loss": 1.0}, "rounds": own}
    rows = avs.rows(avs.Experiment("async_vs_sync", "?", (point,)), {200e6: net},
                    lambda p: measured, lambda p, n, **kw: avs.predict(p, n, REFERENCE, **kw))
    assert rows[1]["predicted_s"] == predicted["step_s"] and rows[1]["rounds"] == own
    assert "rounds" not in rows[0]


def test_async_vs_sync_rows_of_a_stored_run_are_predicted_again_with_their_measurements(net):
    point = avs.AsyncVsSyncConfig(4, 200e6, updates=80)
    measured = {"async": {"updates_per_s": 20.0, "staleness_mean": 3.0, "staleness_hist": [80],
                          "loss_curve": [[0.1, 2.0]], "final_loss": 1.0},
                "sync": {"iteration_time_s": 0.3, "samples_per_s": 400.0,
                         "loss_curve": [[1, 0.3, 2.0]], "final_loss": 1.0}, "rounds": _probe(0.2)}
    predict = lambda p, n, **kw: avs.predict(p, n, REFERENCE, **kw)  # noqa: E731
    rows = avs.rows(avs.Experiment("async_vs_sync", "?", (point,)), {200e6: net},
                    lambda p: measured, predict)
    stored = {"name": "async_vs_sync", "question": "?", "points": [point.as_dict()],
              "rows": json.loads(json.dumps(rows))}
    held = NetworkInputs.from_calibration({**CALIBRATION, "goodput_bps": 95e6})  # a slower bed
    again = avs.repredict(stored, {200e6: held}, predict)
    assert [r["config"] for r in again] == [r["config"] for r in rows]
    for new, old in zip(again, stored["rows"]):
        assert {k: v for k, v in new.items() if not k.startswith("predicted")} == \
            {k: v for k, v in old.items() if not k.startswith("predicted")}
    assert again[0]["predicted_s"] > rows[0]["predicted_s"]  # today's inputs, not the stored ones
    assert again[0]["predicted_s"] == pytest.approx(predict(point, held)["per_update_s"])
    assert again[1]["predicted_s"] == pytest.approx(predict(point, held, sync_rounds=_probe(0.2))["step_s"])
    stored["rows"].pop()
    with pytest.raises(ValueError, match="no row 'sync per step 4 workers"):
        avs.repredict(stored, {200e6: held}, predict)


def test_async_rows_of_a_stored_run_are_predicted_again_with_their_measurements(net, monkeypatch):
    from experiments import run, sync_model
    from experiments.configs import AsyncRunConfig, Experiment
    monkeypatch.setattr(sync_model, "single_process_profile", lambda config: REFERENCE)
    point = AsyncRunConfig(3, 200e6, updates=40)
    summary = {"updates_per_s": 20.0, "staleness_mean": 1.0}
    rows = run.async_rows(Experiment("async", "?", (point,)), {200e6: net}, lambda p: summary,
                          predict_async)
    stored = {"name": "async", "question": "?", "points": [point.as_dict()],
              "rows": json.loads(json.dumps(rows))}
    held = NetworkInputs.from_calibration({**CALIBRATION, "goodput_bps": 95e6})
    again = run.repredict_async(stored, {200e6: held})
    assert again[0]["measured"] == summary and again[0]["measured_s"] == 0.05
    assert again[0]["predicted_s"] == predict_async(point, held)["per_update_s"]
    assert again[0]["predicted_s"] > rows[0]["predicted_s"]
    with pytest.raises(ValueError, match="no calibration at 200 Mbit/s"):
        run.repredict_async(stored, {50e6: held})
    with pytest.raises(ValueError, match="no row '2 workers 200Mbps"):
        run.repredict_async({**stored, "rows": []}, {200e6: held})


def _stored_run(folder, net, calibration):
    """A run folder as run.py leaves it: run.json and ps_vs_ring.json of one 8-worker point."""
    point = pvr.PsVsRingConfig(8, 200e6, server_factors=(1, 8), updates=160)
    measured = {"grad_bytes": GRAD_BYTES, "ring_s": 0.07, "ring": {"time_s": 0.07},
                "ps": [{"server_factor": k, "round_s": r, "summary": {}}
                       for k, r in ((1, 0.5), (8, 0.11))]}
    rows = pvr.rows(pvr.Experiment("ps_vs_ring", "?", (point,)), {200e6: net},
                    lambda p: measured, lambda p, n, **kw: pvr.predict(p, n, REFERENCE, **kw))
    meta = {"command": "python experiments/run.py", "machine": "m", "cpus": 2,
            "load_average": "0.0 0.0 0.0", "wall_s": 1.0, "calibration": [calibration]}
    result = {"name": "ps_vs_ring", "question": "?", "plot": "ps_vs_ring.png",
              "points": [point.as_dict()], "rows": rows, "inputs": {"200000000.0": net.as_dict()}}
    (folder / "run.json").write_text(json.dumps(meta))
    (folder / "ps_vs_ring.json").write_text(json.dumps(result))
    return result


def test_run_repredict_rewrites_the_rows_plot_and_report_and_keeps_the_measurements(
        tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(pvr, "reference_run", lambda model, batch: REFERENCE)
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    calibration = {**CALIBRATION, "rounds": _rounds({8: 0.5 * 188e6})}
    held = NetworkInputs.from_calibration(calibration)
    before = _stored_run(tmp_path, held, calibration)
    summary_path = tmp_path / "summary.json"
    assert run.main(["--repredict", "ps_vs_ring", "--out", str(tmp_path),
                     "--json", str(summary_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(summary_path.read_text()) == printed
    assert printed["rows"] == len(before["rows"])
    assert run.main(["--report-only", "--out", str(tmp_path), "--json", str(summary_path)]) == 0
    assert json.loads(summary_path.read_text()) == json.loads(capsys.readouterr().out) == printed
    after = json.loads((tmp_path / "ps_vs_ring.json").read_text())
    assert [r["measured_s"] for r in after["rows"]] == [r["measured_s"] for r in before["rows"]]
    assert after["repredicted"] == ("python experiments/run.py --repredict ps_vs_ring "
                                    f"--out {tmp_path}")
    assert (tmp_path / "ps_vs_ring.png").exists() and (tmp_path / "RESULTS.md").exists()
    fidelity = json.loads((tmp_path / "fidelity.json").read_text())
    assert [r["predicted_s"] for r in fidelity] == [r["predicted_s"] for r in after["rows"]]


def test_run_repredict_prices_from_the_single_process_runs_kept_with_the_result(
        tmp_path, monkeypatch, capsys):
    from experiments import run
    from experiments.single_process import RUNS
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    taken = []
    monkeypatch.setattr(sync_model, "run_alone", lambda config, *a, **k: taken.append(config)
                        or (REFERENCE["summary"], REFERENCE["profile"]))
    calibration = {**CALIBRATION, "rounds": _rounds({8: 0.5 * 188e6})}
    held = NetworkInputs.from_calibration(calibration)
    _stored_run(tmp_path, held, calibration)  # as stored before the runs were kept with it
    assert run.main(["--repredict", "ps_vs_ring", "--out", str(tmp_path)]) == 0
    assert len(taken) == 1 and "ps_vs_ring.json: 1 single-process run(s) not stored with it, " \
        "taken on this machine (profile) and kept with it" in capsys.readouterr().err
    first = json.loads((tmp_path / "ps_vs_ring.json").read_text())
    [kept] = first["single_process"]
    assert kept["kind"] == "profile" and kept["value"]["summary"] == REFERENCE["summary"]
    assert kept["taken_by"] == "--repredict"  # not the run's own: taken when priced again
    # kept with it: priced again from what it keeps, the run not taken; a kept profile of a
    # larger gradient prices every row longer
    RUNS.clear()
    monkeypatch.setattr(sync_model, "run_alone", lambda *a, **k: pytest.fail("taken again"))
    assert run.main(["--repredict", "ps_vs_ring", "--out", str(tmp_path)]) == 0
    assert "taken on this machine" not in capsys.readouterr().err
    assert json.loads((tmp_path / "ps_vs_ring.json").read_text())["single_process"] == [kept]
    again = json.loads((tmp_path / "ps_vs_ring.json").read_text())
    assert again["rows"] == first["rows"]
    kept["value"]["profile"]["layers"][0]["grad_bytes"] = 2 * GRAD_BYTES
    (tmp_path / "ps_vs_ring.json").write_text(json.dumps(first))
    RUNS.clear()
    assert run.main(["--repredict", "ps_vs_ring", "--out", str(tmp_path)]) == 0
    slower = json.loads((tmp_path / "ps_vs_ring.json").read_text())
    assert [r["measured_s"] for r in slower["rows"]] == [r["measured_s"] for r in first["rows"]]
    assert sum(r["predicted_s"] for r in slower["rows"]) > sum(r["predicted_s"]
                                                               for r in first["rows"])


def test_run_repredict_refuses_bad_kept_runs_in_one_line(tmp_path, net, capsys, monkeypatch):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    result = _stored_run(tmp_path, net, CALIBRATION)
    result["single_process"] = [{"kind": "sleeps", "key": [0.05], "value": "long"}]
    (tmp_path / "ps_vs_ring.json").write_text(json.dumps(result))
    assert run.main(["--repredict", "ps_vs_ring", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ps_vs_ring.json: single_process[0]" in err


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "ps_vs_ring.json").write_text("[1]"), "not a result file"),
    (lambda d: (d / "ps_vs_ring.json").unlink(), "no ps_vs_ring.json"),
    (lambda d: (d / "run.json").write_text("{"), "bad run.json"),
    (lambda d: (d / "run.json").write_text(json.dumps(
        {"calibration": [{**CALIBRATION, "goodput_bps": 150e6}]})), "not the one in run.json"),
])
def test_run_repredict_on_bad_files_says_so_in_one_line(tmp_path, net, damage, message):
    _stored_run(tmp_path, net, CALIBRATION)
    damage(tmp_path)
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--repredict",
                           "ps_vs_ring", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "sync.json").write_text("{"), "sync.json"),
    (lambda d: (d / "sync.json").write_text('{"rows": []}'), "missing key 'name'"),
    (lambda d: (d / "ps_vs_ring.json").unlink() or (d / "ps_vs_ring.json").mkdir(),
     "is a folder"),
    # outputs it could not write: found before any is written
    (lambda d: (d / "ps_vs_ring.png").mkdir(), "ps_vs_ring.png' is not a file name"),
    (lambda d: (d / "RESULTS.md").mkdir(), "RESULTS.md' is not a file name"),
])
def test_run_repredict_writes_nothing_when_another_file_is_bad(tmp_path, net, monkeypatch,
                                                              capsys, damage, message):
    from experiments import run
    monkeypatch.setattr(pvr, "reference_run", lambda model, batch: REFERENCE)
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    _stored_run(tmp_path, net, CALIBRATION)
    damage(tmp_path)
    before = {p.name: p.is_file() and p.read_text() for p in tmp_path.iterdir()}
    assert run.main(["--repredict", "ps_vs_ring", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert {p.name: p.is_file() and p.read_text() for p in tmp_path.iterdir()} == before


def test_an_emulated_step_is_priced_from_one_process_run_with_the_same_emulated_compute(
        net, hand_made_emulated_step):
    config = SyncRunConfig(4, 200e6, emulate_compute_s=0.05)
    nominal = predict_sync_s(config, net, REFERENCE,
                             step={"compute_time_s": 0.05, "idle_time_s": 0.001})
    assert hand_made_emulated_step == []  # a step given is not asked for
    priced = predict_sync_s(config, net, REFERENCE)
    assert hand_made_emulated_step == [config]
    # its compute and the rest of its step in place of the nominal time and the real step's rest
    assert priced - nominal == pytest.approx((0.0508 - 0.05) + (0.0011 - 0.001), abs=1e-6)
    real = SyncRunConfig(4, 200e6)
    predict_sync_s(real, net, REFERENCE)
    assert hand_made_emulated_step == [config]  # real compute: the profile's own figures


def test_the_sync_run_against_async_pads_real_gradients_and_is_priced_so(net, hand_made_emulated_step):
    point = avs.AsyncVsSyncConfig(4, 200e6, updates=80)
    assert point.sync_run.real_gradients and point.sync_run.emulate_compute_s == 0.05
    avs.predict(point, net, REFERENCE)
    assert hand_made_emulated_step == [point.sync_run]
    with pytest.raises(ValueError, match="emulate_compute_s"):
        SyncRunConfig(4, 200e6, real_gradients=True)


def test_a_sync_run_with_real_gradients_is_measured_with_them(monkeypatch):
    commands = []
    monkeypatch.setattr(measure, "run_collect", lambda _config, command, *_a, **_k:
                        commands.append(command) or {"iteration_time_s": 0.4})
    measure.measure_sync(SyncRunConfig(1, 200e6, emulate_compute_s=0.05, real_gradients=True))
    measure.measure_sync(SyncRunConfig(1, 200e6, emulate_compute_s=0.05))
    assert ["--real-gradients" in c.split() for c in commands] == [True, False]


def test_the_single_process_emulated_step_runs_the_emulated_compute_asked_for():
    padded = SyncRunConfig(1, 1e9, emulate_compute_s=0.01, real_gradients=True)
    for config in (SyncRunConfig(1, 1e9, emulate_compute_s=0.01), padded):
        step = emulated_step(config)  # the real one: one process of real/sync.py, 40 steps
        assert step["compute_time_s"] >= 0.01 and step["idle_time_s"] > 0  # no upper bound: a
        # slow machine lengthens a step, and a timing target is no pass/fail check
        assert step["emulate_compute_s"] == 0.01
        assert step["real_gradients"] == config.real_gradients
    assert emulated_step(padded) is step  # once per model, batch and emulated compute
    with pytest.raises(ValueError, match="emulated compute"):
        emulated_step(SyncRunConfig(1, 1e9))


def test_real_compute_is_priced_from_a_step_run_alone_after_the_models_own_wait(
        net, hand_made_paused_step):
    config = SyncRunConfig(4, 200e6)
    # a core per replica: the compute is not shared, and the paused step's figures are the
    # profile's, so the iteration is the profile's
    profiled = predict_sync_s(config, net, REFERENCE, cpu_cores=4, paused=PAUSED)
    assert hand_made_paused_step == []  # a paused step given is not asked for
    assert predict_sync_s(config, net, REFERENCE, cpu_cores=4) == pytest.approx(profiled)
    # the wait asked: the iteration less the compute and the rest of the step
    [(asked, wait_s)] = hand_made_paused_step
    assert asked is config and wait_s == pytest.approx(profiled - 0.002 - 0.001)
    # after that wait one process computed 2 ms longer and took 1.5 ms longer for the rest
    slower = predict_sync_s(config, net, REFERENCE, cpu_cores=4,
                            paused={"compute_time_s": 0.004, "idle_time_s": 0.0025})
    assert slower == pytest.approx(profiled + 0.002 + 0.0015)
    # on 2 cores the 4 replicas share them, two to a core: the wait asked is what the shared
    # compute leaves of the iteration, and 1 ms more of compute a replica costs 2 ms a step
    shared = predict_sync_s(config, net, REFERENCE, cpu_cores=2, paused=PAUSED)
    predict_sync_s(config, net, REFERENCE, cpu_cores=2)
    assert hand_made_paused_step[-1][1] == pytest.approx(shared - 2 * 0.002 - 0.001)
    assert predict_sync_s(config, net, REFERENCE, cpu_cores=2,
                          paused={"compute_time_s": 0.003, "idle_time_s": 0.001}) == \
        pytest.approx(shared + 2 * 0.001)
    # with rounds measured on the bed the wait is the simulated all-reduce's alone
    measured = net.with_rounds(4, _probe(0.2))
    timed = predict_sync_s(config, measured, REFERENCE, cpu_cores=4, paused=PAUSED)
    predict_sync_s(config, measured, REFERENCE, cpu_cores=4)
    assert hand_made_paused_step[-1][1] == pytest.approx(timed - 0.003)
    del hand_made_paused_step[1:]
    # the step priced is kept where asked for
    priced = {}
    predict_sync_s(config, net, REFERENCE, cpu_cores=4, priced=priced)
    assert priced == {"compute_s": 0.002, "rest_s": 0.001,
                      "wait_s": pytest.approx(profiled - 0.003)}
    # emulated compute takes no such step
    priced = {}
    predict_sync_s(SyncRunConfig(4, 200e6, emulate_compute_s=0.05), net, REFERENCE, priced=priced)
    assert len(hand_made_paused_step) == 2
    assert priced == {"compute_s": STEP["compute_time_s"], "rest_s": STEP["idle_time_s"]}


def test_the_single_process_paused_step_waits_as_asked_and_computes_for_real():
    config = SyncRunConfig(1, 1e9)
    step = paused_step(config, 0.0204)  # the real one: one process of real/sync.py, 40 steps
    assert step["emulate_comm_s"] == pytest.approx(0.020)  # to the millisecond
    assert step["comm_time_s"] >= 0.020 and step["compute_time_s"] > 0 and step["idle_time_s"] > 0
    assert paused_step(config, 0.0196) is step  # once per model, batch and millisecond of wait


def test_sync_rows_of_a_stored_run_are_predicted_again_from_their_own_rounds(net, monkeypatch):
    from experiments import run
    from experiments.configs import Experiment
    monkeypatch.setattr(sync_model, "single_process_profile", lambda config: REFERENCE)
    points = (SyncRunConfig(4, 200e6, emulate_compute_s=0.05), SyncRunConfig(4, 200e6))
    own = _probe(0.2)
    summaries = {p.label: {"iteration_time_s": 0.3 + i, "rounds": own} for i, p in enumerate(points)}
    rows = run.sync_rows(Experiment("sync", "?", points), {200e6: net},
                         lambda p: dict(summaries[p.label]), predict_sync_s)
    stored = {"name": "sync", "question": "?", "points": [p.as_dict() for p in points],
              "rows": json.loads(json.dumps(rows))}
    held = NetworkInputs.from_calibration({**CALIBRATION, "goodput_bps": 95e6})  # a slower bed
    again = run.repredict_sync(stored, {200e6: held})
    assert [r["config"] for r in again] == [p.label for p in points]
    for new, old in zip(again, stored["rows"]):
        assert {k: v for k, v in new.items() if k != "predicted_s"} == \
            {k: v for k, v in old.items() if k != "predicted_s"}
    # today's model from the stored rounds, where the calibration's rate has no say
    assert [r["predicted_s"] for r in again] == pytest.approx(
        [predict_sync_s(p, held.with_rounds(4, own), REFERENCE) for p in points])
    assert [r["predicted_s"] for r in again] == pytest.approx([r["predicted_s"] for r in rows])
    assert run.repredictor("multinode").repredict is run.repredict_sync
    stored["rows"].pop()
    with pytest.raises(ValueError, match="no row 'H=4 200Mbps mlp cpu'"):
        run.repredict_sync(stored, {200e6: held})


def test_emulated_steps_of_a_stored_run_are_priced_both_ways(tmp_path, net, monkeypatch, capsys):
    from experiments import emulated_steps
    monkeypatch.setattr(sync_model, "single_process_profile", lambda config: REFERENCE)
    own = _probe(0.2)
    emulated, real = SyncRunConfig(4, 200e6, emulate_compute_s=0.05), SyncRunConfig(4, 200e6)
    (tmp_path / "run.json").write_text(json.dumps({"calibration": [CALIBRATION]}))
    (tmp_path / "sync.json").write_text(json.dumps({
        "name": "sync", "question": "sync SGD against replicas",
        "points": [emulated.as_dict(), real.as_dict()],
        "rows": [{"config": emulated.label, "predicted_s": 0.3, "measured_s": 0.3, "rounds": own},
                 {"config": real.label, "predicted_s": 0.1, "measured_s": 0.1, "rounds": own}]}))
    with_rounds = net.with_rounds(4, own)
    nominal = predict_sync_s(emulated, with_rounds, REFERENCE,
                             step={"compute_time_s": 0.05, "idle_time_s": 0.001})
    (row,) = emulated_steps.errors(tmp_path)  # the real-compute row is not an emulated one
    assert row[0] == f"sync {emulated.label}"
    assert row[1:] == pytest.approx((nominal / 0.3 - 1,
                                     predict_sync_s(emulated, with_rounds, REFERENCE) / 0.3 - 1))
    assert row[1] < row[2]  # the step's own run is longer than the nominal one
    assert emulated_steps.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"nominal {100 * row[1]:+.1f}%" in out and f"own run {100 * row[2]:+.1f}%" in out
    assert emulated_steps.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere" in err


def test_async_vs_sync_predictions_reuse_predict_async_and_predict_sync_s(net):
    point = avs.AsyncVsSyncConfig(4, 200e6, updates=80)
    predicted = avs.predict(point, net, REFERENCE)
    theirs = predict_async(point.async_run, net, REFERENCE)
    assert predicted["per_update_s"] == theirs["per_update_s"]
    assert predicted["staleness_mean"] == pytest.approx(theirs["staleness_mean"])
    assert predicted["step_s"] == predict_sync_s(point.sync_run, net, REFERENCE)
    assert predicted["step_s"] > 0.05  # the emulated compute, then the all-reduce
    assert predicted["sync_samples_per_s"] == pytest.approx(4 * 32 / predicted["step_s"])
    assert sum(predicted["staleness_hist"]) == 80


def test_smoothing_averages_windows_of_w_losses_and_skips_nulls():
    curve = [[0.1, 2.0], [0.2, None], [0.3, 1.0], [0.4, 3.0], [0.5, 1.0]]
    assert avs.smoothed(curve, 2) == ([0.3, 0.5], [1.5, 2.0])


def test_both_plots_are_written(tmp_path, net):
    point = pvr.PsVsRingConfig(4, 200e6, server_factors=(1, 4), updates=40)
    measured = {"grad_bytes": GRAD_BYTES, "ring_s": 0.07, "ring": {},
                "ps": [{"server_factor": k, "round_s": 0.2, "summary": {}} for k in (1, 4)]}
    rows = pvr.rows(pvr.Experiment("ps_vs_ring", "?", (point,)), {200e6: net},
                    lambda p: measured, lambda p, n, **kw: pvr.predict(p, n, REFERENCE, **kw))
    pvr.plot(rows, tmp_path / "ring.png")
    curve = [[0.05 * i, 2.3 - 0.01 * i] for i in range(40)]
    rows = [{"workers": 4, "mode": "async", "loss_curve": curve, "measured_staleness_hist": [1, 1, 1, 37],
             "predicted_staleness_hist": [1, 1, 1, 37]},
            {"workers": 4, "mode": "sync", "loss_curve": curve[:10]}]
    avs.plot(rows, tmp_path / "avs.png")
    assert (tmp_path / "ring.png").stat().st_size > 10_000 and (tmp_path / "avs.png").stat().st_size > 10_000


# -- the loss curves the scripts write -------------------------------------------------------
def test_async_ps_json_has_a_loss_curve_per_applied_update_with_real_gradients(tmp_path):
    out = tmp_path / "ps.json"
    run = run_script(["real/async_ps.py", "--model", "mlp", "--updates", "12", "--threads", "1",
                      "--emulate-compute", "5ms", "--real-gradients", "--no-progress", "--json",
                      str(out)], 2, timeout_s=120)
    assert run.returncode == 0, run.stderr
    summary = json.loads(out.read_text())
    curve = summary["loss_curve"]
    assert len(curve) == summary["updates"] == 12 and summary["real_gradients"] is True
    times = [t for t, _ in curve]
    assert times == sorted(times) and times[-1] == pytest.approx(summary["elapsed_s"])
    assert all(0 < loss < 10 for _, loss in curve)  # real losses, not the emulated null
    assert summary["final_loss"] == pytest.approx(curve[-1][1])  # one worker: its last loss


def test_sync_json_has_a_loss_curve_per_step_averaged_over_ranks(tmp_path):
    out = tmp_path / "sync.json"
    run = run_script(["real/sync.py", "--model", "mlp", "--steps", "6", "--warmup-steps", "1",
                      "--threads", "1", "--emulate-compute", "20ms", "--real-gradients",
                      "--no-progress", "--json", str(out)], 2, timeout_s=120)
    assert run.returncode == 0, run.stderr
    summary = json.loads(out.read_text())
    curve = summary["loss_curve"]
    assert [step for step, _, _ in curve] == list(range(6)) and summary["real_gradients"] is True
    assert all(b[1] - a[1] >= 0.016 for a, b in zip(curve, curve[1:]))  # padded to about 20 ms
    assert curve[0][2] == pytest.approx(summary["initial_loss"])
    assert summary["compute_time_s"] >= 0.016  # its deadline; a slow machine only adds
    assert all(math.isfinite(loss) for _, _, loss in curve)


@pytest.mark.parametrize("script", ["real/async_ps.py", "real/sync.py"])
def test_real_gradients_without_emulated_compute_is_one_line_and_status_2(script):
    run = run_script([script, "--real-gradients", "--no-progress"], 1, timeout_s=60)
    assert run.returncode == 2
    assert "--real-gradients" in run.stderr and "Traceback" not in run.stderr


# -- the warm-up: the real server and the simulator leave out the same updates ----------------
def test_warmup_is_the_whole_rounds_of_a_quarter_of_the_run_and_never_less_than_one():
    from experiments.configs import warmup_updates
    assert warmup_updates(4, 160) == 40
    assert warmup_updates(4, 100) == 24  # a quarter is 25: six whole rounds of 4
    assert warmup_updates(8, 30) == 8  # a quarter would be less than the first round


def test_a_simulation_with_no_round_left_after_its_warm_up_is_refused(net):
    with pytest.raises(ValueError, match="leave a round or less of 4 workers"):
        simulate_async(4, 8, 0.0, net, REFERENCE)


def test_simulated_bursts_of_updates_are_timed_in_whole_rounds(net):
    """A server link 4x the workers': the simulator's pushes arrive together and its updates
    come in bursts of W; timed over whole rounds, a round is not shorter than push then pull."""
    sim = simulate_async(4, 100, 0.0, net, REFERENCE, 4 * net.duplex_payload_bps)
    push_then_pull_s = 2 * 8 * GRAD_BYTES / net.duplex_payload_bps
    assert 4 * sim["per_update_s"] >= push_then_pull_s


def test_every_parameter_server_run_is_told_the_warm_up_the_simulator_leaves_out(monkeypatch):
    """The async, ps_vs_ring and async_vs_sync runs pass ``--warmup-updates`` as
    ``configs.warmup_updates`` gives it for their workers and updates."""
    from experiments import measure
    from experiments.configs import AsyncRunConfig, warmup_updates
    commands = []

    def capture(_config, command, names, *_args, **_kwargs):
        commands.append(command)
        summary = {"updates_per_s": 1.0, "results": [{"time_s": 1.0}], "iteration_time_s": 1.0}
        probe = {"results": [{"bytes": 64, "first_chains_s": [1e-3], "next_chains_s": [1e-3]}]}
        if isinstance(names, tuple):  # a run bracketed by ring probes (measure.run_bracketed)
            return {n: probe if n.startswith("rounds_") else summary for n in names}
        return summary

    for module in (measure, pvr, avs):
        monkeypatch.setattr(module, "run_collect", capture)
    measure.measure_async(AsyncRunConfig(5, 200e6, updates=200))
    pvr.measure(pvr.PsVsRingConfig(8, 200e6, server_factors=(1,), updates=240))
    avs.measure(avs.AsyncVsSyncConfig(2, 200e6, updates=80))
    ps_commands = [c for c in commands if "async_ps.py" in c]
    expected = [warmup_updates(4, 200), warmup_updates(8, 240), warmup_updates(2, 80)]
    assert len(ps_commands) == 3
    for command, warmup in zip(ps_commands, expected):
        assert f"--warmup-updates {warmup} " in command
