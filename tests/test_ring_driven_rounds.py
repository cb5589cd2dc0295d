"""Ring rounds driven as the hand-written ring drives them (``ring_probe.py --ring-rounds``) and the
model that prices that ring with them (``NetworkInputs.rounds_for``)."""

import dataclasses
import json
import statistics

import pytest
import torch

from bed_helpers import sequence_steps
from dist_helpers import run_function, run_script
from test_engine_rounds import chains
from experiments import measure
from experiments.configs import AllReduceConfig
from experiments.measure import bracket, probe_step
from experiments.model import (NetworkInputs, own_work_s, predict_allreduce_s, refilled_after,
                               ring_call_extra)
from experiments.probe_tables import ring_table
from experiments.ring_probe import ring_chain_marks

PLAIN_ROWS = [{"bytes": 64, "first_s": 1.0e-3, "next_s": 0.8e-3, "reduce_s": 1e-6},
              {"bytes": 64 << 10, "first_s": 1.4e-3, "next_s": 0.9e-3, "reduce_s": 2e-5},
              {"bytes": 1 << 20, "first_s": 9.7e-3, "next_s": 9.1e-3, "reduce_s": 3e-4}]
RING_ROWS = [{"bytes": 64, "first_s": 1.2e-3, "next_s": 1.0e-3, "reduce_s": 1e-6},
             {"bytes": 64 << 10, "first_s": 1.6e-3, "next_s": 1.1e-3, "reduce_s": 2e-5}]
CALIBRATION = {"bandwidth_bps": 1e9, "goodput_bps": 0.95e9, "frame_bytes": 1514,
               "gloo": {"latency_s": 70e-6, "all_reduce_1_element_s": {"median": 240e-6}},
               "rounds": {"8": {"results": PLAIN_ROWS, "ring_results": RING_ROWS},
                          "4": {"results": PLAIN_ROWS}}}


def test_the_ring_is_priced_from_its_own_rounds_with_the_additions_inside_them():
    net = NetworkInputs.from_calibration(CALIBRATION)
    # 8 hosts, 512 KiB: 14 rounds of 64 KiB; the ring-driven rounds already hold the additions
    assert predict_allreduce_s("ring", 8, 512 << 10, net) == pytest.approx(1.6e-3 + 13 * 1.1e-3)
    # the naive ring drives its rounds as the plain chains do, and adds after 7 of 512 KiB
    naive = net.round_costs[8]
    assert predict_allreduce_s("naive", 8, 512 << 10, net) == pytest.approx(
        naive.rounds_time_s([(7, 512 << 10)]) + naive.reduce_time_s([512 << 10] * 7))
    # no ring-driven rounds on 4 hosts: the plain ones, with the additions timed after them
    assert net.rounds_for("ring", 4) is net.round_costs[4]
    assert predict_allreduce_s("ring", 4, 256 << 10, net) == pytest.approx(
        1.4e-3 + 5 * 0.9e-3 + 3 * 2e-5)


def test_the_ring_table_takes_the_plain_rounds_and_their_additions_above_its_largest_size():
    table = ring_table({"results": PLAIN_ROWS, "ring_results": RING_ROWS})
    assert table.sizes_bytes == (64, 64 << 10, 1 << 20)
    assert table.next_s == (1.0e-3, 1.1e-3, 9.1e-3)
    assert table.reduce_s == (0.0, 0.0, 3e-4)


def test_a_probe_without_ring_driven_rounds_drops_a_stale_ring_table_and_stores_none():
    net = NetworkInputs.from_calibration(CALIBRATION)
    assert 8 in net.ring_round_costs
    assert net.as_dict()["ring_round_costs"] == {"8": ring_table(CALIBRATION["rounds"]["8"]).as_rows()}
    fresh = net.with_rounds(8, {"results": PLAIN_ROWS})
    assert 8 not in fresh.ring_round_costs and "ring_round_costs" not in fresh.as_dict()
    assert fresh.rounds_for("ring", 8) is fresh.round_costs[8]
    again = fresh.with_rounds(8, {"results": PLAIN_ROWS, "ring_results": RING_ROWS[:1]})
    assert again.rounds_for("ring", 8).next_s == (1.0e-3, 0.9e-3, 9.1e-3)


def test_bracketing_keeps_the_ring_driven_rounds_only_where_both_probes_have_them():
    before = {"results": [chains([1.0], [2.0])], "ring_results": [chains([0.5, 0.7], [0.3, 0.5])]}
    after = {"results": [chains([1.1], [2.1])], "ring_results": [chains([0.9], [0.4])]}
    table = bracket(before, after)
    assert table["ring_results"] == [{"bytes": 64, "first_s": pytest.approx(0.7),
                                      "next_s": pytest.approx(0.4)}]
    assert table["ring_before"] == before["ring_results"]
    assert "ring_results" not in bracket(before, {"results": after["results"]})


