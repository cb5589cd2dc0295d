"""Measured ring rounds: the probe that times them (``experiments/ring_probe.py``), the calibration
record that holds them, and the all-reduce predictions that compose them."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bed_helpers import sequence_steps
from dist_helpers import run_script
from dsgd_sim.collectives import RoundCosts
from experiments.configs import AllReduceConfig, AsyncRunConfig, SyncRunConfig
from experiments.configs import Experiment
from experiments import measure
from experiments.measure import (ROUND_SIZES_FULL, ROUND_SIZES_QUICK, bracket, probe_step,
                                 ring_bytes, ring_hosts, round_sizes_up_to)
from experiments.ring_probe import SIZED_GAP_LEAST_CALLS, chain_rounds
from experiments.model import NetworkInputs, predict_allreduce_s, predict_allreduce_stream_s
from experiments.ring_probe import main as probe_main
from experiments.allreduce import rows as allreduce_rows

ROWS = [{"bytes": 64, "first_s": 0.5e-3, "next_s": 0.6e-3},
        {"bytes": 1 << 20, "first_s": 0.170, "next_s": 0.180},
        {"bytes": 4 << 20, "first_s": 0.680, "next_s": 0.700}]
REDUCE_ROWS = [{**r, "reduce_s": 2e-9 * r["bytes"]} for r in ROWS]
CALIBRATION = {"bandwidth_bps": 50e6, "goodput_bps": 47.8e6, "frame_bytes": 1514,
               "gloo": {"latency_s": 100e-6, "all_reduce_1_element_s": {"median": 250e-6}},
               "rounds": {"4": {"results": ROWS}}}


def test_calibration_rounds_become_the_simulators_round_costs_per_host_count():
    net = NetworkInputs.from_calibration(CALIBRATION)
    assert set(net.round_costs) == {4}
    assert net.round_costs[4] == RoundCosts.from_rows(ROWS)
    assert net.as_dict()["round_costs"] == {"4": RoundCosts.from_rows(ROWS).as_rows()}


def test_allreduce_on_a_calibrated_host_count_is_its_rounds_at_the_measured_costs():
    net = NetworkInputs.from_calibration(CALIBRATION)
    table = net.round_costs[4]
    # ring of 4 MiB on 4 hosts: 6 rounds of 1 MiB; naive: 3 rounds of 4 MiB
    assert predict_allreduce_s("ring", 4, 4 << 20, net) == pytest.approx(0.170 + 5 * 0.180)
    assert predict_allreduce_s("backend", 4, 4 << 20, net) == pytest.approx(0.170 + 5 * 0.180)
    assert predict_allreduce_s("naive", 4, 4 << 20, net) == pytest.approx(0.680 + 2 * 0.700)
    assert predict_allreduce_s("ring", 4, 2 << 20, net) == pytest.approx(
        table.first_round_s(512 << 10) + 5 * table.next_round_s(512 << 10))
    # with the additions measured: the hand-written rings add what arrived after each reduce
    # round (ring: 3 of 1 MiB; naive: 3 of 4 MiB); Gloo's own stays at its rounds
    local = NetworkInputs.from_calibration({**CALIBRATION, "rounds": {"4": {"results": REDUCE_ROWS}}})
    assert predict_allreduce_s("ring", 4, 4 << 20, local) == pytest.approx(
        0.170 + 5 * 0.180 + 3 * 2e-9 * (1 << 20))
    assert predict_allreduce_s("naive", 4, 4 << 20, local) == pytest.approx(
        0.680 + 2 * 0.700 + 3 * 2e-9 * (4 << 20))
    assert predict_allreduce_s("backend", 4, 4 << 20, local) == pytest.approx(0.170 + 5 * 0.180)
    # a host count without a table, or the table switched off: the shaper model, not the table
    without = predict_allreduce_s("ring", 4, 4 << 20, net, measured_rounds=False)
    assert predict_allreduce_s("ring", 2, 4 << 20, net) != pytest.approx(0.170 + 0.180)
    assert without != pytest.approx(0.170 + 5 * 0.180)


def test_ring_hosts_are_the_hosts_whose_runs_need_the_calibrations_rounds_at_each_rate():
    # the all-reduce points time their own rounds; the async server's bed runs no ring
    points = [AllReduceConfig(2, 50e6, (64_000,)), AllReduceConfig(4, 200e6, (64_000,)),
              SyncRunConfig(8, 200e6), SyncRunConfig(2, 50e6), AsyncRunConfig(5, 200e6)]
    assert ring_hosts(points, 50e6) == [2]
    assert ring_hosts(points, 200e6) == [8]
    assert ring_hosts(points[:2], 200e6) == []


def test_calibration_times_rounds_up_to_the_largest_gradient_its_rings_send(monkeypatch):
    from real.models import build_model, grad_bytes
    points = [AllReduceConfig(2, 50e6, (64_000,)), SyncRunConfig(8, 200e6), AsyncRunConfig(5, 50e6)]
    mlp = grad_bytes(build_model("mlp", 0))
    assert ring_bytes(points, 200e6) == mlp and ring_bytes(points, 50e6) is None
    asked = {}
    monkeypatch.setattr(measure, "calibrate", lambda config, *a, **k: {})
    duplex_sizes = []
    monkeypatch.setattr(measure, "measure_duplex",
                        lambda config, sizes: duplex_sizes.append(sizes) or {})
    monkeypatch.setattr(measure, "measure_rounds",
                        lambda config, sizes: asked.setdefault(config.hosts, sizes))
    queue_beds = []
    monkeypatch.setattr(measure, "measure_queue",
                        lambda config: queue_beds.append(config) or {"behind_bulk_s": 0.005})
    record = measure.calibrate_rate(200e6, False, [4, 8], mlp)
    assert set(record["rounds"]) == {"4", "8"}
    # the queue behind a long message: a bed of 3 hosts (sender, echo, sink) at the rate
    assert record["queue"] == {"behind_bulk_s": 0.005}
    assert [(c.hosts, c.bandwidth_bps) for c in queue_beds] == [(3, 200e6)]
    assert asked[8] == asked[4] == round_sizes_up_to(mlp, False)
    assert asked[8][-1] == 1 << 20 < ROUND_SIZES_FULL[-1]  # 0.94 MB: the grid stops at 1 MiB
    measure.calibrate_rate(200e6, True, [2])  # no size given: the whole grid
    assert asked[2] == ROUND_SIZES_QUICK
    # the quick calibration's duplex exchanges stop at 4 MB, the largest its rounds send
    assert duplex_sizes == [measure.DUPLEX_SIZES, measure.DUPLEX_SIZES_QUICK]
    assert max(measure.DUPLEX_SIZES_QUICK) == 4_000_000


def test_sizes_past_the_first_that_reaches_a_round_change_no_round_cost():
    # why the calibration may stop its grid there: a round is priced from the sizes around it
    whole = RoundCosts.from_rows(ROWS + [{"bytes": 16 << 20, "first_s": 2.9, "next_s": 3.1}])
    stopped = RoundCosts.from_rows(ROWS)
    for n in (100, 300_000, 1 << 20, 3_000_000, 4 << 20):
        rounds = [(1, n), (5, n)]
        assert whole.rounds_time_s(rounds) == stopped.rounds_time_s(rounds)
    assert whole.rounds_time_s([(3, 8 << 20)]) != stopped.rounds_time_s([(3, 8 << 20)])


def test_round_sizes_reach_the_largest_round_and_stop_there():
    assert round_sizes_up_to(4_000_000, quick=False) == ROUND_SIZES_FULL[:-1]  # 4 MiB reaches it
    assert round_sizes_up_to(16_000_000, quick=False) == ROUND_SIZES_FULL
    assert round_sizes_up_to(50, quick=True) == [64]
    assert round_sizes_up_to(1 << 30, quick=True) == ROUND_SIZES_QUICK  # past the grid: all of it


def test_probe_chains_are_as_long_as_a_ring_all_reduce_on_as_many_hosts():
    assert [chain_rounds(h) for h in (2, 3, 4, 8, 16)] == [4, 4, 6, 14, 30]
    words = probe_step([64, 1 << 20], 3, "r.json", chain_rounds(8)).split()
    assert words[words.index("--rounds") + 1] == "14"
    assert words[words.index("--sizes") + 1] == "64B,1048576B"
    assert words[words.index("--idle") + 1] == "0.000ms"  # by default chains back to back


class _OneRank:
    """A communicator of one rank: the probe's reductions over ranks change nothing."""

    def all_reduce(self, tensor, op="sum"):
        return tensor


