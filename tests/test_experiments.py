"""The experiment runner's pure parts: configs, predictions from a calibration record, fidelity
rows and RESULTS.md; and the multi-node path (4 torchrun agents joined by c10d rendezvous on the
test bed, which needs root: skipped with the reason where namespaces cannot be made)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsgd_sim.collectives import allreduce_time_s
from experiments.configs import EXPERIMENTS, AllReduceConfig, AsyncRunConfig, SyncRunConfig, select
from tests.cli_helpers import usage_error
from experiments import run_header, stage_samples
from experiments.fidelity import by_experiment, fidelity_row, summarise
from experiments.model import (NetworkInputs, allreduce_messages, interpolate_excess, predict_allreduce_s,
                               predict_allreduce_stream_s, shaped_rounds_time_s, stream_call_s)
from experiments.report import results_markdown
from tests.bed_helpers import needs_namespaces

REPO = Path(__file__).resolve().parent.parent

CALIBRATION = {"bandwidth_bps": 50e6, "goodput_bps": 47.8e6, "frame_bytes": 1514,
               "gloo": {"latency_s": 100e-6, "all_reduce_1_element_s": {"median": 250e-6}}}


def test_every_named_experiment_builds_its_quick_and_full_grids():
    for name, make in EXPERIMENTS.items():
        quick, full = make(True), make(False)
        assert quick.name == full.name == name
        assert 0 < len(quick.points) <= len(full.points)


def test_allreduce_full_grid_covers_hosts_2_4_8_at_50_200_1000_mbit():
    points = EXPERIMENTS["allreduce"](False).points
    assert {p.hosts for p in points} == {2, 4, 8}
    assert {p.bandwidth_bps for p in points} == {50e6, 200e6, 1000e6}
    assert all(set(p.algorithms) == {"ring", "naive", "backend"} for p in points)


def test_quick_allreduce_grid_is_a_subset_of_the_full_one():
    quick, full = EXPERIMENTS["allreduce"](True), EXPERIMENTS["allreduce"](False)
    full_keys = {(p.hosts, p.bandwidth_bps) for p in full.points}
    assert {(p.hosts, p.bandwidth_bps) for p in quick.points} < full_keys


@pytest.mark.parametrize("kwargs, message", [
    (dict(hosts=1, bandwidth_bps=50e6, sizes_bytes=(64,)), "at least 2 hosts"),
    (dict(hosts=2, bandwidth_bps=0, sizes_bytes=(64,)), "bandwidth"),
    (dict(hosts=4, bandwidth_bps=50e6, sizes_bytes=(100,)), "multiples"),
    (dict(hosts=2, bandwidth_bps=50e6, sizes_bytes=(64,), algorithms=("tree",)), "'tree'"),
])
def test_allreduce_config_rejects_bad_values_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AllReduceConfig(**kwargs)


def test_sync_config_rejects_steps_not_exceeding_warmup():
    with pytest.raises(ValueError, match="warmup"):
        SyncRunConfig(hosts=2, bandwidth_bps=50e6, steps=5, warmup_steps=5)


def test_async_config_puts_the_server_on_one_host_and_workers_on_the_rest():
    assert AsyncRunConfig(hosts=5, bandwidth_bps=200e6).workers == 4
    with pytest.raises(ValueError, match="at least 2 hosts"):
        AsyncRunConfig(hosts=1, bandwidth_bps=200e6)


def test_the_full_async_experiment_runs_2_4_and_8_workers_at_50_200_and_1000_mbps():
    full = {(p.workers, p.bandwidth_bps) for p in select(["async"], quick=False)[0].points}
    assert full == {(w, rate) for w in (2, 4, 8) for rate in (50e6, 200e6, 1000e6)}
    assert {(p.workers, p.bandwidth_bps) for p in select(["async"], quick=True)[0].points} == \
        {(2, 200e6), (4, 200e6)}


def test_select_names_the_unknown_experiment():
    with pytest.raises(ValueError, match="'nope'"):
        select(["nope"], quick=True)
    assert [e.name for e in select([], quick=True)] == list(EXPERIMENTS)


def test_network_inputs_take_gloo_latency_and_charge_acks_on_a_duplex_link():
    net = NetworkInputs.from_calibration(CALIBRATION)
    assert net.latency_s == 100e-6 and net.call_overhead_s == 250e-6
    assert net.duplex_payload_bps == pytest.approx(47.8e6 * 1514 / (1514 + 33))


def test_network_inputs_prefer_the_measured_duplex_rate():
    net = NetworkInputs.from_calibration({**CALIBRATION, "duplex": {"goodput_bps": 46.2e6}})
    assert net.duplex_payload_bps == 46.2e6


def test_a_2_host_ring_runs_at_the_one_way_goodput_and_a_longer_one_at_the_duplex_rate():
    # on 2 hosts both directions share Gloo's one connection to the peer, whose ACKs ride in
    # the data going back; on more hosts a rank's two neighbours are two connections
    net = NetworkInputs.from_calibration({**CALIBRATION, "duplex": {"goodput_bps": 46.2e6}})
    two = net.for_ring_of(2)
    assert two.duplex_payload_bps == 47.8e6 and two.for_ring_of(2) is two  # no copy of a copy
    assert net.for_ring_of(3) is net and net.for_ring_of(8) is net
    n, alpha, fixed = 4_000_000, 100e-6, 250e-6 - 2 * 100e-6  # no bucket, no start-up table
    assert predict_allreduce_s("ring", 2, n, net) == pytest.approx(
        2 * (alpha + 8 * n / 2 / 47.8e6) + fixed, rel=1e-12)
    assert predict_allreduce_s("ring", 4, n, net) == pytest.approx(
        6 * (alpha + 8 * n / 4 / 46.2e6) + fixed, rel=1e-12)


def test_network_inputs_need_the_gloo_section():
    with pytest.raises(ValueError, match="gloo"):
        NetworkInputs.from_calibration({k: v for k, v in CALIBRATION.items() if k != "gloo"})


def test_shaped_rounds_without_a_bucket_are_the_simulators_alpha_beta_closed_form():
    n, p, alpha, rate = 4_000_000, 4, 100e-6, 46.2e6
    for algorithm, sim_name in (("ring", "ring"), ("naive", "naive-ring")):
        rounds = allreduce_messages(algorithm, p, n)
        assert shaped_rounds_time_s(rounds, alpha, rate, 0.0, 1.0) == pytest.approx(
            allreduce_time_s(sim_name, p, n, alpha, rate))
    assert allreduce_messages("backend", p, n) == allreduce_messages("ring", p, n)  # Gloo's: ring


def test_a_bucket_hides_the_latency_between_bandwidth_bound_rounds():
    alpha, rate_Bps = 100e-6, 6e6
    rounds = [1e6] * 6  # each round far longer than the bucket; the bucket refills in each gap
    t = shaped_rounds_time_s(rounds, alpha, rate_Bps * 8, 15_000, idle_before_s=0.0)
    assert t == pytest.approx(6e6 / rate_Bps + alpha)  # only the last round's latency shows


def test_a_full_bucket_lets_a_first_burst_through_at_once_and_small_rounds_cost_latency():
    alpha, rate_Bps, bucket = 100e-6, 6e6, 15_000
    full = shaped_rounds_time_s([1e6], alpha, rate_Bps * 8, bucket, idle_before_s=1.0)
    assert full == pytest.approx((1e6 - bucket) / rate_Bps + alpha)
    small = shaped_rounds_time_s([1000] * 4, alpha, rate_Bps * 8, bucket, idle_before_s=1.0)
    assert small == pytest.approx(4 * alpha)


def test_allreduce_prediction_walks_the_rounds_through_the_calibrated_bucket():
    net = NetworkInputs.from_calibration({**CALIBRATION, "burst_bytes": 15_140})
    assert net.fixed_call_s == pytest.approx(250e-6 - 2 * 100e-6)
    assert net.bucket_payload_bytes == pytest.approx(15_140 * net.duplex_payload_bps / 50e6)
    n, p = 4_000_000, 4
    want = shaped_rounds_time_s(allreduce_messages("ring", p, n), net.latency_s,
                                net.duplex_payload_bps, net.bucket_payload_bytes,
                                net.call_overhead_s) + net.fixed_call_s
    assert predict_allreduce_s("ring", p, n, net) == pytest.approx(want)
    assert predict_allreduce_s("naive", p, n, net) > 1.9 * predict_allreduce_s("ring", p, n, net)
    with pytest.raises(ValueError, match="'tree'"):
        predict_allreduce_s("tree", p, n, net)


def test_calls_whose_bytes_the_bucket_lends_take_what_they_take_alone():
    rate_Bps, bucket = 125e6, 125_000  # 1000 Mbit/s, a 1 ms bucket
    # 8 kB a call, a 0.1 ms barrier between calls: the bucket refills 12.5 kB in each gap
    assert stream_call_s([0.2e-3, 0.3e-3], [8e3, 8e3], 0.1e-3, rate_Bps * 8, bucket) \
        == pytest.approx([0.2e-3, 0.3e-3])


def test_a_stream_of_calls_that_outruns_the_bucket_pays_its_bytes_at_the_rate():
    rate_Bps, bucket, gap = 125e6, 125_000, 0.13e-3
    sent = 64_000  # per call; alone a call takes 0.27 ms, but the link needs 0.512 ms for it
    got = stream_call_s([0.27e-3] * 3, [sent] * 3, gap, rate_Bps * 8, bucket)
    assert got == pytest.approx([sent / rate_Bps - gap] * 3)  # the barrier's refill is all it lends


def test_in_a_stream_light_calls_refill_the_bucket_for_the_heavy_one():
    rate_Bps, bucket, gap = 125e6, 125_000, 0.1e-3
    alone, sent = [1.0e-3, 1.0e-3], [50_000, 400_000]
    heavy_alone = stream_call_s([alone[1]], [sent[1]], gap, rate_Bps * 8, bucket)[0]
    assert heavy_alone == pytest.approx(sent[1] / rate_Bps - gap)  # heavy calls only: the rate
    light, heavy = stream_call_s(alone, sent, gap, rate_Bps * 8, bucket)
    assert light == pytest.approx(alone[0])
    # taking turns (0 1, 1 0, 0 1, ...), a heavy call follows two light ones, which leave the
    # bucket full, and the next heavy call follows it; the median of the two is their mean
    after_light, after_heavy = (sent[1] - bucket) / rate_Bps, heavy_alone
    assert heavy == pytest.approx((after_light + after_heavy) / 2)
    with pytest.raises(ValueError, match="one call time per algorithm"):
        stream_call_s([1e-3], [1, 2], gap, 8e6, bucket)


def test_benchmark_prediction_is_each_call_alone_where_the_bucket_lends_it_and_the_rate_beyond():
    net = NetworkInputs.from_calibration({**CALIBRATION, "burst_bytes": 15_140})
    per_round = {n: n * 8 / net.duplex_payload_bps + 1e-3 for n in (64, 65536, 1 << 20)}
    net = net.with_rounds(4, {"results": [{"bytes": n, "first_s": t, "next_s": t}  # 4 hosts'
                                          for n, t in per_round.items()]})  # rounds at the rate
    algorithms = ["ring", "naive", "backend"]
    big = predict_allreduce_stream_s(algorithms, 4, 4_000_000, net)  # seconds a call: bound by
    assert big == {a: pytest.approx(predict_allreduce_s(a, 4, 4_000_000, net))  # its own rounds
                   for a in algorithms}
    assert big["ring"] > 6_000_000 * 8 / net.duplex_payload_bps  # 3/4 of 4 MB out twice
    rounds = [{"bytes": 64, "first_s": 0.10e-3, "next_s": 0.10e-3},  # 2 hosts, 1000 Mbit/s:
              {"bytes": 65536, "first_s": 0.12e-3, "next_s": 0.12e-3},  # the bucket hides
              {"bytes": 1 << 20, "first_s": 8.5e-3, "next_s": 8.8e-3}]  # what it holds
    fast = NetworkInputs.from_calibration({**CALIBRATION, "bandwidth_bps": 1e9,
                                           "goodput_bps": 956e6, "burst_bytes": 125_000,
                                           "rounds": {"2": {"results": rounds}}})
    small = predict_allreduce_stream_s(["ring"], 2, 64_000, fast)["ring"]
    assert predict_allreduce_s("ring", 2, 64_000, fast) < small == pytest.approx(
        8 * 64_000 / 956e6 - fast.call_overhead_s)  # 2 hosts: one connection, the goodput
    # a calibration that measured the gap a stream of calls leaves: that gap refills the bucket,
    # so a longer gap shortens a rate-bound call by as much (300 us: still longer than alone)
    gloo = {**CALIBRATION["gloo"], "stream_gap_s": {"median": 300e-6}}
    gapped = NetworkInputs.from_calibration({**CALIBRATION, "bandwidth_bps": 1e9,
                                             "goodput_bps": 956e6, "burst_bytes": 125_000,
                                             "rounds": {"2": {"results": rounds}}, "gloo": gloo})
    assert gapped.call_gap_s == 300e-6 and fast.call_gap_s == fast.call_overhead_s == 250e-6
    refilled = predict_allreduce_stream_s(["ring"], 2, 64_000, gapped)["ring"]
    assert predict_allreduce_s("ring", 2, 64_000, gapped) < refilled == pytest.approx(
        8 * 64_000 / 956e6 - 300e-6)
    # a gap that refills more than the call lacks: the call takes what it takes alone
    gloo = {**CALIBRATION["gloo"], "stream_gap_s": {"median": 400e-6}}
    idle = NetworkInputs.from_calibration({**CALIBRATION, "bandwidth_bps": 1e9,
                                           "goodput_bps": 956e6, "burst_bytes": 125_000,
                                           "rounds": {"2": {"results": rounds}}, "gloo": gloo})
    assert predict_allreduce_stream_s(["ring"], 2, 64_000, idle)["ring"] == pytest.approx(
        predict_allreduce_s("ring", 2, 64_000, idle))
    assert gapped.as_dict()["stream_gap_s"] == 300e-6 and "stream_gap_s" not in fast.as_dict()


def test_benchmark_calls_take_turns_each_algorithm_once_an_iteration_first_in_turn():
    from real.allreduce import call_order
    order = call_order(3, 4)
    assert [i for _, i in order] == [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]
    assert [it for it, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_startup_excess_interpolates_between_measured_sizes_from_zero_and_levels_off_past_the_last():
    table = [(16_000, 0.001), (64_000, 0.004), (1_000_000, 0.010)]
    assert interpolate_excess(table, 0) == 0.0
    assert interpolate_excess(table, 8_000) == pytest.approx(0.0005)  # from (0, 0) to the first
    assert interpolate_excess(table, 64_000) == pytest.approx(0.004)  # a measured size exactly
    assert interpolate_excess(table, 40_000) == pytest.approx(0.0025)  # halfway between two
    assert interpolate_excess(table, 532_000) == pytest.approx(0.007)
    assert interpolate_excess(table, 16_000_000) == pytest.approx(0.010)  # past the last: level
    assert interpolate_excess([], 1_000_000) == 0.0


def test_startup_table_is_the_duplex_time_beyond_bucket_and_rate_and_every_round_pays_it():
    rate_bps, tcp_latency = 46.0e6, 30e-6
    ideal = {n: n * 8 / rate_bps + tcp_latency for n in (32_000, 2_000_000, 4_000_000)}
    duplex = {"goodput_bps": rate_bps, "transfers": [
        {"bytes": 32_000, "median_s": ideal[32_000] + 0.002},
        {"bytes": 2_000_000, "median_s": ideal[2_000_000] + 0.015},
        {"bytes": 4_000_000, "median_s": ideal[4_000_000] + 0.015}]}
    net = NetworkInputs.from_calibration({**CALIBRATION, "duplex": duplex, "latency_s": tcp_latency})
    assert net.bucket_payload_bytes == 0
    assert [n for n, _ in net.startup_table] == [32_000, 2_000_000, 4_000_000]
    assert [e for _, e in net.startup_table] == pytest.approx([0.002, 0.015, 0.015])
    without = NetworkInputs.from_calibration({**CALIBRATION, "duplex": {"goodput_bps": rate_bps}})
    assert without.startup_table == []  # two sizes or none: a rate only, no start-up
    faster = {**duplex, "transfers": [*duplex["transfers"][:1], {"bytes": 2_000_000,
              "median_s": ideal[2_000_000] - 0.001}, *duplex["transfers"][2:]]}
    assert NetworkInputs.from_calibration({**CALIBRATION, "duplex": faster, "latency_s": tcp_latency}) \
        .startup_table[1][1] == pytest.approx(-0.001)  # faster than the slope: kept, not clipped
    with_base = {**duplex, "transfers": [{"bytes": 1, "median_s": 0.0005}, *duplex["transfers"]]}
    based = NetworkInputs.from_calibration({**CALIBRATION, "duplex": with_base, "latency_s": tcp_latency})
    assert [n for n, _ in based.startup_table] == [32_000, 2_000_000, 4_000_000]  # 1 B: the base
    assert [e for _, e in based.startup_table] == pytest.approx(  # the probe's fixed cost taken off
        [0.002 + tcp_latency - 0.0005, 0.015 + tcp_latency - 0.0005, 0.015 + tcp_latency - 0.0005])
    n, p = 4_000_000, 2  # two rounds of 2 MB, each paying 15 ms
    assert predict_allreduce_s("ring", p, n, net) - predict_allreduce_s("ring", p, n, without) \
        == pytest.approx(2 * 0.015)


def test_fidelity_row_error_is_relative_to_the_measurement():
    row = fidelity_row("allreduce", "ring 1MB", predicted_s=1.1, measured_s=1.0)
    assert set(row) == {"experiment", "config", "predicted_s", "measured_s", "error"}
    assert row["error"] == pytest.approx(0.1)
    assert fidelity_row("x", "y", 0.9, 1.0)["error"] == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="positive"):
        fidelity_row("x", "y", 1.0, 0.0)


def test_summary_reports_median_and_worst_absolute_error_against_the_target():
    rows = [fidelity_row("a", f"c{i}", 1 + e, 1.0) for i, e in enumerate([0.01, -0.02, 0.05])]
    summary = summarise(rows)
    assert summary["median_abs_error"] == pytest.approx(0.02)
    assert summary["worst_abs_error"] == pytest.approx(0.05)
    assert summary["worst_config"] == "a: c2" and summary["meets_target"]
    rows.append(fidelity_row("b", "d", 1.09, 1.0))
    assert not summarise(rows)["meets_target"]  # worst 9% > 8%
    assert list(by_experiment(rows)) == ["a", "b"]


def test_results_markdown_tabulates_every_row_and_embeds_the_plot():
    rows = [fidelity_row("allreduce", "ring 1MB H=2", 0.21, 0.2),
            fidelity_row("allreduce", "naive 1MB H=2", 0.19, 0.2)]
    results = [{"name": "allreduce", "question": "How long?", "plot": "allreduce.png",
                "notes": ["The ring wins."]}]
    text = results_markdown(results, rows, ["Generated by a test."])
    assert "![allreduce](results/allreduce.png)" in text
    assert "| ring 1MB H=2 | 210 ms | 200 ms | +5.0% |" in text
    assert "| naive 1MB H=2 | 190 ms | 200 ms | -5.0% |" in text
    assert "| all | 2 | 5.0% | 5.0% |" in text
    assert "The ring wins." in text and "Generated by a test." in text


def test_runner_rejects_an_unknown_experiment_with_one_line_and_status_2():
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "nope"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "'nope'" in done.stderr and "Traceback" not in done.stderr


def test_runner_rejects_a_bad_congestion_control_name_before_any_test_bed():
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--congestion-control",
                           "reno; reboot", "multinode"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "'reno; reboot'" in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("previous, said", [
    ("[" * 200_000, "nested too deep"),
    (json.dumps({"rows": [{"config": "a", "measured_s": 0.0}]}), "not a positive time"),
    (json.dumps({"rows": [{"config": "a"}]}), "missing key 'measured_s'"),
    (json.dumps({"rows": "a"}), "string indices"),
])
def test_a_run_keeps_its_measurements_when_the_file_it_replaces_is_not_a_result(
        tmp_path, capsys, previous, said):
    """The repeatability against the previous result is skipped with a note, never a crash that
    would lose the run's own rows."""
    from experiments import run
    path = tmp_path / "sync.json"
    path.write_text(previous)
    assert run.repeatability([{"config": "a", "measured_s": 0.5}], path) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sync.json before this run is not a result" in err
    assert said in err