def calls(size, chain, ring):
    return {"bytes": size, "chain_s": statistics.median(chain), "chain_turns_s": chain,
            "ring_s": statistics.median(ring), "ring_turns_s": ring}


def test_bracketing_pools_both_probes_turns_of_the_rings_calls():
    before = {"results": [chains([1.0], [2.0])],
              "calls_results": [calls(64, [1.0, 1.2], [1.5, 1.9]), calls(512, [3.0], [3.1])]}
    after = {"results": [chains([1.1], [2.1])],
             "calls_results": [calls(64, [1.4], [1.6]), calls(512, [3.2], [3.5])]}
    merged = bracket(before, after)["calls_results"]
    assert merged[0]["chain_turns_s"] == [1.0, 1.2, 1.4] and merged[0]["chain_s"] == 1.2
    assert merged[0]["ring_turns_s"] == [1.5, 1.9, 1.6] and merged[0]["ring_s"] == 1.6
    assert merged[1]["ring_s"] == pytest.approx(3.3)
    assert before["calls_results"][0]["chain_s"] == 1.1  # the halves are left as they were
    assert "calls_results" not in bracket(before, {"results": after["results"]})
    with pytest.raises(ValueError, match="different sizes"):
        bracket(before, {**after, "calls_results": after["calls_results"][:1]})


def test_the_rings_own_work_is_its_call_less_its_chain_at_the_smallest_size_and_off_by_default():
    assert ring_call_extra([calls(512, [3.0], [3.4]), calls(64, [1.0], [1.25])]) == 0.25
    assert ring_call_extra([calls(64, [1.0], [0.9])]) == 0.0  # a call below its chain: none
    probe = {"results": PLAIN_ROWS, "ring_results": RING_ROWS,
             "calls_results": [calls(64, [1.0e-3], [1.3e-3])]}
    net = NetworkInputs.from_calibration(CALIBRATION).with_rounds(8, probe)
    assert net.ring_call_extra_s == {8: pytest.approx(0.3e-3)}
    charged = dataclasses.replace(net, price_ring_own_work=True)
    for algorithm in ("ring", "naive", "backend"):
        extra = 0.3e-3 if algorithm == "ring" else 0.0
        assert predict_allreduce_s(algorithm, 8, 512 << 10, charged) == pytest.approx(
            predict_allreduce_s(algorithm, 8, 512 << 10, net) + extra)
    assert own_work_s("ring", 8, net) == 0.0
    assert own_work_s("ring", 8, charged) == pytest.approx(0.3e-3)
    # without ring-driven rounds the ring is priced from the plain ones: no extra for them
    plain = NetworkInputs.from_calibration(CALIBRATION).with_rounds(
        4, {"results": PLAIN_ROWS, "calls_results": probe["calls_results"]})
    assert 4 not in plain.ring_call_extra_s
    assert own_work_s("ring", 4, dataclasses.replace(plain, price_ring_own_work=True)) == 0.0


def test_the_links_idle_through_the_rings_own_work_and_the_bucket_refills():
    net = NetworkInputs.from_calibration({**CALIBRATION, "burst_bytes": 125_000})
    refill = refilled_after(lambda tokens: tokens / 2, 0.1e-3, net)
    gained = 0.1e-3 * net.duplex_payload_bps / 8
    assert refill(40_000) == pytest.approx(20_000 + gained)
    assert refill(1e9) == net.bucket_payload_bytes  # no more than the bucket holds
    assert refilled_after(None, 0.1e-3, net) is None


def test_only_the_all_reduce_points_with_the_ring_time_ring_driven_rounds(monkeypatch):
    assert "--ring-rounds" not in probe_step([64], 3, "r.json", 4).split()
    assert "--ring-rounds" in probe_step([64], 3, "r.json", 4, ring=True).split()
    assert "--calls 64B" in probe_step([64], 3, "r.json", 4, ring=True, calls=(64,))
    commands = []

    def capture(_config, command, names, *_args, **_kwargs):
        commands.append(command)
        probe = {"results": [chains([1.0], [2.0])], "ring_results": [chains([1.0], [2.0])]}
        return {n: probe if n.startswith("rounds_") else {"results": []} for n in names}

    monkeypatch.setattr(measure, "run_collect", capture)
    measure.measure_allreduce(AllReduceConfig(2, 1e9, (64_000,), algorithms=("ring", "backend")))
    measure.measure_allreduce(AllReduceConfig(2, 1e9, (64_000,), algorithms=("naive", "backend")))
    probes = [[part for part in sequence_steps(c) if "ring_probe.py" in part] for c in commands]
    assert [len(p) for p in probes] == [2, 2]
    assert all("--ring-rounds" in part and "--calls 64B" in part for part in probes[0])
    assert not any("--ring-rounds" in part or "--calls" in part for part in probes[1])