def test_probe_interleaves_its_sizes_or_runs_each_sizes_chains_in_a_block(monkeypatch):
    from experiments import ring_probe
    monkeypatch.setattr(ring_probe, "SMALL_BYTES", 64)  # 64 B: 2 repeats x 3; 1 KiB: 2
    monkeypatch.setattr(ring_probe, "SMALL_FACTOR", 3)
    blocks = [64, 64, 64, 64, 64, 64, 1024, 1024]
    for order, expected in (("interleaved", [64, 1024, 64, 1024, 64, 64, 64, 64]),
                            ("blocks", blocks), (None, blocks)):  # None: the default
        seen = []

        def chain(comm, buffers, rounds):
            seen.append(4 * buffers[0].numel())
            return [1e-3 * (k + 1) for k in range(rounds)], buffers[1]

        rows = ring_probe.probe(_OneRank(), [64, 1024], 4, 2, chain=chain,
                                **({"order": order} if order else {}))
        assert seen[:2] == [64, 1024]  # one warm-up chain a size, in size order
        assert seen[2:] == expected
        assert [len(r["next_chains_s"]) for r in rows] == [6, 2]
        assert all(r["next_s"] == pytest.approx(1e-3) for r in rows)
    seen.clear()
    with pytest.raises(ValueError, match="order must be one of"):
        ring_probe.probe(_OneRank(), [64], 4, 1, chain=chain, order="random")
    assert seen == []  # refused before any chain ran, the warm-up ones included