def test_repeatability_compares_the_rows_both_runs_hold(tmp_path):
    from experiments import run
    path = tmp_path / "sync.json"
    path.write_text(json.dumps({"rows": [{"config": "a", "measured_s": 0.4},
                                         {"config": "b", "measured_s": 1.0}]}))
    got = run.repeatability([{"config": "a", "measured_s": 0.5}, {"config": "c", "measured_s": 1}],
                            path)
    assert got["rows"] == 1 and got["median_abs_change"] == pytest.approx(0.25)


def test_runner_interrupted_says_so_in_one_line_and_exits_130(monkeypatch, tmp_path, capsys):
    import real.testbed
    from experiments import run

    def interrupted(args, meta):
        raise KeyboardInterrupt

    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: None)
    monkeypatch.setattr(run, "measure_all", interrupted)
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    assert run.main(["--out", str(tmp_path), "multinode"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and str(tmp_path) in err


def run_sync_then_async_failing(monkeypatch, tmp_path, failure: BaseException) -> int:
    """Run the runner on sync and async, stored calibrations standing in for the test bed's,
    with async raising ``failure``; its exit status."""
    import real.testbed
    from experiments import measure, run
    stored = json.loads((REPO / "experiments/results/full/run.json").read_text())["calibration"]

    def sync_then_failure(experiment, net_by_rate, quick):
        if experiment.name == "async":
            raise failure
        return {"name": experiment.name, "rows": []}

    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: None)
    monkeypatch.setattr(measure, "calibrate_rate", lambda rate, *_: next(
        c for c in stored if c["bandwidth_bps"] == rate))
    monkeypatch.setattr(run, "run_experiment", sync_then_failure)
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    sample_the_machine_briefly(monkeypatch)
    return run.main(["--out", str(tmp_path), "--wait-quiet", "0", "sync", "async"])


def sample_the_machine_briefly(monkeypatch) -> None:
    """The runner's look at the machine before each stage in 0.1 s instead of about 4 s on 2
    cores (1 s counting busy cores, 1.5 s timing each core), and the machine taken as quiet (so
    that no warning joins the line a test reads, whatever else runs beside it): the stage
    samples have tests of their own."""
    monkeypatch.setattr(stage_samples, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(stage_samples, "CORE_SPEED_SECONDS", 0.05)


def test_runner_stopped_by_a_test_bed_error_says_in_run_json_why_and_what_finished(
        monkeypatch, tmp_path, capsys):
    # run.json once kept its first write (0.0 min, nothing said): its report told of a whole run
    from real.testbed import TestbedError
    error = TestbedError("`ip link add` failed: no space")
    assert run_sync_then_async_failing(monkeypatch, tmp_path, error) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stopped: `ip link add` failed: no space" in err
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["finished"] == ["sync"] and meta["wall_s"] > 0
    assert ", interrupted (test bed error: `ip link add` failed: no space) before async " \
        "finished" in run_header.header_lines(meta)[0]


def test_runner_interrupted_between_experiments_says_in_run_json_what_finished(
        monkeypatch, tmp_path, capsys):
    assert run_sync_then_async_failing(monkeypatch, tmp_path, KeyboardInterrupt()) == 130
    assert "--report-only" in capsys.readouterr().err
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["finished"] == ["sync"] and meta["interrupted"] == "Ctrl-C"
    assert meta["wall_s"] > 0
    assert ", interrupted (Ctrl-C) before async finished. Every measured time" in \
        run_header.header_lines(meta)[0]
    assert (f"the {meta['cpus']} CPU cores are shared by the hosts"
            in run_header.header_lines(meta)[0])


def test_results_header_leaves_out_rates_whose_calibration_timed_no_ring():
    from experiments.run_header import header_lines
    meta = json.loads((REPO / "experiments/results/run.json").read_text())
    for calibration in meta["calibration"]:
        calibration["rounds"] = {}
    assert "ring rounds timed on test beds of no hosts (" in header_lines(meta)[2]
    meta["calibration"][-1]["rounds"] = {"4": {}, "2": {}}
    rate = meta["calibration"][-1]["bandwidth_bps"] / 1e6
    assert f"test beds of 2, 4 hosts at {rate:g} Mbit/s (" in header_lines(meta)[2]


def test_results_header_names_rates_calibrated_again_and_a_slow_link_kept():
    from experiments.run_header import header_lines
    meta = json.loads((REPO / "experiments/results/run.json").read_text())
    assert "taken" not in header_lines(meta)[2] and "come out over" not in header_lines(meta)[2]
    busy_then = {**meta["calibration"][0], "attempts": 2}  # a run from before the link check
    assert "Mbit/s the calibration was taken 2 times (the machine busy). Each" in header_lines(
        {**meta, "calibration": [busy_then]})[2]
    first, last = meta["calibration"][0], meta["calibration"][-1]
    # a record with ``link_rate_shares`` (one entry an attempt on a quiet machine) was made with
    # the link check; the clause on the one kept reads its own rates
    first.update(attempts=2, link_rate_shares=[{"TCP": 0.9}, {"TCP": 0.99}])
    line = header_lines(meta)[2]
    assert (f"; at {first['bandwidth_bps'] / 1e6:g} Mbit/s the calibration was taken 2 times "
            "(the machine busy, or the link under 0.97 of its rate less headers)") in line
    assert "come out over" not in line
    last.update(attempts=3, link_rate_shares=[{"TCP": 0.9}] * 3,
                payload_efficiency=0.9 * last["payload_efficiency_expected"])
    assert (f"; at {last['bandwidth_bps'] / 1e6:g} Mbit/s its transfers carried under 0.97 of the "
            "rate less headers (TCP 0.900) in the one kept, and the calls priced from it may come "
            "out over. Each experiment") in header_lines(meta)[2]


def test_runner_killed_unwinds_as_when_interrupted_so_its_test_bed_comes_down(
        monkeypatch, tmp_path, capsys):
    import os
    import signal
    import time
    import real.testbed
    from experiments import run
    unwound = []

    def killed(args, meta):  # `kill` of the runner while a test bed is up
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            unwound.append(True)  # where the test bed's `with` tears it down

    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: None)
    monkeypatch.setattr(run, "measure_all", killed)
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    before = signal.getsignal(signal.SIGTERM)
    assert run.main(["--out", str(tmp_path), "multinode"]) == 130
    assert unwound == [True]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted (SIGTERM)" in err
    assert signal.getsignal(signal.SIGTERM) is before  # the handler goes with the run


def test_every_experiment_test_bed_takes_the_runs_congestion_control(monkeypatch):
    from experiments import measure
    assert measure.testbed_config(3, 50e6).congestion_control == "reno"
    monkeypatch.setattr(measure, "CONGESTION_CONTROL", None)
    bed = measure.testbed_config(5, 50e6, slow_host_bps=200e6, slow_rank=0)
    assert (bed.congestion_control, bed.rate_bps(0), bed.rate_bps(1)) == (None, 200e6, 50e6)


def test_every_experiment_test_bed_takes_the_runs_scheduling_policy(monkeypatch):
    from experiments import measure
    assert measure.testbed_config(3, 50e6).scheduling == "batch"
    monkeypatch.setattr(measure, "SCHEDULING", "normal")
    assert measure.testbed_config(5, 50e6, slow_host_bps=200e6, slow_rank=0).scheduling == "normal"
    assert measure.testbed_config(2, 50e6).host_cores == "spread"
    monkeypatch.setattr(measure, "HOST_CORES", "shared")
    assert measure.testbed_config(2, 50e6).host_cores == "shared"
    assert measure.testbed_config(2, 50e6).address_layout == "fixed"
    monkeypatch.setattr(measure, "ADDRESS_LAYOUT", "random")
    assert measure.testbed_config(4, 1e9).address_layout == "random"


def test_probes_idle_before_their_chains_only_in_a_run_that_asks(monkeypatch):
    from experiments import measure, run
    assert measure.probe_idle_s(measure.testbed_config(4, 1e9)) == 0.0
    assert not run.parse_args(["allreduce"]).probe_idle
    assert run.parse_args(["--probe-idle", "allreduce"]).probe_idle
    monkeypatch.setattr(measure, "PROBE_IDLE", True)
    assert measure.probe_idle_s(measure.testbed_config(4, 1e9)) > 0


def test_runner_rejects_an_unknown_scheduling_policy_and_repredict_with_one(capsys):
    from experiments import run
    for argv, said in ((["--scheduling", "fifo", "multinode"], "'fifo'"),
                       (["--host-cores", "pinned", "multinode"], "'pinned'"),
                       (["--address-layout", "aslr", "multinode"], "'aslr'"),
                       (["--repredict", "--address-layout", "random", "allreduce"],
                        "--address-layout"),
                       (["--repredict", "--scheduling", "normal", "ps_vs_ring"], "--scheduling"),
                       (["--repredict", "--host-cores", "shared", "ps_vs_ring"], "--host-cores"),
                       (["--repredict", "--probe-idle", "allreduce"], "--probe-idle"),
                       (["--repredict", "--probe-order", "interleaved", "allreduce"], "--probe-order"),
                       (["--probe-order", "random", "allreduce"], "'random'"),
                       (["--report-only", "--probe-order", "interleaved"], "--report-only")):
        with pytest.raises(SystemExit) as exit_:
            run.parse_args(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err


def test_results_header_names_the_runs_scheduling_policy():
    from experiments.run_header import header_lines
    meta = {**json.loads((REPO / "experiments/results/run.json").read_text()), "host_cores": "shared"}
    for policy, said in (("batch", "batch (`SCHED_BATCH`)"), ("normal", "the machine's default")):
        meta["scheduling"] = policy
        assert f"CPU scheduling: {said})" in header_lines(meta)[0]
    meta["host_cores"] = "own"
    assert "(`SCHED_BATCH`), each host on a core of its own where there is one per host)" in \
        header_lines({**meta, "scheduling": "batch"})[0]
    meta["host_cores"] = "spread"
    assert ("(`SCHED_BATCH`), each host on a core of its own where there is one per host and "
            "host i on core i mod cores where the hosts divide evenly among them)") in \
        header_lines({**meta, "scheduling": "batch"})[0]
    assert ("per host and hosts next in rank together, host i on core i // (hosts / cores), "
            "where the hosts divide evenly among them)") in \
        header_lines({**meta, "scheduling": "batch", "host_cores": "block"})[0]
    assert "; address-space randomization off)" not in header_lines(meta)[0]
    assert "mod cores where the hosts divide evenly among them; address-space randomization " \
        "off)" in header_lines({**meta, "address_layout": "fixed"})[0]
    # a run from before the policy (or the pinning) existed ran under the machine's, shared
    del meta["scheduling"], meta["host_cores"]
    assert "CPU scheduling: the machine's default)" in header_lines(meta)[0]


def test_results_header_says_whether_the_probes_idled_before_their_chains():
    from experiments.run_header import header_lines
    meta = json.loads((REPO / "experiments/results/run.json").read_text())
    assert "idled" not in header_lines(meta)[2]  # a run from before the flag: back to back
    assert "`--probe-idle`" in header_lines({**meta, "probe_idle": True})[2]
    # a run from before the flag interleaved its sizes, as one with --probe-order interleaved
    for made in (meta, {**meta, "probe_order": "interleaved"}):
        assert "(`--probe-order interleaved`)" in header_lines(made)[2]
        assert "--probe-order blocks" not in header_lines(made)[2]
    assert "(`--probe-order blocks`)" in header_lines({**meta, "probe_order": "blocks"})[2]


def test_report_only_without_a_run_in_the_out_folder_says_so_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--report-only",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no run.json" in done.stderr


STORED_RUN = (REPO / "experiments/results/run.json").read_text()


@pytest.mark.parametrize("files, named", [
    ({"run.json": "{"}, "run.json in {out}: Expecting property name"),
    ({"run.json": "[]"}, "run.json in {out}: not a run's record (a JSON object), got []"),
    ({"run.json": "{}"}, "run.json in {out}: missing key 'command'"),
    ({"run.json": STORED_RUN, "sync.json": "[1]"}, "sync.json in {out}: not a result file"),
    ({"run.json": STORED_RUN, "sync.json": '{"rows": 5}'}, "sync.json in {out}: missing key"),
    ({"run.json": STORED_RUN, "sync.json": '{"name": "sync", "question": "?", "points": [{}], '
                                           '"rows": null}'},
     "sync.json in {out}: 'rows' must be a non-empty list of objects"),
    ({"run.json": STORED_RUN}, "no result files in {out}"),
])
def test_report_only_on_bad_files_names_the_file_in_one_line_and_writes_nothing(
        files, named, tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert run.main(["--report-only", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--report-only: " in err
    assert named.format(out=tmp_path) in err
    assert not (tmp_path / "fidelity.json").exists() and not (tmp_path / "RESULTS.md").exists()


STORED_GRID = REPO / "experiments/results/quick-48f9159"  # a quick grid, every experiment


def _row(key, value):
    return lambda result: result["rows"][0].update({key: value})


def _drop(name):
    return lambda result: result.pop(name)


@pytest.mark.parametrize("file, damage, named", [
    ("sync.json", _row("measured_s", float("inf")),
     "rows[0] (H=2 200Mbps mlp cpu): 'measured_s' must be a positive, finite number of seconds, "
     "got inf"),
    ("sync.json", _row("predicted_s", "x"), "'predicted_s' must be a positive, finite number of "
                                            "seconds, got 'x'"),
    ("sync.json", _row("predicted_s", float("nan")), "'predicted_s' must be a positive"),
    ("sync.json", _row("config", 7), "rows[0]: 'config' must be a string, got 7"),
    ("sync.json", lambda result: result.update(name="async"),
     "it is named 'async', not 'sync' as its file is"),
    ("sync.json", lambda result: result.update(rows=[]),
     "'rows' must be a non-empty list of objects (a run writes one per comparison), got []"),
    ("sync.json", lambda result: result.update(points=None), "'points' must be a non-empty list"),
    ("sync.json", lambda result: result.update(repeatability={"rows": "two"}),
     "'repeatability' must be an object"),
    ("run.json", lambda meta: meta.update(calibration=[]),
     "'calibration' is empty, though the run says it finished experiments priced from it"),
    ("run.json", lambda meta: meta.update(cpus="two"),
     "'cpus' must be a positive whole number (or null), got 'two'"),
    ("run.json", lambda meta: meta.update(cpus=0), "'cpus' must be a positive whole number"),
    ("run.json", lambda meta: meta.update(inputs=None),
     "'inputs' must be an object of calibrated inputs by rate, got None"),
    ("run.json", lambda meta: meta.update(finished=["sync", "nosuch"]),
     "'finished' names 'nosuch', not an experiment of experiments/configs.py"),
    ("run.json", lambda meta: meta.update(busy_cores=5), "'busy_cores' must be an object"),
    ("run.json", lambda meta: meta.update(wall_s=float("inf")), "'wall_s' must be a time"),
    ("run.json", lambda meta: meta["calibration"][0]["gloo"].update(latency_s="x"),
     "calibration[0]: 'gloo.latency_s' must be a time in seconds, 0 or more, got 'x'"),
    ("run.json", lambda meta: meta["calibration"][1].pop("goodput_bps"),
     "calibration[1]: missing key 'goodput_bps'"),
    ("run.json", _drop("machine"), "missing key 'machine'"),
])
def test_report_only_on_a_stored_grid_with_one_bad_value_names_it_and_rewrites_nothing(
        file, damage, named, tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    folder = tmp_path / "grid"
    shutil.copytree(STORED_GRID, folder)
    stored = json.loads((folder / file).read_text())
    damage(stored)
    (folder / file).write_text(json.dumps(stored))
    kept = {name: (folder / name).read_bytes() for name in ("RESULTS.md", "fidelity.json")}
    assert run.main(["--report-only", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"experiments/run.py: --report-only: {file} in {folder}: ")
    assert named in err
    assert {name: (folder / name).read_bytes() for name in kept} == kept


@pytest.mark.parametrize("meta", [
    # a run killed during its calibration (no "interrupted": SIGKILL, out of memory) writes this
    {"calibration": [], "finished": []},
    {"calibration": [], "finished": [], "interrupted": "stopped (Ctrl-C) during the calibration"},
    {"cpus": None},  # os.cpu_count() where the machine does not say
])
def test_a_run_json_a_real_run_can_write_passes_the_check(meta):
    from experiments.run import check_meta
    stored = json.loads((STORED_GRID / "run.json").read_text())
    check_meta({**stored, **meta})  # raises where it refuses


def test_report_only_refuses_a_result_its_run_finished_and_the_folder_lacks(
        tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    folder = tmp_path / "grid"
    shutil.copytree(STORED_GRID, folder)
    (folder / "sync.json").unlink()
    kept = {name: (folder / name).read_bytes() for name in ("RESULTS.md", "fidelity.json")}
    assert run.main(["--report-only", "--out", str(folder)]) == 2
    assert capsys.readouterr().err == (f"experiments/run.py: --report-only: no sync.json in "
                                       f"{folder}, though its run.json says sync finished\n")
    assert {name: (folder / name).read_bytes() for name in kept} == kept
    # a run stopped before sync finished: the report leaves it out, and says what it missed
    meta = json.loads((folder / "run.json").read_text())
    meta.update(finished=["allreduce"], interrupted="Ctrl-C")
    (folder / "run.json").write_text(json.dumps(meta))
    assert run.main(["--report-only", "--out", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 32
    assert "## sync\n" not in (folder / "RESULTS.md").read_text()


def test_report_only_of_a_stored_grid_writes_its_fidelity_again(tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    folder = tmp_path / "grid"
    shutil.copytree(STORED_GRID, folder)
    assert run.main(["--report-only", "--out", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 35
    assert (folder / "fidelity.json").read_text() == (STORED_GRID / "fidelity.json").read_text()


def test_repredict_names_a_run_json_that_is_not_an_object(tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    (tmp_path / "run.json").write_text("[]")
    assert run.main(["--repredict", "sync", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"experiments/run.py: --repredict: bad run.json in "
                                       f"{tmp_path}: not a run's record (a JSON object), got []\n")


def test_fidelity_row_refuses_a_time_that_is_not_positive_and_finite():
    for predicted, measured in ((1.0, float("inf")), (float("inf"), 1.0), ("x", 1.0), (1.0, 0)):
        with pytest.raises(ValueError, match="must be a positive, finite number of seconds"):
            fidelity_row("sync", "H=2", predicted, measured)


@pytest.mark.parametrize("output", ["fidelity.json", "RESULTS.md"])
def test_report_only_names_an_output_it_cannot_write_and_writes_nothing(
        output, tmp_path, monkeypatch, capsys):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    for name in ("run.json", "sync.json"):
        (tmp_path / name).write_text((REPO / "experiments/results" / name).read_text())
    meta = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps({**meta, "experiments": ["sync"]}))
    (tmp_path / output).mkdir()
    assert run.main(["--report-only", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"experiments/run.py: --report-only: output "
                   f"'{tmp_path / output}' is not a file name\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.json", "sync.json", output])


def test_a_run_whose_outputs_cannot_be_written_stops_before_any_test_bed(tmp_path, monkeypatch,
                                                                         capsys):
    import real.testbed
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: pytest.fail("too far"))
    (tmp_path / "multinode.png").mkdir()
    assert run.main(["multinode", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"experiments/run.py: output "
                                       f"'{tmp_path / 'multinode.png'}' is not a file name\n")
    assert [p.name for p in tmp_path.iterdir()] == ["multinode.png"]


def test_runner_refuses_a_congestion_control_the_machine_does_not_allow(tmp_path, monkeypatch,
                                                                         capsys):
    from experiments import run
    from real.testbed import network
    allowed = tmp_path / "allowed"
    allowed.write_text("reno bbr\n")
    monkeypatch.setattr(network, "ALLOWED_SYSCTL", str(allowed))
    err = usage_error(run.main, ["--congestion-control", "cubic", "multinode"], capsys)
    assert f"--congestion-control cubic: this machine lets a namespace pick only reno, bbr " \
        f"({allowed})" in err
    assert run.parse_args(["--congestion-control", "bbr"]).congestion_control == "bbr"


@pytest.mark.parametrize("argv", [["sync"], ["--quick"], ["--probe-idle"],
                                  ["--scheduling", "normal"], ["--seed", "1"]])
def test_report_only_takes_no_names_and_no_measuring_flags(argv, capsys):
    from experiments import run
    assert "--report-only rewrites" in usage_error(run.main, ["--report-only"] + argv, capsys)


@pytest.mark.parametrize("argv", [["--report-only"], ["--repredict", "sync"]])
def test_trace_is_refused_where_nothing_is_measured(argv, tmp_path, capsys):
    from experiments import run
    err = usage_error(run.main, argv + ["--trace", str(tmp_path / "t.json")], capsys)
    assert "--trace records a measuring run" in err


def test_a_json_or_trace_file_that_cannot_be_written_is_refused_before_any_work(tmp_path,
                                                                               capsys):
    from experiments import run
    for flag in ("--json", "--trace"):
        err = usage_error(run.main, ["multinode", flag, str(tmp_path)], capsys)
        assert f"{flag} {str(tmp_path)!r} is not a file name" in err


def test_the_runs_seed_reaches_every_trainer_and_benchmark_and_no_probe(monkeypatch):
    from experiments import measure, run
    from experiments.configs import SyncRunConfig
    monkeypatch.setattr(measure, "SEED", None)
    assert "--seed" not in measure.script_step("real/sync.py", ["--steps", "3"], "s.json")
    monkeypatch.setattr(measure, "SEED", 7)
    for script in measure.SEEDED_SCRIPTS:
        step = measure.script_step(script, ["--steps", "3"], "s.json")
        assert step.endswith("--steps 3 --seed 7 --json {out}/s.json"), step
    assert "--seed" not in measure.probe_step([64], 3, "rounds.json", 2)
    assert measure._torchrun_command("real/sync.py", ["--steps", "3"], "id").endswith(
        "--steps 3 --seed 7")
    started = []

    def not_run(argv, **kwargs):  # what run_alone would start, without starting it
        started.append(argv)
        raise RuntimeError("not run")
    monkeypatch.setattr(subprocess, "run", not_run)
    from experiments.sync_model import run_alone
    with pytest.raises(RuntimeError, match="not run"):
        run_alone(SyncRunConfig(1, 1.0), 3, 1)
    assert started[0][started[0].index("--seed") + 1] == "7"
    assert run.parse_args(["--seed", "7", "sync"]).seed == 7
    assert run.parse_args(["sync"]).seed is None


def test_an_experiment_named_twice_runs_once():
    from experiments import run
    assert [e.name for e in run.parse_args(["sync", "sync"]).experiments] == ["sync"]


def test_out_folder_that_is_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "results").write_text("")
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--report-only",
                           "--out", str(tmp_path / "results")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "is not a folder" in done.stderr


@pytest.mark.parametrize("names", [[], ["tree"], ["allreduce", "nosuch"]])
def test_repredict_takes_only_experiments_that_can_be_predicted_again(tmp_path, names):
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--repredict",
                           *names, "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "ps_vs_ring" in done.stderr


@pytest.mark.parametrize("flag", [["--quick"], ["--report-only"],
                                  ["--congestion-control", "cubic"]])
def test_repredict_measures_nothing_so_takes_no_measuring_flags(tmp_path, flag):
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--repredict",
                           "ps_vs_ring", *flag, "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "measures nothing" in done.stderr


def test_repredict_without_a_run_in_the_out_folder_says_so_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "experiments/run.py"), "--repredict",
                           "ps_vs_ring", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no run.json" in done.stderr


def test_a_report_beside_its_results_links_them_without_the_results_prefix():
    rows = [fidelity_row("sync", "H=2", 0.1, 0.1)]
    result = {"name": "sync", "question": "?", "rows": [], "plot": "sync.png", "notes": []}
    assert "](results/sync.png)" in results_markdown([result], rows, [])
    assert "](sync.png)" in results_markdown([result], rows, [], folder="")


def test_multinode_experiment_is_four_hosts_through_torchrun_c10d():
    (point,) = EXPERIMENTS["multinode"](True).points
    assert point.hosts == 4 and point.launcher == "torchrun"
    assert "torchrun c10d" in point.label
    with pytest.raises(ValueError, match="'mpirun'"):
        SyncRunConfig(hosts=4, bandwidth_bps=200e6, launcher="mpirun")


@needs_namespaces
def test_four_host_sync_run_through_torchrun_c10d_rendezvous_completes_on_the_test_bed():
    from experiments.measure import measure_sync
    config = SyncRunConfig(hosts=4, bandwidth_bps=200e6, emulate_compute_s=0.02, steps=6,
                           warmup_steps=2, launcher="torchrun")
    summary = measure_sync(config, timeout_s=120)
    assert summary["world_size"] == 4 and summary["measured_steps"] == 4
    assert summary["iteration_time_s"] >= 0.02  # at least the emulated compute of every step
    assert len(summary["weights_sha256"]) == 64 and summary["samples_per_s"] > 0


@pytest.mark.parametrize("files, named", [
    ({}, "cannot read"),
    ({"calibration.json": "[]", "allreduce.json": "{"}, "cannot read"),
    ({"calibration.json": "[]", "allreduce.json": "[]"}, "not as experiments/run.py writes"),
    ({"calibration.json": "{}", "allreduce.json": '{"rows": [{"bandwidth_bps": 1}]}'},
     "not as experiments/run.py writes"),
])
def test_ablation_on_bad_results_is_one_line_and_status_2(files, named, tmp_path, capsys):
    from experiments.ablation import main
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["--results", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and str(tmp_path) in err


def test_ablation_compares_measured_rounds_the_shaper_model_and_the_shaper_without_startup():
    from experiments.ablation import MODELS, ablation
    duplex = {"goodput_bps": 46e6, "transfers": [
        {"bytes": n, "median_s": n * 8 / 46e6 + extra}
        for n, extra in ((16_000, 0.0), (2_000_000, 0.015), (4_000_000, 0.015))]}
    rounds = {"results": [{"bytes": 2_000_000, "first_s": 0.362, "next_s": 0.367, "reduce_s": 0.002},
                          {"bytes": 4_000_000, "first_s": 0.722, "next_s": 0.731, "reduce_s": 0.004}]}
    calibration = [{**CALIBRATION, "duplex": duplex, "latency_s": 0.0, "rounds": {"2": rounds}}]
    rows = [{"algorithm": "ring", "hosts": 2, "bytes": 4_000_000, "bandwidth_bps": 50e6,
             "measured_s": 0.73}]
    result = ablation(calibration, rows)["all"]
    assert set(result) == set(MODELS) and all(result[m][0] == 1 for m in MODELS)
    # the measured 2 x 15 ms start-up closes some of the gap; the measured rounds more
    assert result["rounds"][1] < result["shaper"][1] < result["shaper, no start-up"][1]
    # a 4 MB ring on 2 hosts: 2 rounds of 2 MB and one addition of 2 MB (2 ms) between them
    assert result["rounds"][1] == pytest.approx(abs(0.362 + 0.367 + 0.002 - 0.73) / 0.73)
    assert result["rounds, no additions"][1] == pytest.approx(abs(0.362 + 0.367 - 0.73) / 0.73)


def test_ablation_prices_a_2_host_stream_at_the_duplex_probes_rate_only_in_its_own_model():
    from experiments.ablation import predictions
    # rounds faster than either rate and no bucket: each call waits for its bytes at the rate
    rounds = {"results": [{"bytes": 2_000_000, "first_s": 0.330, "next_s": 0.332, "reduce_s": 0.002},
                          {"bytes": 1_000_000, "first_s": 0.165, "next_s": 0.166, "reduce_s": 0.001}]}
    calibration = {**CALIBRATION, "duplex": {"goodput_bps": 46e6}}
    nets = {50e6: NetworkInputs.from_calibration(calibration)}
    rows = [{"algorithm": "ring", "hosts": hosts, "bytes": 4_000_000, "bandwidth_bps": 50e6,
             "measured_s": 0.7} for hosts in (2, 4)]
    tables = {"H=2 50Mbps": rounds, "H=4 50Mbps": rounds}
    ours = predictions(rows, nets, "rounds", tables)
    probes = predictions(rows, nets, "rounds, the duplex probe's rate on 2 hosts", tables)
    assert ours[0] == pytest.approx(4e6 * 8 / 47.8e6, rel=1e-12)  # one connection: the goodput
    assert probes[0] == pytest.approx(4e6 * 8 / 46e6, rel=1e-12)  # two, as the duplex probe
    assert ours[1] == probes[1] == pytest.approx(4e6 * 8 * 3 / 2 / 46e6, rel=1e-12)  # 4 hosts


def test_ablation_with_a_model_prints_each_rows_prediction_under_it(tmp_path, capsys):
    from experiments.ablation import main
    rounds = {"results": [{"bytes": 2_000_000, "first_s": 0.362, "next_s": 0.367, "reduce_s": 0.002},
                          {"bytes": 4_000_000, "first_s": 0.722, "next_s": 0.731, "reduce_s": 0.004}]}
    (tmp_path / "calibration.json").write_text(json.dumps([{**CALIBRATION, "rounds": {"2": rounds}}]))
    rows = [{"config": "ring 4MB H=2 50Mbps", "algorithm": "ring", "hosts": 2, "bytes": 4_000_000,
             "bandwidth_bps": 50e6, "measured_s": 0.73}]
    (tmp_path / "allreduce.json").write_text(json.dumps({"rows": rows}))
    for model, predicted_ms in (("rounds", 731.0), ("rounds, no additions", 729.0)):
        assert main(["--results", str(tmp_path), "--model", model]) == 0
        error = predicted_ms / 730.0 - 1
        assert capsys.readouterr().out == (f"ring 4MB H=2 50Mbps: predicted {predicted_ms:.3f} ms, "
                                           f"measured 730.000 ms, {error:+.1%}\n")


def _ends_probe(scale: float) -> list[dict]:
    """3-round chains at two sizes: the later rounds of a chain slower than its second."""
    return [{"bytes": n, "first_s": t, "next_s": 2 * t, "reduce_s": 0.0,
             "ends_chains_s": [[scale * t, scale * 2.2 * t, scale * 4.2 * t]] * 3}
            for n, t in ((32_000, 1e-3), (64_000, 2e-3))]


def test_ablation_chains_ends_prices_k_rounds_from_the_chains_time_to_their_kth_round():
    from experiments.ablation import with_own_chain_ends
    from experiments.probe_tables import ChainEnds, chain_ends, with_chain_ends
    # two probes bracketing a run, chains run back to back (no idle)
    record = {"results": _ends_probe(1.0), "before": _ends_probe(1.0), "after": _ends_probe(1.2)}
    ends = chain_ends([record["before"], record["after"]])
    assert ends[64_000] == pytest.approx([2.2e-3, 4.84e-3, 9.24e-3])  # median of 6 chains
    net = NetworkInputs.from_calibration(CALIBRATION).with_rounds(4, record)
    assert not isinstance(net.round_costs[4], ChainEnds)  # chains back to back: first and next
    priced = with_own_chain_ends(net, 4, record).round_costs[4]
    assert isinstance(priced, ChainEnds)
    # 3 rounds of 48 kB (the naive ring on 4 hosts): halfway between the sizes' third-round ends
    assert priced.rounds_time_s([(3, 48_000)]) == pytest.approx((4.62e-3 + 9.24e-3) / 2)
    assert net.round_costs[4].rounds_time_s([(3, 48_000)]) == pytest.approx(1.5e-3 + 2 * 3e-3)
    # more rounds than the chains ran, or rounds of two sizes: the first-and-next composition
    for rounds in ([(4, 48_000)], [(1, 32_000), (1, 64_000)]):
        assert priced.rounds_time_s(rounds) == net.round_costs[4].rounds_time_s(rounds)
    # a size the chains did not time: the table as it is
    assert with_chain_ends(net.round_costs[4], {32_000: [1e-3]}) is net.round_costs[4]


def _back_to_back_64k():
    """A table from chains run back to back at 1000 Mbit/s: latency-bound 0.1 ms rounds at 64 B;
    at 64 KiB a first round on the tokens the pause before the chain refilled, then rounds at
    the rate (65536 B at 950 Mbit/s of payload: 0.552 ms)."""
    from dsgd_sim.collectives import RoundCosts
    from experiments.probe_tables import with_chain_rounds
    table = RoundCosts((64, 65536), (1e-4, 2e-4), (1e-4, 5.5e-4))
    return with_chain_rounds(table, {64: [1e-4, 2e-4, 3e-4], 65536: [2e-4, 7.5e-4, 13e-4]})


def test_a_full_bucket_saves_the_later_rounds_back_to_back_chains_paid_at_the_rate():
    from dsgd_sim.collectives import RoundCosts
    from experiments.model import full_bucket_saving_s
    from experiments.probe_tables import ChainRounds, with_chain_rounds
    table, payload_bps, bucket = _back_to_back_64k(), 950e6, 118_779
    assert isinstance(table, ChainRounds)
    assert table.round_s(1, 65536) == pytest.approx(5.5e-4)
    assert table.round_s(1, 64) == pytest.approx(1e-4)
    assert table.round_s(7, 65536) == table.next_round_s(65536)  # past the chains: a later round
    # the 64 B chains leave the bucket full, so the 64 KiB chains started on tokens too, and their
    # first round (0.1 ms over 64 B) is what the bytes add; a later round on tokens: a
    # latency-bound 0.1 ms round plus that
    covered = table.sizes_on_tokens(payload_bps, bucket, 70_000)
    assert covered == [64, 65536]
    assert table.first_on_tokens_s(65536, covered) == pytest.approx(2e-4)
    assert table.on_tokens_round_s(65536, covered) == pytest.approx(2e-4)
    assert table.on_tokens_round_s(64, covered) == pytest.approx(1e-4)
    # the naive ring's 3 rounds of 64 KiB on 4 hosts: the first on tokens as the chains ran it
    # (118.8 kB of tokens less 65.5 kB, plus 0.2 ms of refill: 77.0 kB left), the second on the
    # tokens in 0.2 ms (0.35 ms saved; 35.2 kB left), the third waits for its tokens
    assert full_bucket_saving_s(table, [65536] * 3, payload_bps, bucket, 70_000) == \
        pytest.approx(0.35e-3)
    # half a bucket covers no later round: nothing saved
    assert full_bucket_saving_s(table, [65536] * 3, payload_bps, 60_000, 70_000) == 0.0
    # latency-bound rounds (8 kB is 0.07 ms at the rate, less than two 0.1 ms rounds): nothing
    assert full_bucket_saving_s(table, [8192] * 6, payload_bps, bucket, 70_000) == 0.0
    # tables without the rounds' durations, or from chains timed alone: nothing
    plain = RoundCosts(table.sizes_bytes, table.first_s, table.next_s)
    assert full_bucket_saving_s(plain, [65536] * 3, payload_bps, bucket, 70_000) == 0.0
    assert full_bucket_saving_s(None, [65536] * 3, payload_bps, bucket, 70_000) == 0.0
    # ends missing at a size of the table: kept as it is
    assert with_chain_rounds(plain, {64: [1e-4]}) is plain


def test_a_first_round_on_tokens_is_priced_from_chains_that_started_on_tokens():
    from dsgd_sim.collectives import RoundCosts
    from experiments.model import full_bucket_saving_s
    from experiments.probe_tables import with_chain_rounds
    # 4 hosts at 1000 Mbit/s, 950 Mbit/s of payload and a 118.8 kB bucket: first rounds of
    # 0.14-0.15 ms up to 32 KiB; the 32 KiB chains drain the bucket (their last round waits for
    # tokens), and the 64 KiB chains after them took 0.32 ms for their first round
    rounds = {64: [1.4e-4, 1e-4, 1e-4], 8192: [1.4e-4, 1e-4, 1e-4],
              32768: [1.5e-4, 1.2e-4, 1.2e-4, 1.2e-4, 1.2e-4, 3.1e-4],
              65536: [3.2e-4, 5.5e-4, 5.5e-4]}
    sizes = tuple(rounds)
    table = with_chain_rounds(
        RoundCosts(sizes, tuple(r[0] for r in rounds.values()),
                   tuple(sum(r[1:]) / (len(r) - 1) for r in rounds.values())),
        {n: [sum(r[:k + 1]) for k in range(len(r))] for n, r in rounds.items()})
    payload_bps, bucket = 950e6, 118_779
    # a pause that refills 24 kB: the 64 KiB chains started short
    assert table.sizes_on_tokens(payload_bps, bucket, 24_000) == [64, 8192, 32768]
    # so a 64 KiB first round on tokens is the 32 KiB one's plus the slope up to it: 0.01 ms for
    # 32,704 B more
    on_first = 1.5e-4 + 1e-5 * 32768 / 32704
    assert table.first_on_tokens_s(65536, [64, 8192, 32768]) == pytest.approx(on_first)
    # a pause that refills 70 kB: they started on tokens, and their own first round is the price
    assert table.sizes_on_tokens(payload_bps, bucket, 70_000) == list(sizes)
    assert table.first_on_tokens_s(65536, list(sizes)) == pytest.approx(3.2e-4)
    # from a full bucket the naive ring's first 64 KiB round costs 0.16 ms, not the chains' 0.32;
    # the 72.2 kB left cover the second, a latency-bound 0.1 ms plus the 0.02 ms its bytes add,
    # instead of 0.55 ms; the third waits
    on_later = 1e-4 + (on_first - 1.4e-4)
    assert full_bucket_saving_s(table, [65536] * 3, payload_bps, bucket, 24_000) == \
        pytest.approx((3.2e-4 - on_first) + (5.5e-4 - on_later))


def test_chains_run_in_blocks_start_on_what_their_own_size_left():
    from dataclasses import replace

    from dsgd_sim.collectives import RoundCosts
    from experiments.probe_tables import plain_table, with_chain_rounds
    # the table above, from a probe that ran each size's chains one after another: the 32 KiB
    # chains drain the bucket, and the next 32 KiB chain starts on what a 24 kB pause refilled
    rounds = {64: [1.4e-4, 1e-4, 1e-4], 8192: [1.4e-4, 1e-4, 1e-4],
              32768: [1.5e-4, 1.2e-4, 1.2e-4, 1.2e-4, 1.2e-4, 3.1e-4],
              65536: [3.2e-4, 5.5e-4, 5.5e-4]}
    table = RoundCosts(tuple(rounds), tuple(r[0] for r in rounds.values()),
                       tuple(sum(r[1:]) / (len(r) - 1) for r in rounds.values()))
    ends = {n: [sum(r[:k + 1]) for k in range(len(r))] for n, r in rounds.items()}
    blocks = with_chain_rounds(table, ends, blocks=True)
    payload_bps, bucket = 950e6, 118_779
    assert blocks.blocks and not with_chain_rounds(table, ends).blocks
    assert blocks.sizes_on_tokens(payload_bps, bucket, 24_000) == [64, 8192]
    assert replace(blocks, blocks=False).sizes_on_tokens(payload_bps, bucket, 24_000) == \
        [64, 8192, 32768]  # interleaved, each 32 KiB chain after an 8 KiB one on a full bucket
    # a 70 kB pause covers a 64 KiB first round even after a chain that emptied the bucket
    assert blocks.sizes_on_tokens(payload_bps, bucket, 70_000) == list(rounds)
    # the order comes from the probe's record; a record from before the flag ran interleaved
    probe = {"results": [{"bytes": n, "first_s": r[0], "next_s": sum(r[1:]) / (len(r) - 1),
                          "ends_chains_s": [ends[n]]} for n, r in rounds.items()]}
    assert not plain_table(probe).blocks
    assert plain_table({**probe, "order": "blocks"}).blocks


def test_a_call_that_waited_for_tokens_leaves_the_bucket_empty():
    from experiments.model import bucket_walk
    table, payload_bps, bucket = _back_to_back_64k(), 950e6, 118_779
    # from a full bucket the naive ring's third round waits for its tokens: nothing left,
    # though the call's first two rounds refilled 35 kB
    saving, left = bucket_walk(table, [65536] * 3, bucket, payload_bps, bucket, 70_000)
    assert saving == pytest.approx(0.35e-3)
    assert left == 0.0
    # latency-bound rounds take their bytes out and refill while they last: six 8 kB rounds
    # from 20 kB, each refilling what its time at the rate brings
    rate_Bps = payload_bps / 8
    refilled = sum(table.round_s(k, 8192) * rate_Bps - 8192 for k in range(6))
    assert refilled > 0
    assert bucket_walk(table, [8192] * 6, 20_000, payload_bps, bucket, 70_000)[1] == \
        pytest.approx(20_000 + refilled)
    assert bucket_walk(None, [8192], 20_000, payload_bps, bucket, 70_000) is None


def test_in_a_stream_a_heavy_call_after_one_that_waited_pays_for_the_whole_bucket():
    from experiments.model import stream_rotation_s
    rate_Bps, bucket, gap = 125e6, 125_000, 0.1e-3
    alone, sent = [1e-3, 1e-3], [50_000, 200_000]
    # the rotation is light, heavy, heavy, light. The heavy call waits for tokens in a round, so
    # it leaves the bucket empty: the second heavy call starts on the barrier's 12.5 kB and
    # takes 187.5 kB at the rate, 1.5 ms
    light, heavy = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket,
                                     [None, lambda tokens: 0.0])
    assert light == pytest.approx([1e-3, 1e-3])
    assert heavy == pytest.approx([1e-3, 1.5e-3])
    # counted at its length at the rate, the first heavy call would leave 50 kB, and the second
    # would take (200 - 62.5) kB at the rate, 1.1 ms
    assert stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket)[1] == \
        pytest.approx([1e-3, 1.1e-3])


def test_a_calls_tail_moves_its_time_onto_its_own_call_and_off_the_next():
    from experiments.model import stream_rotation_s
    rate_Bps, bucket, gap, tail = 125e6, 125_000, 0.1e-3, 0.2e-3
    alone, sent = [0.5e-3, 0.5e-3], [400_000, 400_000]  # 3.2 ms of bytes: paid at the rate
    drained = [lambda tokens: 0.0] * 2  # each call's last round waits for its tokens
    # the rotation is 0, 1, 1, 0. Algorithm 0 works 0.2 ms after its last bytes arrive: the
    # links idle, and the 25 kB they refill go to the call after it, with the barrier's 12.5 kB
    first, second = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained,
                                      [tail, 0.0])
    after_tail, after_none = (400_000 - 37_500) / rate_Bps, (400_000 - 12_500) / rate_Bps
    assert first == pytest.approx([after_tail + tail, after_none + tail], rel=1e-12)
    assert second == pytest.approx([after_tail, after_none], rel=1e-12)
    # the rotation as long as without the tail: its time only moves between the calls
    plain = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained)
    assert plain[0] + plain[1] == pytest.approx([after_none] * 4, rel=1e-12)
    assert sum(first + second) == pytest.approx(sum(plain[0] + plain[1]), rel=1e-12)
    # a tail longer than the bucket takes: what the bucket cannot hold is lost
    long_tail = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained, [2e-3, 0.0])
    assert long_tail[1][0] == pytest.approx((400_000 - bucket) / rate_Bps, rel=1e-12)
    for bad in ([tail], [-1e-3, 0.0], []):
        with pytest.raises(ValueError, match="one tail of at least 0 s per algorithm"):
            stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained, bad)


def test_only_the_naive_ring_ends_its_call_with_an_addition():
    from dsgd_sim.collectives import RoundCosts
    from experiments.model import call_tail_s
    table = RoundCosts((64, 1_000_000), (1e-4, 9e-3), (1e-4, 9e-3), (1e-5, 2e-4))
    for hosts in (2, 4, 8):  # the naive ring's last round passes the whole buffer: one addition
        assert call_tail_s("naive", hosts, 1_000_000, table) == pytest.approx(2e-4, rel=1e-12)
        assert call_tail_s("ring", hosts, 1_000_000, table) == 0.0  # its last rounds gather
        assert call_tail_s("backend", hosts, 1_000_000, table) == 0.0
    assert call_tail_s("naive", 2, 1_000_000, None) == 0.0  # no table: nothing timed
    assert call_tail_s("naive", 2, 1_000_000, RoundCosts((64, 128), (1e-4,) * 2, (1e-4,) * 2)) \
        == 0.0  # a table without additions


def test_ablation_without_tails_gives_the_naive_rings_addition_back_to_the_call_after_it():
    from experiments.ablation import predictions
    # 2 MB rounds faster than the rate, a 2 ms addition: each call waits for its bytes at the
    # rate, and the naive ring's addition after its last round refills the bucket
    rounds = {"results": [{"bytes": 64, "first_s": 1e-4, "next_s": 1e-4, "reduce_s": 0.0},
                          {"bytes": 2_000_000, "first_s": 0.330, "next_s": 0.332,
                           "reduce_s": 2e-3}]}
    nets = {50e6: NetworkInputs.from_calibration({**CALIBRATION, "burst_bytes": 50_000})}
    rows = [{"algorithm": a, "hosts": 2, "bytes": 2_000_000, "bandwidth_bps": 50e6,
             "measured_s": 0.35} for a in ("naive", "ring")]
    tables = {"H=2 50Mbps": rounds}
    ours = predictions(rows, nets, "rounds", tables)
    plain = predictions(rows, nets, "rounds, no tail after a call", tables)
    # the rotation naive, ring, ring, naive: the naive call after the ring's pays its addition
    # on top of its bytes, the one after its own gets it back; the ring's call after it gets it
    # back, the one after the ring's does not (each median the mean of the two)
    tail_bytes = 2e-3 * nets[50e6].for_ring_of(2).duplex_payload_bps / 8
    assert tail_bytes < nets[50e6].for_ring_of(2).bucket_payload_bytes
    assert ours[0] - plain[0] == pytest.approx(1e-3, rel=1e-9)
    assert ours[1] - plain[1] == pytest.approx(-1e-3, rel=1e-9)


def test_a_slow_latency_bound_round_does_not_hide_the_rounds_the_chains_paid_at_the_rate():
    from dsgd_sim.collectives import RoundCosts
    from experiments.model import full_bucket_saving_s
    from experiments.probe_tables import with_chain_rounds
    # 64 KiB rounds at 950 Mbit/s take 0.552 ms: paced where a latency-bound round is at most
    # half that. Later 64 B rounds of 0.25 ms but one of 0.55 ms: their mean (0.325 ms) would
    # call no round paced; their median (0.25 ms) is the latency-bound round
    ends_64 = [1e-4 + k * 2.5e-4 for k in range(4)] + [1e-4 + 3 * 2.5e-4 + 5.5e-4]
    table = with_chain_rounds(RoundCosts((64, 65536), (1e-4, 2e-4), (3.25e-4, 5.5e-4)),
                              {64: ends_64, 65536: [2e-4 + k * 5.5e-4 for k in range(5)]})
    assert table.latency_round_s() == pytest.approx(2.5e-4)
    # the second 64 KiB round, on the tokens, costs 0.25 ms plus the 0.1 ms that 64 KiB added to
    # the first round (a pause that refills 70 kB: those chains started on tokens), instead of
    # 0.55
    assert full_bucket_saving_s(table, [65536] * 3, 950e6, 118_779, 70_000) == pytest.approx(2e-4)
    # chains of one round: the mean later round as the table has it
    one = with_chain_rounds(RoundCosts((64, 65536), (1e-4, 2e-4), (3e-4, 5.5e-4)),
                            {64: [1e-4], 65536: [2e-4]})
    assert one.latency_round_s() == 3e-4


_ROUNDS_64K = [{"bytes": 64, "first_s": 1e-4, "next_s": 1e-4, "reduce_s": 0.0,
                "ends_chains_s": [[1e-4 * (k + 1) for k in range(6)]] * 3},
               {"bytes": 65536, "first_s": 2e-4, "next_s": 5.5e-4, "reduce_s": 0.0,
                "ends_chains_s": [[2e-4 + 5.5e-4 * k for k in range(6)]] * 3}]
_FAST = {**CALIBRATION, "bandwidth_bps": 1e9, "goodput_bps": 956e6, "burst_bytes": 150_000,
         "duplex": {"goodput_bps": 950e6}}


def _net_64k(**calibration) -> NetworkInputs:
    """1000 Mbit/s, a 142.5 kB bucket of payload, and on 4 hosts chains run back to back:
    latency-bound 0.1 ms rounds at 64 B, at 64 KiB a 0.2 ms first round then 0.55 ms ones at the
    rate; ``calibration``: fields of the calibration record to replace."""
    return NetworkInputs.from_calibration({**_FAST, **calibration}).with_rounds(
        4, {"results": _ROUNDS_64K})


def test_a_call_in_the_stream_starts_on_the_bucket_its_turn_leaves_not_on_the_chains_drained_one():
    from experiments.ablation import without_full_bucket_walk
    from experiments.model import predict_call_alone_s
    net = _net_64k()
    drained = predict_allreduce_s("naive", 4, 65536, net)
    assert drained == pytest.approx(2e-4 + 2 * 5.5e-4)  # as the chains ran: a drained bucket
    # on a full bucket (142.5 kB of payload): the first round as the chains ran it (they started
    # on tokens: the 64 B chains before them leave the bucket full), leaving 100.7 kB, which
    # covers the second: 0.2 ms on tokens (a latency-bound 0.1 ms plus the 0.1 ms its bytes add
    # to a first round) instead of 0.55
    alone = predict_call_alone_s("naive", 4, 65536, net)
    assert alone == pytest.approx(drained - 3.5e-4)
    # a stream of naive calls, a 0.25 ms barrier apart, pays its bytes at the rate, walk or not
    rate_Bps, sent = net.duplex_payload_bps / 8, 3 * 65536
    plain = without_full_bucket_walk(net)  # the ablation's model: priced as the chains ran
    assert predict_call_alone_s("naive", 4, 65536, plain) == pytest.approx(drained)
    for inputs in (net, plain):
        assert predict_allreduce_stream_s(["naive"], 4, 65536, inputs)["naive"] == \
            pytest.approx((sent - net.call_gap_s * rate_Bps) / rate_Bps)
    # a 2 ms gap refills the whole bucket: each call starts on a full one, as alone
    gapped = _net_64k(gloo={**CALIBRATION["gloo"], "stream_gap_s": {"median": 2e-3}})
    assert predict_allreduce_stream_s(["naive"], 4, 65536, gapped)["naive"] == \
        pytest.approx(predict_call_alone_s("naive", 4, 65536, gapped))
    assert predict_allreduce_stream_s(["naive"], 4, 65536, without_full_bucket_walk(gapped))[
        "naive"] == pytest.approx(drained)


def test_without_the_walk_the_stream_counts_each_call_at_its_length():
    from experiments.model import predict_call_alone_s, predict_stream_rotation_s
    net = _net_64k()
    turn = ["naive", "ring"]  # a rotation of naive, ring, ring, naive: two naive calls in a row
    alone = [predict_call_alone_s(a, 4, 65536, net) for a in turn]
    sent = [sum(allreduce_messages(a, 4, 65536)) for a in turn]
    counted = stream_call_s(alone, sent, net.call_gap_s, net.duplex_payload_bps,
                            net.bucket_payload_bytes)
    assert list(predict_allreduce_stream_s(turn, 4, 65536, net, walk_calls=False).values()) == \
        pytest.approx(counted)
    # counted at its length, a naive call (0.95 ms alone) leaves the next one enough to run as
    # alone; walked, its last round waits for tokens and leaves the bucket empty, so the naive
    # call right after it starts on the barrier's refill alone and pays the rest at the rate
    rate_Bps = net.duplex_payload_bps / 8
    assert predict_stream_rotation_s(turn, 4, 65536, net, walk_calls=False)[0] == \
        pytest.approx([alone[0], alone[0]])
    assert predict_stream_rotation_s(turn, 4, 65536, net)[0] == pytest.approx(
        [(sent[0] - net.call_gap_s * rate_Bps) / rate_Bps, alone[0]])


def test_chains_timed_alone_price_every_table_from_their_ends_and_the_ablation_can_undo_it():
    from experiments.ablation import with_own_chain_ends, without_chain_ends
    from experiments.measure import bracket
    from experiments.probe_tables import ChainEnds, engine_table, plain_table, ring_table

    def probe(scale):  # ring_probe.py's rows, with each chain's figures, as bracket reads them
        return [{**row, "first_chains_s": [row["first_s"]] * 3, "next_chains_s": [row["next_s"]] * 3,
                 "reduce_chains_s": [0.0] * 3} for row in _ends_probe(scale)]

    def faster(rows, by):  # the same chains at the small size, ``by`` times as fast
        return [{**r, "ends_chains_s": [[e / by for e in c] for c in r["ends_chains_s"]]}
                for r in rows[:1]]

    # two probes that idled before every chain (each on a full bucket), all three drivers; the
    # C++-driven chains of the small size twice as fast as the Python-driven ones, the
    # ring-driven ones four times
    def record(scale):
        rows = probe(scale)
        return {"idle_s": 0.003, "results": rows, "engine_results": faster(rows, 2),
                "ring_results": faster(rows, 4)}
    idle = bracket(record(1.0), record(1.2))
    net = NetworkInputs.from_calibration(CALIBRATION).with_rounds(4, idle)
    for table in (net.round_costs[4], net.engine_round_costs[4], net.ring_round_costs[4],
                  plain_table(idle), engine_table(idle), ring_table(idle)):
        assert isinstance(table, ChainEnds)
    assert net.round_costs[4].rounds_time_s([(3, 64_000)]) == pytest.approx(9.24e-3)
    # Gloo's and the ring's tables: their own chains at 32 kB (the median over both probes),
    # the Python-driven ones above
    for table, by in ((net.engine_round_costs[4], 2), (net.ring_round_costs[4], 4)):
        assert table.rounds_time_s([(3, 32_000)]) == pytest.approx(4.62e-3 / by)
        assert table.rounds_time_s([(3, 64_000)]) == pytest.approx(9.24e-3)
    # the calibration's tables of a probe that idled too
    calibrated = NetworkInputs.from_calibration({**CALIBRATION, "rounds": {"4": record(1.0)}})
    assert calibrated.rounds_for("backend", 4).rounds_time_s([(3, 32_000)]) == \
        pytest.approx(4.2e-3 / 2)
    # the ablation's first-and-next pricing of the same tables
    plain = without_chain_ends(net)
    assert not any(isinstance(t, ChainEnds) for t in (plain.round_costs[4],
                                                     plain.engine_round_costs[4],
                                                     plain.ring_round_costs[4]))
    assert plain.round_costs[4].rounds_time_s([(3, 64_000)]) == pytest.approx(2e-3 + 2 * 4e-3)
    # and its chains'-ends pricing of chains run back to back: every driver's table
    back_to_back = {k: v for k, v in idle.items() if k != "idle_s"}
    net = NetworkInputs.from_calibration(CALIBRATION).with_rounds(4, back_to_back)
    assert not isinstance(net.ring_round_costs[4], ChainEnds)
    priced = with_own_chain_ends(net, 4, back_to_back)
    assert priced.ring_round_costs[4].rounds_time_s([(3, 32_000)]) == pytest.approx(4.62e-3 / 4)
    # a probe that idled but lost its chains' ends at a size: said, not priced the other way
    lost = {**idle, "after": [{k: v for k, v in r.items() if k != "ends_chains_s"}
                              for r in idle["after"]]}
    lost["before"] = lost["after"]
    with pytest.raises(ValueError, match="32000 B, 64000 B"):
        plain_table(lost)


def test_ablation_prices_a_call_in_the_rotation_the_benchmark_ran_even_where_a_group_keeps_less():
    from experiments.ablation import errors, turns_of
    rounds = [{"bytes": 64, "first_s": 0.10e-3, "next_s": 0.10e-3},  # 4 hosts at 1000 Mbit/s
              {"bytes": 65536, "first_s": 0.12e-3, "next_s": 0.12e-3},
              {"bytes": 1 << 20, "first_s": 8.5e-3, "next_s": 8.8e-3}]
    calibration = {**CALIBRATION, "bandwidth_bps": 1e9, "goodput_bps": 956e6,
                   "burst_bytes": 125_000, "rounds": {"4": {"results": rounds}}}
    nets = {1e9: NetworkInputs.from_calibration(calibration)}
    rows = [{"algorithm": a, "hosts": 4, "bytes": 48_000, "bandwidth_bps": 1e9, "measured_s": 1e-3}
            for a in ("ring", "naive", "backend")]
    everyone = errors(rows, nets, "rounds")
    naive_in_turn = errors(rows[1:2], nets, "rounds", turns=turns_of(rows))
    assert naive_in_turn == pytest.approx(everyone[1:2])
    # the rings' lighter calls between its own leave the naive ring more of the bucket than a
    # stream of naive calls alone would; a group that keeps only the naive rows is priced so
    assert errors(rows[1:2], nets, "rounds") != pytest.approx(naive_in_turn)


def test_allreduce_repredict_gives_a_stored_runs_rows_again_and_refuses_a_row_of_no_point():
    from experiments import allreduce
    from experiments.configs import AllReduceConfig
    point = AllReduceConfig(hosts=2, bandwidth_bps=50e6, sizes_bytes=(64_000, 1_000_000),
                            algorithms=("ring", "backend"))
    probe = {"results": [{"bytes": 64, "first_s": 1e-3, "next_s": 1e-3},
                         {"bytes": 1 << 20, "first_s": 0.18, "next_s": 0.18}]}
    net = NetworkInputs.from_calibration(CALIBRATION)
    measured = {"rounds": probe, "results": [
        {"algorithm": a, "bytes": n, "time_s": 0.01 + n * 8 / 45e6}
        for n in point.sizes_bytes for a in point.algorithms]}
    rows = allreduce.point_rows(point, measured, net)
    stored = {"points": [{**point.as_dict(), "kind": "allreduce"}], "rows": rows,
              "rounds": {point.label: probe}}
    assert allreduce.repredict(stored, {50e6: net}) == rows
    stray = {**rows[0], "algorithm": "naive"}  # an algorithm the point did not run
    with pytest.raises(ValueError, match="naive 64000 B is not one of H=2 50Mbps"):
        allreduce.repredict({**stored, "rows": [*rows, stray]}, {50e6: net})
    with pytest.raises(ValueError, match="no calibration at 50 Mbit/s"):
        allreduce.repredict(stored, {200e6: net})


def test_a_stream_of_calls_needs_a_positive_rate():
    with pytest.raises(ValueError, match="payload rate must be positive"):
        stream_call_s([1e-3], [1_000], 1e-4, 0.0, 10_000)


@pytest.mark.parametrize("report_dir", ["experiments", "experiments/results/full-b09ce8c", None])
def test_every_report_links_to_the_notebook_and_the_pooled_grids_where_they_lie(
        monkeypatch, tmp_path, report_dir):
    import re
    from experiments import run
    folder = run.HERE.parent / report_dir if report_dir else tmp_path
    monkeypatch.setattr(run, "REPORT", folder / "RESULTS.md")
    monkeypatch.setattr(run, "header_lines", lambda meta: ["# report"])
    _, text = run.report_texts([], {})
    for name, target in [("LOG.md", run.HERE / "LOG.md"),
                         ("docs/fidelity.md", run.HERE.parent / "docs" / "fidelity.md")]:
        link = re.search(r"\[" + re.escape(name) + r"\]\(([^)]+)\)", text).group(1)
        assert (folder / link).resolve() == target.resolve()
        assert target.is_file()


def test_a_result_file_that_is_not_json_is_named_with_its_host(monkeypatch, tmp_path):
    import contextlib
    from experiments import measure
    from real.testbed import TestbedConfig, TestbedError
    from real.testbed.launch import HostResult, RunResult
    log = tmp_path / "log"
    log.write_text("")
    hosts = [HostResult(0, "10.0.0.1", 0, 0.1, str(log), str(log), json={"other.json": {}}),
             HostResult(1, "10.0.0.2", 0, 0.1, str(log), str(log),
                        json_errors={"sync.json": "Expecting value: line 1 column 1 (char 0)"})]

    class Bed:
        def run(self, command, timeout_s, echo):
            return RunResult(command, hosts, 0.2)

    monkeypatch.setattr(measure, "scratch_testbed", lambda config: contextlib.nullcontext(Bed()))
    with pytest.raises(TestbedError, match=r"^2 hosts: host1's sync\.json is not JSON: "
                                           r"Expecting value"):
        measure.run_collect(TestbedConfig(hosts=2), "true", "sync.json", "2 hosts", 10.0)
    hosts[1].json_errors.clear()  # nobody wrote it, and nothing broken: the count is the message
    with pytest.raises(TestbedError, match="0 hosts wrote sync.json, expected 1"):
        measure.run_collect(TestbedConfig(hosts=2), "true", "sync.json", "2 hosts", 10.0)


def test_runner_interrupted_while_calibrating_marks_its_own_run_json(monkeypatch, tmp_path):
    import real.testbed
    from experiments import measure, run
    (tmp_path / "run.json").write_text(json.dumps({"command": "an earlier run"}))

    def ctrl_c(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: None)
    monkeypatch.setattr(measure, "calibrate_rate", ctrl_c)
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    sample_the_machine_briefly(monkeypatch)
    assert run.main(["--out", str(tmp_path), "--wait-quiet", "0", "sync"]) == 130
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["command"].startswith("python experiments/run.py --out ")
    assert meta["command"].endswith(" --wait-quiet 0s sync") and meta["wait_quiet_s"] == 0.0
    assert meta["interrupted"] == "Ctrl-C" and meta["finished"] == [] and meta["calibration"] == []
    header = run_header.header_lines(meta)
    assert "interrupted (Ctrl-C) before sync finished" in header[0]
    assert header[2].startswith("No calibration: the run stopped before its calibration finished")


# A calibration's round trips as a full grid measured them while another process's file searches
# kept the cores busy (1000 Mbit/s; every wake-up waited for the scheduler's 4 ms tick: the grid
# is kept in experiments/results/full-busy-cedfcea/).
BUSY_GRID = REPO / "experiments/results/full-busy-cedfcea"
BUSY_CALIBRATION = {"rtt_s": {"median": 0.004006, "p10": 0.003961, "p90": 0.007869, "count": 200},
                    "gloo": {"rtt_s": {"median": 0.004010, "p10": 0.003927, "p90": 0.007792,
                                       "count": 200}}}


def stored_calibrations():
    """Every stored grid's calibration records but the busy one's."""
    return [c for path in sorted((REPO / "experiments/results").glob("*/calibration.json"))
            + [REPO / "experiments/results/calibration.json"] if path.parent != BUSY_GRID
            for c in json.loads(path.read_text())]


def test_a_calibration_taken_on_a_busy_machine_is_named_and_no_stored_one_is():
    from experiments.measure import busy_machine_reason
    reason = busy_machine_reason(BUSY_CALIBRATION)
    assert reason.startswith("TCP's round trip between its 2 hosts took 4.01 ms (median of 200)")
    busy = json.loads((BUSY_GRID / "calibration.json").read_text())
    assert [c["bandwidth_bps"] for c in busy if busy_machine_reason(c)] == [50e6, 200e6, 1e9]
    gloo_only = {"rtt_s": {"median": 4.7e-05, "count": 200}, "gloo": BUSY_CALIBRATION["gloo"]}
    assert busy_machine_reason(gloo_only).startswith("Gloo's round trip between its 2 hosts took 4.01 ms")
    stored = stored_calibrations()
    assert len(stored) > 40  # every full and quick grid's rates
    named = [(c["bandwidth_bps"], c["rtt_s"]["median"]) for c in stored if busy_machine_reason(c)]
    # one stored rate only: a quick grid's TCP pings at 50 Mbit/s ran beside other work (4.0 ms,
    # p10 2.3 ms) while its Gloo pings right after took 0.078 ms; it would have been taken again
    assert [(rate, round(rtt, 4)) for rate, rtt in named] == [(50e6, 0.004)]


def test_calibration_on_a_busy_machine_is_taken_again_and_the_run_stops_if_it_stays_busy(
        monkeypatch, capsys):
    from experiments import measure
    from real.testbed import TestbedError
    quiet = stored_calibrations()[0]
    records, pauses = [BUSY_CALIBRATION, quiet], []
    monkeypatch.setattr(measure, "calibrate", lambda config, *a, **k: dict(records.pop(0)))
    monkeypatch.setattr(measure, "measure_duplex", lambda config, sizes: {})
    monkeypatch.setattr(measure, "measure_queue", lambda config: {})
    monkeypatch.setattr(measure.time, "sleep", pauses.append)
    record = measure.calibrate_rate(1e9, True)
    assert record["attempts"] == 2 and pauses == [measure.CALIBRATION_PAUSES_S[0]]
    assert record["rtt_s"] == quiet["rtt_s"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("calibration at 1000 Mbit/s: TCP's round trip")
    assert err.rstrip().endswith("the machine is busy; trying again in 30 s")
    calls = []
    monkeypatch.setattr(measure, "calibrate",
                        lambda config, *a, **k: calls.append(config) or dict(BUSY_CALIBRATION))
    with pytest.raises(TestbedError, match=r"^calibration at 50 Mbit/s: TCP's round trip .* in 3 "
                                           r"attempts: another process is keeping the cores busy"):
        measure.calibrate_rate(50e6, True)
    assert len(calls) == 3 and pauses[1:] == list(measure.CALIBRATION_PAUSES_S)


def test_a_calibration_whose_link_ran_slow_is_named_and_no_quiet_one_is():
    from real.testbed.calibrate import LINK_RATE_FLOOR, slow_link_reason, transfer_shares
    record = {"payload_efficiency_expected": 0.96, "payload_efficiency": 0.861,
              "gloo": {"payload_efficiency": 0.95}, "duplex": {"payload_efficiency": 0.90}}
    shares = transfer_shares(record)
    assert shares == pytest.approx({"TCP": 0.861 / 0.96, "Gloo": 0.95 / 0.96,
                                    "duplex": 0.90 / 0.96})
    assert slow_link_reason(record) == ("its transfers carried under 0.97 of the rate less headers "
                                        "(TCP 0.897, duplex 0.938)")
    assert slow_link_reason({**record, "payload_efficiency": 0.95, "duplex": {}}) is None
    stored = stored_calibrations()
    named = sorted((path.name, c["bandwidth_bps"] / 1e6)
                   for path in sorted((REPO / "experiments/results").glob("*-*/"))
                   if (path / "calibration.json").exists() and path != BUSY_GRID
                   for c in json.loads((path / "calibration.json").read_text())
                   if slow_link_reason(c))
    # the grids made on slow cores (and an early parameter-server grid's duplex rates; 5448359
    # and d155586 kept the attempt nearest the rate, of three); every other stored rate carried
    # 0.97 of the rate less headers or more, each way
    assert named == [("full-5448359", 50), ("full-5448359", 1000),
                     ("full-8c54ba6", 50), ("full-8c54ba6", 200), ("full-8d8dc5e", 50),
                     ("full-8d8dc5e", 200), ("full-8d8dc5e", 1000), ("full-c700588", 200),
                     ("full-c700588", 1000), ("full-ps", 50), ("full-ps", 200),
                     ("quick-2c6a66a", 50), ("quick-2c6a66a", 200), ("quick-389d2a5", 50),
                     ("quick-b67fb8f", 50), ("quick-b67fb8f", 200), ("quick-d155586", 200)]
    quiet = [transfer_shares(c) for c in stored if not slow_link_reason(c)]
    assert len(quiet) > 100 and all(LINK_RATE_FLOOR <= share < 1.02
                                    for shares in quiet for share in shares.values())


def test_calibration_whose_link_ran_slow_is_taken_again_and_the_nearest_kept(monkeypatch, capsys):
    from experiments import measure

    def record(tcp, duplex):
        return ({"payload_efficiency_expected": 0.96, "payload_efficiency": tcp * 0.96,
                 "rtt_s": {"median": 5e-5, "count": 100}}, {"payload_efficiency": duplex * 0.96})

    def replay(attempts):
        records, duplexes = [list(part) for part in zip(*attempts)]
        monkeypatch.setattr(measure, "calibrate", lambda config, *a, **k: dict(records.pop(0)))
        monkeypatch.setattr(measure, "measure_duplex", lambda config, sizes: duplexes.pop(0))

    pauses = []
    monkeypatch.setattr(measure, "measure_queue", lambda config: {})
    monkeypatch.setattr(measure.time, "sleep", pauses.append)
    replay([record(0.90, 0.99), record(0.995, 0.99)])
    kept = measure.calibrate_rate(200e6, True)
    assert kept["attempts"] == 2 and pauses == [measure.LINK_PAUSES_S[0]]
    assert kept["payload_efficiency"] == pytest.approx(0.995 * 0.96)
    assert [round(c["TCP"], 3) for c in kept["link_rate_shares"]] == [0.9, 0.995]
    err = capsys.readouterr().err
    assert err == ("calibration at 200 Mbit/s: its transfers carried under 0.97 of the rate less "
                   "headers (TCP 0.900): the link ran under its rate; trying again in 10 s\n")
    # slow every time: three attempts, and the run goes on with the one nearest the rate
    pauses.clear()
    replay([record(0.95, 0.99), record(0.96, 0.985), record(0.99, 0.93)])
    kept = measure.calibrate_rate(50e6, True)
    assert kept["attempts"] == 3 and pauses == list(measure.LINK_PAUSES_S)
    assert kept["payload_efficiency"] == pytest.approx(0.96 * 0.96)  # the second
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and lines[-1] == (
        "calibration at 50 Mbit/s: the link ran under its rate in each of its 3 attempts on a "
        "quiet machine; going on with the nearest (its transfers carried under 0.97 of the rate "
        "less headers (TCP 0.960)): the calls at this rate may be priced over")


def test_a_slow_attempt_then_busy_ones_goes_on_with_the_slow_one(monkeypatch, capsys):
    from experiments import measure
    slow = {"payload_efficiency_expected": 0.96, "payload_efficiency": 0.93 * 0.96,
            "rtt_s": {"median": 5e-5, "count": 100}}
    records = [slow, BUSY_CALIBRATION, BUSY_CALIBRATION]
    monkeypatch.setattr(measure, "calibrate", lambda config, *a, **k: dict(records.pop(0)))
    monkeypatch.setattr(measure, "measure_duplex", lambda config, sizes: {})
    monkeypatch.setattr(measure, "measure_queue", lambda config: {})
    pauses = []
    monkeypatch.setattr(measure.time, "sleep", pauses.append)
    kept = measure.calibrate_rate(200e6, True)  # no TestbedError: a quiet attempt was made
    assert kept["attempts"] == 3 and kept["payload_efficiency"] == pytest.approx(0.93 * 0.96)
    assert kept["link_rate_shares"] == [{"TCP": pytest.approx(0.93)}] and not records
    assert pauses == [measure.LINK_PAUSES_S[0], measure.CALIBRATION_PAUSES_S[1]]
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "calibration at 200 Mbit/s: the link ran under its rate in its one attempt on a quiet "
        "machine; going on with the nearest")


def test_busy_cores_reads_the_machines_ticks_and_the_report_names_a_busy_stage(monkeypatch, capsys):
    text = "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\nintr 1\n"
    assert stage_samples.cpu_jiffies(text) == (170, 990)  # idle (800) and iowait (20) are not busy
    with pytest.raises(ValueError):
        stage_samples.cpu_jiffies("intr 1\n")
    cores = stage_samples.busy_cores(0.2)
    assert cores is not None and 0.0 <= cores <= os.cpu_count() + 0.01
    meta = {}
    monkeypatch.setattr(stage_samples, "busy_cores", lambda: 1.46)
    stage_samples.note_busy_cores(meta, "sync")
    monkeypatch.setattr(stage_samples, "busy_cores", lambda: 0.1)
    stage_samples.note_busy_cores(meta, "async")
    assert meta == {"busy_cores": {"sync": 1.46, "async": 0.1}}
    err = capsys.readouterr().err
    assert err == (f"experiments/run.py: warning: before sync, other processes kept 1.5 of the "
                   f"machine's {os.cpu_count()} cores busy; measurements beside them run slow\n")
    assert stage_samples.busy_note(meta) == (" Other processes kept the machine busy: 1.5 cores "
                                             "before sync; the measurements beside them ran slow.")
    assert stage_samples.busy_note({"busy_cores": {"sync": 0.1, "async": None}}) == ""
    assert stage_samples.busy_note({}) == ""


class FakeClock:
    """time.sleep and time.monotonic for a wait that takes no real time."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def monotonic(self):
        return self.now


def test_a_stage_waits_for_other_processes_to_leave_the_cores(monkeypatch, capsys):
    clock, samples = FakeClock(), iter([1.6, 1.2, 0.2])
    monkeypatch.setattr(stage_samples.time, "sleep", clock.sleep)
    monkeypatch.setattr(stage_samples.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(stage_samples, "busy_cores", lambda: next(samples))
    meta = {}
    stage_samples.note_busy_cores(meta, "sync", wait_s=120.0)
    assert clock.sleeps == [stage_samples.QUIET_CHECK_S] * 2
    assert meta == {"busy_cores": {"sync": 0.2}, "quiet_waits": {"sync": 20.0}}
    assert capsys.readouterr().err.splitlines() == [
        f"experiments/run.py: before sync, other processes keep 1.6 of the machine's "
        f"{os.cpu_count()} cores busy; waiting up to 2.0 min for them to finish",
        "experiments/run.py: the machine is quiet after 20 s; starting sync"]
    assert stage_samples.busy_note(meta) == (" The run waited for other processes to leave the "
                                             "cores: 20 s before sync.")


def test_a_stage_waits_no_longer_than_it_was_given_then_warns(monkeypatch, capsys):
    clock = FakeClock()
    monkeypatch.setattr(stage_samples.time, "sleep", clock.sleep)
    monkeypatch.setattr(stage_samples.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(stage_samples, "busy_cores", lambda: 1.0)
    meta = {}
    stage_samples.note_busy_cores(meta, "async", wait_s=25.0)
    assert clock.sleeps == [10.0, 10.0, 5.0]  # the last look falls at the end of the wait
    assert meta == {"busy_cores": {"async": 1.0}, "quiet_waits": {"async": 25.0}}
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"experiments/run.py: warning: before async, other processes kept 1.0 of the machine's "
        f"{os.cpu_count()} cores busy (after waiting 25 s); measurements beside them run slow")
    assert stage_samples.busy_note(meta) == (
        " The run waited for other processes to leave the cores: 25 s before async. Other "
        "processes kept the machine busy: 1.0 cores before async; the measurements beside them "
        "ran slow.")
    meta = {}  # --wait-quiet 0, or a quiet machine: no wait, none recorded
    stage_samples.note_busy_cores(meta, "async", wait_s=0.0)
    monkeypatch.setattr(stage_samples, "busy_cores", lambda: 0.1)
    stage_samples.note_busy_cores(meta, "sync", wait_s=120.0)
    assert clock.sleeps == [10.0, 10.0, 5.0] and "quiet_waits" not in meta
    assert meta == {"busy_cores": {"async": 1.0, "sync": 0.1}}


def test_wait_quiet_takes_a_time_and_only_on_a_measuring_run(capsys):
    from experiments import run
    assert run.parse_args(["sync"]).wait_quiet == stage_samples.QUIET_WAIT_S
    assert run.parse_args(["--wait-quiet", "30s", "sync"]).wait_quiet == 30.0
    assert run.parse_args(["--wait-quiet", "0", "sync"]).wait_quiet == 0.0
    for argv, message in ((["--wait-quiet", "5"], "time '5' needs a unit"),
                          (["--wait-quiet", "-1min"], "negative time"),
                          (["--report-only", "--wait-quiet", "1min"], "--report-only rewrites"),
                          (["--repredict", "allreduce", "--wait-quiet", "0"],
                           "or --wait-quiet")):
        with pytest.raises(SystemExit) as stop:
            run.parse_args(argv)
        assert stop.value.code == 2
        assert message in capsys.readouterr().err