def pass_on_ring_driven(world: int, rounds: int) -> list:
    """Each rank starts with 10^rank in every element; what the chain's last round received
    and the round ends."""
    from real.comm import init
    comm = init("torch", "gloo", timeout_s=60)
    try:
        mine = torch.full((5,), 10.0 ** comm.rank, dtype=torch.float64)
        marks, arrived = ring_chain_marks(comm, (mine, torch.empty_like(mine)), rounds)
        return [arrived.tolist(), marks]
    finally:
        comm.close()


@pytest.mark.parametrize("world,rounds", [(3, 4), (4, 4), (2, 3)])
def test_ring_driven_rounds_add_in_the_first_half_and_pass_on_in_the_second(world, rounds):
    # k = rounds // 2 rounds add what arrived into a slot of their own and send it on; the rest
    # pass on what arrived: the last slot holds the sum of the buffers of the ranks
    # rounds - k ... rounds places to the left
    k = rounds // 2
    for rank, (arrived, marks) in enumerate(run_function(pass_on_ring_driven, world, world,
                                                         rounds, timeout_s=120)):
        expected = sum(10.0 ** ((rank - i) % world) for i in range(rounds - k, rounds + 1))
        assert arrived == [expected] * 5
        assert len(marks) == rounds and all(0 < a < b for a, b in zip(marks, marks[1:] + [1e9]))


def run_probe(tmp_path, sizes: str, rounds: int, engine_max: str):
    """``ring_probe.py --ring-rounds`` on two ranks: its run and its record."""
    out = tmp_path / "rounds.json"
    run = run_script(["experiments/ring_probe.py", "--sizes", sizes, "--repeats", "1",
                      "--rounds", str(rounds), "--ring-rounds", "--engine-max", engine_max,
                      "--json", str(out)], 2, timeout_s=120)
    assert run.returncode == 0, run.stderr
    return run, json.loads(out.read_text())


def test_probe_times_ring_driven_rounds_up_to_the_limit_on_two_ranks(tmp_path):
    run, record = run_probe(tmp_path, "64B,16KiB,128KiB", 4, "16KiB")
    assert [r["bytes"] for r in record["ring_results"]] == [64, 16384]
    assert all(len(ends) == 4 and 0 < ends[0] < ends[1] < ends[2] < ends[3]
               for r in record["ring_results"] for ends in r["ends_chains_s"])
    assert "ring " in run.stdout and "engine_results" not in record
    assert ring_table(record).sizes_bytes == (64, 16384, 128 << 10)


def test_ablation_prices_the_ring_from_plain_chains_only_in_its_own_model():
    from experiments.ablation import errors
    nets = {1e9: NetworkInputs.from_calibration(CALIBRATION)}
    ring_s = 1.6e-3 + 13 * 1.1e-3  # 14 ring-driven rounds of 64 KiB
    plain_s = 1.4e-3 + 13 * 0.9e-3 + 7 * 2e-5  # 14 plain ones and 7 additions
    row = {"algorithm": "ring", "hosts": 8, "bytes": 512 << 10, "bandwidth_bps": 1e9,
           "measured_s": ring_s}
    assert errors([row], nets, "rounds, calls alone") == [pytest.approx(0.0, abs=1e-12)]
    assert errors([row], nets, "rounds, the ring's from plain chains") == \
        [pytest.approx(abs(plain_s - ring_s) / ring_s)]


def test_probe_times_no_ring_driven_rounds_where_every_size_is_above_the_limit(tmp_path):
    _, record = run_probe(tmp_path, "16KiB", 2, "64B")
    assert "ring_results" not in record and [r["bytes"] for r in record["results"]] == [16384]


def test_calls_take_turns_with_their_chains_in_one_launch_on_two_ranks(tmp_path):
    out = tmp_path / "calls.json"
    run = run_script(["experiments/ring_probe.py", "--sizes", "64B", "--repeats", "1",
                      "--calls", "64B,32000B", "--json", str(out)], 2, timeout_s=120)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["calls_results"]
    assert [(r["bytes"], r["call_bytes"]) for r in rows] == [(64, 128), (32000, 64000)]
    for row in rows:
        for what in ("chain", "chain_sent", "chain_setup", "ring", "ring_unplanned", "backend"):
            turns = row[f"{what}_turns_s"]
            assert len(turns) == 9 and all(0 < t < 5 for t in turns)  # 9 turns up to 256 KiB
            assert row[f"{what}_s"] == sorted(turns)[4]
    assert "64000 B calls: ring-driven chain " in run.stdout