def test_the_test_beds_probes_take_the_runs_order_of_sizes(monkeypatch):
    from experiments import run
    assert "--order" not in probe_step([64], 3, "r.json", 4).split()  # the default, blocks
    monkeypatch.setattr(measure, "PROBE_ORDER", "interleaved")  # run.py --probe-order interleaved
    words = probe_step([64], 3, "r.json", 4).split()
    assert words[words.index("--order") + 1] == "interleaved"
    assert run.parse_args(["--probe-order", "interleaved", "allreduce"]).probe_order == \
        "interleaved"
    assert run.parse_args(["allreduce"]).probe_order == "blocks"


def test_the_test_beds_probes_idle_until_the_slowest_bucket_has_refilled_twice(monkeypatch):
    from experiments import measure
    from experiments.measure import PROBE_WAKE_S, probe_idle_s, testbed_config
    monkeypatch.setattr(measure, "PROBE_IDLE", True)  # experiments/run.py --probe-idle
    # 1000 Mbit/s: a 125 kB bucket, 1 ms to refill; 50 Mbit/s: 10 frames, 2.4 ms
    assert probe_idle_s(testbed_config(4, 1e9)) == pytest.approx(2e-3 + PROBE_WAKE_S)
    assert probe_idle_s(testbed_config(2, 50e6)) == pytest.approx(2 * 15140 * 8 / 50e6
                                                                   + PROBE_WAKE_S)
    # one slower host: its bucket sets the idle
    slow = testbed_config(4, 1e9, slow_host_bps=50e6)
    assert probe_idle_s(slow) == pytest.approx(probe_idle_s(testbed_config(2, 50e6)))
    words = probe_step([64], 3, "r.json", 6, idle_s=probe_idle_s(slow)).split()
    assert words[words.index("--idle") + 1] == "5.845ms"


def chains(first: list[float], later: list[float], size: int = 1 << 20) -> dict:
    return {"bytes": size, "first_s": sorted(first)[len(first) // 2],
            "next_s": sorted(later)[len(later) // 2], "first_chains_s": first, "next_chains_s": later}


def test_bracketing_probes_take_the_median_over_both_probes_chains_and_keep_both_records():
    before = [chains([1.0, 1.1, 1.2], [2.0, 2.1, 2.2])]
    after = [chains([5.0, 1.15, 5.0], [2.05, 9.0, 2.15])]  # a burst in two chains of one half
    table = bracket({"world_size": 4, "results": before}, {"world_size": 4, "results": after})
    assert table["world_size"] == 4 and table["before"] == before and table["after"] == after
    assert table["results"] == [{"bytes": 1 << 20, "first_s": pytest.approx(1.175),
                                 "next_s": pytest.approx(2.125)}]
    # the additions' chains, where the probes timed them, are bracketed the same way
    row = bracket({"results": [{**chains([1.0], [2.0]), "reduce_chains_s": [0.1, 0.3]}]},
                  {"results": [{**chains([1.0], [2.0]), "reduce_chains_s": [0.2, 0.9]}]})["results"][0]
    assert row["reduce_s"] == pytest.approx(0.25)
    # the gaps of the stream of calls each probe timed: both probes' together, where both have them
    gaps = bracket({"results": before, "stream_gap_s": [1e-4, 2e-4]},
                   {"results": before, "stream_gap_s": [3e-4]})
    assert gaps["stream_gap_s"] == [1e-4, 2e-4, 3e-4]
    assert "stream_gap_s" not in bracket({"results": before, "stream_gap_s": [1e-4]},
                                         {"results": before})
    # ... and per size, the gaps of the streams that refilled the benchmark's buffers
    sized = bracket({"results": before, "sized_stream_gaps": [{"bytes": 64, "gaps_s": [1.0]},
                                                              {"bytes": 128, "gaps_s": [2.0]}]},
                    {"results": before, "sized_stream_gaps": [{"bytes": 64, "gaps_s": [3.0]},
                                                              {"bytes": 128, "gaps_s": [4.0]}]})
    assert sized["sized_stream_gaps"] == [{"bytes": 64, "gaps_s": [1.0, 3.0], "before_gaps": 1},
                                          {"bytes": 128, "gaps_s": [2.0, 4.0], "before_gaps": 1}]
    assert "sized_stream_gaps" not in bracket(
        {"results": before, "sized_stream_gaps": [{"bytes": 64, "gaps_s": [1.0]}]},
        {"results": before})
    for other in ([{"bytes": 32, "gaps_s": [1.0]}],
                  [{"bytes": 64, "gaps_s": [1.0]}, {"bytes": 128, "gaps_s": [1.0]}]):
        with pytest.raises(ValueError, match="refilled different sizes"):
            bracket({"results": before, "sized_stream_gaps": [{"bytes": 64, "gaps_s": [1.0]}]},
                    {"results": before, "sized_stream_gaps": other})
    # ... saying what their calls reduced, which both probes must agree on
    whole = [{"bytes": 64, "calls": "whole", "gaps_s": [1.0]}]
    assert bracket({"results": before, "sized_stream_gaps": whole},
                   {"results": before, "sized_stream_gaps": [{**whole[0], "gaps_s": [2.0, 3.0]}]}
                   )["sized_stream_gaps"] == [
        {"bytes": 64, "calls": "whole", "gaps_s": [1.0, 2.0, 3.0], "before_gaps": 1}]
    with pytest.raises(ValueError, match="different calls"):
        bracket({"results": before, "sized_stream_gaps": whole},
                {"results": before, "sized_stream_gaps": [{**whole[0], "calls": "element"}]})
    with pytest.raises(ValueError):  # a probe that lost a size cannot be paired
        bracket({"results": before}, {"results": []})
    with pytest.raises(ValueError, match="different sizes"):
        bracket({"results": before}, {"results": [chains([1.0], [2.0], size=64)]})


def test_a_paced_round_one_probe_ran_a_fifth_slower_is_taken_from_the_other():
    from experiments.probe_tables import PACED_PROBE_BYTES, settled, steady_halves
    big, small = PACED_PROBE_BYTES, PACED_PROBE_BYTES // 2
    before = [chains([1.0, 1.1, 1.2], [0.50, 0.52, 0.51], size=small),
              chains([9.0, 9.1, 9.2], [9.0, 8.9, 8.9], size=big)]
    after = [chains([2.0, 2.1, 2.2], [0.80, 0.81, 0.82], size=small),  # 60% slower: wake-ups
             chains([13.5, 13.4, 13.6], [13.5, 13.4, 13.4], size=big)]  # 50% slower: a burst
    table = bracket({"results": before}, {"results": after})
    assert table["results"][0]["next_s"] == pytest.approx((0.52 + 0.80) / 2)  # both halves
    assert table["results"][1] == {"bytes": big, "first_s": pytest.approx(9.1),
                                   "next_s": pytest.approx(8.9)}  # the faster probe alone
    assert table["before"] == before and table["after"] == after  # both kept as they ran
    steady_b, steady_a = steady_halves(before, after)
    assert steady_b[1] is steady_a[1] is before[1] and steady_a[0] is after[0]
    # within a fifth of each other, a paced round keeps both halves
    near = [chains([9.0], [10.6], size=big)]  # 19% over 8.9
    assert bracket({"results": [before[1]]}, {"results": near})["results"][0]["next_s"] == \
        pytest.approx((8.9 + 9.0) / 2)  # the median of 9.0, 8.9, 8.9 and 10.6
    # a run stored before the halves were steadied reads as a new one: its merged rows again
    stored = {**table, "results": [{"bytes": small, "first_s": 1.6, "next_s": 0.66},
                                   {"bytes": big, "first_s": 11.3, "next_s": 11.2}]}
    assert settled(stored)["results"] == table["results"]
    assert settled({"results": ROWS}) == {"results": ROWS}  # one probe: as it is
    net = NetworkInputs.from_calibration(CALIBRATION).with_rounds(2, stored)
    assert net.round_costs[2].next_round_s(big) == pytest.approx(8.9)


def test_allreduce_rows_are_predicted_from_the_points_own_rounds_not_the_calibrations():
    net = NetworkInputs.from_calibration(CALIBRATION)  # holds a 4-host table: ROWS
    own = [{**r, "next_s": 2 * r["next_s"]} for r in ROWS]
    point = AllReduceConfig(4, 50e6, (4 << 20,), algorithms=("ring",))

    def fake_measure(p):
        assert p is point
        return {"rounds": {"results": own},
                "results": [{"algorithm": "ring", "bytes": 4 << 20, "time_s": 2.0}]}

    experiment = Experiment("allreduce", "?", (point,))
    rows, tables = allreduce_rows(experiment, {50e6: net}, fake_measure)
    assert tables == {point.label: {"results": own}}
    assert rows[0]["predicted_s"] == pytest.approx(0.170 + 5 * 2 * 0.180)  # 6 rounds of 1 MiB
    assert rows[0]["measured_s"] == 2.0
    assert net.round_costs[4] == RoundCosts.from_rows(ROWS)  # the calibration's own is unchanged


def test_a_stream_of_calls_is_priced_with_the_gap_timed_on_its_own_hosts():
    net = NetworkInputs.from_calibration(
        {**CALIBRATION, "burst_bytes": 62_500,
         "gloo": {**CALIBRATION["gloo"], "stream_gap_s": {"median": 1e-4}}})
    assert net.call_gap_s == 1e-4  # the calibration's, timed on 2 hosts
    assert net.with_rounds(4, {"results": ROWS}).call_gap_s == 1e-4  # a probe without a stream
    bed = net.with_rounds(4, {"results": ROWS, "stream_gap_s": [3e-4, 5e-4, 4e-4]})
    assert bed.call_gap_s == pytest.approx(4e-4) and net.call_gap_s == 1e-4
    # 1 MiB calls on 4 hosts at 50 Mbit/s whose rounds alone take a millisecond outrun the
    # bucket: each lasts until its bytes have passed at the rate, less what the gap refilled
    fast = [{"bytes": 64, "first_s": 1e-4, "next_s": 1e-4},
            {"bytes": 1 << 20, "first_s": 1e-3, "next_s": 1e-3}]
    rate_Bps = net.duplex_payload_bps / 8
    short = predict_allreduce_stream_s(["ring"], 4, 1 << 20, net.with_rounds(4, {"results": fast}))
    long = predict_allreduce_stream_s(["ring"], 4, 1 << 20,
                                      net.with_rounds(4, {"results": fast,
                                                          "stream_gap_s": [3e-4, 5e-4, 4e-4]}))
    assert short["ring"] - long["ring"] == pytest.approx(3e-4)
    assert long["ring"] == pytest.approx(1.5 * (1 << 20) / rate_Bps - 4e-4)
    # the ablation's model with the calibration's gap undoes it, and only it
    from experiments.ablation import errors
    row = {"algorithm": "ring", "hosts": 4, "bytes": 1 << 20, "bandwidth_bps": 50e6,
           "measured_s": long["ring"]}
    tables = {"H=4 50Mbps": {"results": fast, "stream_gap_s": [3e-4, 5e-4, 4e-4]}}
    assert errors([row], {50e6: net}, "rounds", tables) == [pytest.approx(0.0, abs=1e-12)]
    assert errors([row], {50e6: net}, "rounds, the calibration's gap", tables) == [
        pytest.approx(3e-4 / long["ring"])]


def test_a_stream_of_large_calls_is_priced_with_the_gap_timed_at_its_size():
    net = NetworkInputs.from_calibration(
        {**CALIBRATION, "burst_bytes": 62_500,
         "gloo": {**CALIBRATION["gloo"], "stream_gap_s": {"median": 1e-4}}})
    fast = [{"bytes": 64, "first_s": 1e-4, "next_s": 1e-4},
            {"bytes": 1 << 20, "first_s": 1e-3, "next_s": 1e-3}]
    probe = {"results": fast, "stream_gap_s": [2e-4],
             "sized_stream_gaps": [{"bytes": 1 << 20, "gaps_s": [5e-4, 7e-4, 6e-4]},
                                   {"bytes": 1 << 22, "gaps_s": [1.2e-3]}]}
    bed = net.with_rounds(4, probe)
    assert bed.sized_gaps == ((1 << 20, pytest.approx(6e-4)), (1 << 22, 1.2e-3))
    assert bed.call_gap_s == 2e-4  # the 1-element stream's, which the probe's chains follow
    assert bed.call_gap_at(4) == pytest.approx(2e-4)
    assert bed.call_gap_at(1 << 20) == pytest.approx(6e-4)
    assert bed.call_gap_at(5 << 19) == pytest.approx(9e-4)  # halfway between 1 and 4 MiB
    assert bed.call_gap_at(1 << 23) == pytest.approx(2.0e-3)  # the last stretch's slope on
    assert bed.call_gap_at(1 << 19) == pytest.approx(2e-4 + 0.5 * 4e-4, rel=1e-5)
    assert net.with_rounds(4, {**probe, "sized_stream_gaps": []}).call_gap_at(1 << 20) == 2e-4
    # 1 MiB calls on 4 hosts at 50 Mbit/s outrun the bucket: the 0.4 ms more of gap their
    # loop leaves at that size refills 0.4 ms more of the link's bytes, each call that shorter
    plain = predict_allreduce_stream_s(["ring"], 4, 1 << 20,
                                       net.with_rounds(4, {**probe, "sized_stream_gaps": []}))
    sized = predict_allreduce_stream_s(["ring"], 4, 1 << 20, bed)
    assert plain["ring"] - sized["ring"] == pytest.approx(4e-4)
    assert bed.as_dict()["sized_gaps"] == [[1 << 20, pytest.approx(6e-4)], [1 << 22, 1.2e-3]]
    assert "sized_gaps" not in net.as_dict()


def test_sync_rows_are_predicted_from_the_rounds_timed_around_their_run():
    from experiments.run import sync_rows
    net = NetworkInputs.from_calibration(CALIBRATION)  # holds a 4-host table: ROWS
    own = {"results": [{**r, "next_s": 2 * r["next_s"]} for r in ROWS]}
    point = SyncRunConfig(4, 50e6, emulate_compute_s=0.05)
    seen = []

    def predict(p, n, priced):
        seen.append(n)
        priced.update(compute_s=0.05, rest_s=0.001)
        return 0.5

    experiment = Experiment("sync", "?", (point,))
    rows = sync_rows(experiment, {50e6: net}, lambda p: {"iteration_time_s": 0.4, "rounds": own},
                     predict)
    assert seen[0].round_costs[4] == RoundCosts.from_rows(own["results"])
    assert rows[0]["rounds"] == own and "rounds" not in rows[0]["measured"]
    assert (rows[0]["predicted_s"], rows[0]["measured_s"]) == (0.5, 0.4)
    assert rows[0]["priced_step"] == {"compute_s": 0.05, "rest_s": 0.001}
    # a run without its own rounds (torchrun's) is priced from the calibration's
    rows = sync_rows(experiment, {50e6: net}, lambda p: {"iteration_time_s": 0.4}, predict)
    assert seen[1] is net and "rounds" not in rows[0]


def _bed_files(names):
    """What ``run_collect`` returns for ``names``: a probe record per probe, a summary else."""
    probe = {"results": [chains([1e-3], [2e-3], size=r["bytes"]) for r in ROWS]}
    summary = {"iteration_time_s": 0.4, "results": [{"time_s": 0.07}], "updates_per_s": 10.0}
    if not isinstance(names, tuple):
        return summary
    return {n: probe if n.startswith("rounds_") else summary for n in names}


def test_sync_and_ring_runs_are_bracketed_by_probes_of_their_gradients_rounds(monkeypatch):
    from experiments import async_vs_sync as avs, ps_vs_ring as pvr
    from real.models import build_model, grad_bytes
    commands = []

    def capture(_config, command, names, *_args, **_kwargs):
        commands.append(command)
        return _bed_files(names)

    monkeypatch.setattr(measure, "run_collect", capture)
    monkeypatch.setattr(avs, "run_collect", capture)
    monkeypatch.setattr(pvr, "run_collect", capture)
    summary = measure.measure_sync(SyncRunConfig(8, 200e6, emulate_compute_s=0.05))
    assert summary["iteration_time_s"] == 0.4 and summary["rounds"]["results"][0]["next_s"] == 2e-3
    pvr_measured = pvr.measure(pvr.PsVsRingConfig(4, 200e6, server_factors=(1,), updates=120))
    assert "rounds" in pvr_measured and pvr_measured["ring_s"] == 0.07
    assert "rounds" in avs.measure(avs.AsyncVsSyncConfig(2, 200e6, updates=80))
    bracketed = [c for c in commands if "ring_probe.py" in c]
    assert len(bracketed) == 3
    n = grad_bytes(build_model("mlp", 0))
    for command, hosts, script in zip(bracketed, (8, 4, 2), ("sync.py", "allreduce.py", "sync.py")):
        before, run, after = sequence_steps(command)
        assert "rounds_before.json" in before and script in run and "rounds_after.json" in after
        words = before.split()
        sizes = [int(x[:-1]) for x in words[words.index("--sizes") + 1].split(",")]
        assert sizes == round_sizes_up_to(-(-n // hosts), quick=False)  # up to Gloo's chunk
        assert sizes[-1] >= n / hosts > sizes[-2]
        assert words[words.index("--rounds") + 1] == str(chain_rounds(hosts))
    # a torchrun launch (the rendezvous picks rank 0's host) and one host run no probe
    commands.clear()
    measure.measure_sync(SyncRunConfig(4, 200e6, launcher="torchrun"))
    measure.measure_sync(SyncRunConfig(1, 200e6))
    assert len(commands) == 2 and not any("ring_probe.py" in c for c in commands)


FAST_ROUNDS = [{"bytes": 64, "first_s": 0.10e-3, "next_s": 0.10e-3},
               {"bytes": 65536, "first_s": 0.12e-3, "next_s": 0.12e-3},
               {"bytes": 1 << 20, "first_s": 8.5e-3, "next_s": 8.8e-3}]
FAST = {**CALIBRATION, "bandwidth_bps": 1e9, "goodput_bps": 956e6, "burst_bytes": 125_000,
        "rounds": {}}


def _stored_allreduce_run(folder):
    """A run's run.json and allreduce.json as the runner writes them: 2 hosts at 1000 Mbit/s,
    two algorithms at 64 kB, predicted by an older model (1 s each)."""
    point = AllReduceConfig(2, 1e9, (64_000,), algorithms=("ring", "naive"))
    rows = [{"config": f"{a} 0.064MB {point.label}", "algorithm": a, "bytes": 64_000, "hosts": 2,
             "bandwidth_bps": 1e9, "predicted_s": 1.0, "measured_s": t}
            for a, t in (("ring", 0.39e-3), ("naive", 0.36e-3))]
    net = NetworkInputs.from_calibration(FAST)
    (folder / "run.json").write_text(json.dumps({
        "command": "python experiments/run.py", "machine": "m", "cpus": 2,
        "load_average": "0.0 0.0 0.0", "wall_s": 1.0, "calibration": [FAST]}))
    (folder / "allreduce.json").write_text(json.dumps({
        "name": "allreduce", "question": "?", "plot": "allreduce.png",
        "points": [point.as_dict()], "rows": rows, "rounds": {point.label: {"results": FAST_ROUNDS}},
        "inputs": {"1000000000.0": net.as_dict()}}))
    return point, net, rows


def test_repredict_allreduce_prices_the_stored_rows_with_their_own_rounds_as_a_stream(
        tmp_path, monkeypatch):
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    point, net, before = _stored_allreduce_run(tmp_path)
    assert run.main(["--repredict", "allreduce", "--out", str(tmp_path)]) == 0
    after = json.loads((tmp_path / "allreduce.json").read_text())["rows"]
    assert [r["measured_s"] for r in after] == [r["measured_s"] for r in before]
    want = predict_allreduce_stream_s(["ring", "naive"], 2, 64_000,
                                      net.with_rounds(2, {"results": FAST_ROUNDS}))
    assert [r["predicted_s"] for r in after] == [want["ring"], want["naive"]]
    # 64 kB each way a call, back to back: the link's rate, not the rounds alone, sets the pace
    assert want["ring"] > predict_allreduce_s("ring", 2, 64_000,
                                              net.with_rounds(2, {"results": FAST_ROUNDS}))
    assert (tmp_path / "allreduce.png").exists() and (tmp_path / "RESULTS.md").exists()


def test_repredict_allreduce_without_a_points_round_table_says_so_in_one_line(tmp_path):
    _stored_allreduce_run(tmp_path)
    stored = json.loads((tmp_path / "allreduce.json").read_text())
    (tmp_path / "allreduce.json").write_text(json.dumps({**stored, "rounds": {}}))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parent.parent
                                               / "experiments/run.py"), "--repredict",
                           "allreduce", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no round table for H=2 1000Mbps" in done.stderr


def test_probe_times_first_and_next_rounds_per_size_on_two_ranks(tmp_path):
    out = tmp_path / "rounds.json"
    run = run_script(["experiments/ring_probe.py", "--sizes", "64B,16KiB", "--repeats", "2",
                      "--rounds", "3", "--stream-gaps", "20", "--gap-sizes", "64KB,4KB",
                      "--json", str(out)], 2, timeout_s=120)
    assert run.returncode == 0, run.stderr
    table = json.loads(out.read_text())
    # a gap between each two of the stream's 20 calls: the barrier and the loop, never nothing
    assert len(table["stream_gap_s"]) == 19 and statistics.median(table["stream_gap_s"]) > 0
    assert "median gap" in run.stdout
    # and so at each size the loop refills, smallest first, each call an all-reduce of the
    # whole buffer: as many as fit in the budget, at least the least, at most the 20 asked for
    assert [g["bytes"] for g in table["sized_stream_gaps"]] == [4000, 64000]
    assert all(g["calls"] == "whole" and SIZED_GAP_LEAST_CALLS - 1 <= len(g["gaps_s"]) <= 19
               and statistics.median(g["gaps_s"]) > 0 for g in table["sized_stream_gaps"])
    assert "(whole) refilling 64000 B: median gap" in run.stdout
    assert table["world_size"] == 2 and table["rounds"] == 3 and table["threads_per_rank"] >= 1
    assert [r["bytes"] for r in table["results"]] == [64, 16384]
    assert all(r["first_s"] > 0 and r["next_s"] > 0 for r in table["results"])
    assert all(len(r[f"{c}_chains_s"]) == 2 * 9  # 9x up to 256 KiB
               and r[f"{c}_s"] == statistics.median(r[f"{c}_chains_s"])
               for r in table["results"] for c in ("first", "next", "reduce"))
    assert all(r["reduce_s"] > 0 for r in table["results"])
    for r in table["results"]:  # each chain's round ends: 3, rising; its slowest rank's mean
        # later round covers at least the span of the slowest ends
        assert len(r["ends_chains_s"]) == len(r["next_chains_s"])
        assert all(len(ends) == 3 and ends[0] < ends[1] < ends[2]
                   and 2 * later >= ends[2] - ends[0] - 1e-12
                   for ends, later in zip(r["ends_chains_s"], r["next_chains_s"]))
    RoundCosts.from_rows(table["results"])  # what the calibration hands the simulator


def test_probe_with_idle_sleeps_that_long_before_every_chain(monkeypatch):
    from experiments import ring_probe
    events = []
    monkeypatch.setattr(ring_probe.time, "sleep", lambda s: events.append(("sleep", s)))

    def chain(comm, buffers, rounds):
        events.append(("chain", buffers[0].numel()))
        return [0.001 * (k + 1) for k in range(rounds)], buffers[1]

    rows = ring_probe.probe(_OneRank(), [64, 1024], 3, 1, chain=chain, idle_s=0.003)
    # a warm-up chain per size, then 9 chains a size (small sizes get 9x), each after its sleep
    assert len(events) == 2 * (2 + 2 * 9)
    assert events[0::2] == [("sleep", 0.003)] * (2 + 2 * 9)
    assert [e[0] for e in events[1::2]] == ["chain"] * (2 + 2 * 9)
    assert [r["next_s"] for r in rows] == [pytest.approx(0.001)] * 2
    events.clear()
    ring_probe.probe(_OneRank(), [64], 3, 1, chain=chain)  # no idle: no sleep
    assert all(e[0] == "chain" for e in events)


def test_probe_chains_default_to_a_ring_all_reduces_rounds(tmp_path):
    out = tmp_path / "rounds.json"
    run = run_script(["experiments/ring_probe.py", "--sizes", "64B", "--repeats", "1",
                      "--json", str(out)], 2, timeout_s=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["rounds"] == chain_rounds(2) == 4


@pytest.mark.parametrize("argv,named", [
    (["--sizes", "64B,lots"], "'lots'"),
    (["--sizes", "6B"], "6 bytes"),
    (["--rounds", "1"], "--rounds"),
    (["--rounds", "1000000000000"], "1000000000000"),
    (["--repeats", "5000"], "--repeats must be from 1 to 1000, got 5000"),
    (["--sizes", "1e15B"], "1000000000000000 bytes"),
    (["--timeout", "1e300s"], "'1e300s'"),
    (["--ring-rounds", "--engine-max", "0B"], "'0B'"),
    (["--ring-rounds", "--engine-max", "big"], "'big'"),
    (["--engine-max", "1MB"], "--engine-max needs --engine-rounds or --ring-rounds"),
    (["--calls", "6B"], "--calls: 6 bytes"),
    (["--calls", "2MB"], "--calls: 2000000 bytes is not a positive multiple of 4 up to 1 MiB"),
    (["--calls", ""], "--calls"),
    (["--calls", "abc"], "'abc'"),
    (["--idle", "-1ms"], "'-1ms'"),
    (["--idle", "1h"], "'1h'"),
    (["--stream-gaps", "1"], "got 1"),
    (["--stream-gaps", "-5"], "got -5"),
    (["--gap-sizes", "64KB"], "--gap-sizes needs --stream-gaps"),
    (["--stream-gaps", "20", "--gap-sizes", "6B"], "6 bytes"),
    (["--stream-gaps", "20", "--gap-sizes", "1e15B"], "1000000000000000 bytes"),
    (["--stream-gaps", "20", "--gap-sizes", "much"], "'much'"),
    (["--stream-gaps", "20", "--gap-calls", "element"], "--gap-calls needs --gap-sizes"),
])
def test_probe_rejects_bad_flags_with_one_line_and_status_2(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        probe_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert named in err[-1] and "Traceback" not in "".join(err)
