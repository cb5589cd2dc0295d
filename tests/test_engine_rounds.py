"""Ring rounds driven from C++ as Gloo's own all-reduce drives them (``experiments/engine_rounds.py``),
the probe that times them (``ring_probe.py --engine-rounds``) and the model that prices Gloo's
all-reduce with them (``NetworkInputs.rounds_for``)."""

import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from dist_helpers import run_function, run_script
from dsgd_sim.collectives import RoundCosts
from experiments import engine_rounds
from experiments.measure import bracket, probe_step
from experiments.model import NetworkInputs, predict_allreduce_s
from experiments.probe_tables import engine_table
from experiments.ring_probe import ENGINE_MAX_BYTES

# the C++ rounds are compiled at first use (torch.utils.cpp_extension; ./install.sh dev installs
# g++ and ninja where it can)
needs_compiler = pytest.mark.skipif(shutil.which("c++") is None or shutil.which("ninja") is None,
                                    reason="no C++ compiler or ninja to build the C++ ring rounds")

PYTHON_ROWS = [{"bytes": 64, "first_s": 1.0e-3, "next_s": 0.8e-3},
               {"bytes": 64 << 10, "first_s": 1.4e-3, "next_s": 0.9e-3},
               {"bytes": 1 << 20, "first_s": 9.7e-3, "next_s": 9.1e-3}]
ENGINE_ROWS = [{"bytes": 64, "first_s": 0.9e-3, "next_s": 0.5e-3},
               {"bytes": 64 << 10, "first_s": 1.1e-3, "next_s": 0.6e-3}]
CALIBRATION = {"bandwidth_bps": 1e9, "goodput_bps": 0.95e9, "frame_bytes": 1514,
               "gloo": {"latency_s": 70e-6, "all_reduce_1_element_s": {"median": 240e-6}},
               "rounds": {"8": {"results": PYTHON_ROWS, "engine_results": ENGINE_ROWS},
                          "4": {"results": PYTHON_ROWS}}}


def test_gloos_allreduce_is_priced_from_the_cpp_rounds_and_the_hand_written_rings_from_python():
    net = NetworkInputs.from_calibration(CALIBRATION)
    # 8 hosts, 512 KiB: 14 rounds of 64 KiB
    assert predict_allreduce_s("backend", 8, 512 << 10, net) == pytest.approx(1.1e-3 + 13 * 0.6e-3)
    assert predict_allreduce_s("ring", 8, 512 << 10, net) == pytest.approx(1.4e-3 + 13 * 0.9e-3)
    # no C++ rounds on 4 hosts: Gloo's all-reduce falls back to the Python-driven ones
    assert net.rounds_for("backend", 4) is net.round_costs[4]
    assert predict_allreduce_s("backend", 4, 192 << 10, net) == \
        predict_allreduce_s("ring", 4, 192 << 10, net)


def test_the_engine_table_takes_the_python_rounds_above_its_largest_size():
    table = engine_table({"results": PYTHON_ROWS, "engine_results": ENGINE_ROWS})
    assert table.sizes_bytes == (64, 64 << 10, 1 << 20)
    assert table.next_s == (0.5e-3, 0.6e-3, 9.1e-3)
    assert table.next_round_s(1 << 20) == pytest.approx(9.1e-3)


def test_a_probe_without_cpp_rounds_drops_a_stale_engine_table():
    net = NetworkInputs.from_calibration(CALIBRATION)
    assert 8 in net.engine_round_costs
    fresh = net.with_rounds(8, {"results": PYTHON_ROWS})
    assert 8 not in fresh.engine_round_costs
    assert fresh.rounds_for("backend", 8) == RoundCosts.from_rows(PYTHON_ROWS)
    again = fresh.with_rounds(8, {"results": PYTHON_ROWS, "engine_results": ENGINE_ROWS[:1]})
    assert again.rounds_for("backend", 8).next_s == (0.5e-3, 0.9e-3, 9.1e-3)


def test_inputs_without_cpp_rounds_are_stored_as_before():
    # a stored run's inputs are compared as JSON (run.py --repredict): no new key where no table
    plain = NetworkInputs.from_calibration({**CALIBRATION, "rounds": {"4": {"results": PYTHON_ROWS}}})
    assert "engine_round_costs" not in plain.as_dict()
    with_engine = NetworkInputs.from_calibration(CALIBRATION).as_dict()
    assert with_engine["engine_round_costs"] == {"8": engine_table(CALIBRATION["rounds"]["8"]).as_rows()}


def chains(first, later, size=64):
    return {"bytes": size, "first_s": first[0], "next_s": later[0], "first_chains_s": first,
            "next_chains_s": later}


def test_bracketing_keeps_the_cpp_rounds_only_where_both_probes_have_them():
    before = {"results": [chains([1.0, 1.2], [2.0, 2.2])],
              "engine_results": [chains([0.5, 0.7], [0.3, 0.5])]}
    after = {"results": [chains([1.1], [2.1])], "engine_results": [chains([0.9], [0.4])]}
    table = bracket(before, after)
    assert table["engine_results"] == [{"bytes": 64, "first_s": pytest.approx(0.7),
                                        "next_s": pytest.approx(0.4)}]
    assert table["engine_before"] == before["engine_results"]
    assert "engine_results" not in bracket(before, {"results": after["results"]})


def test_the_test_beds_probes_time_the_cpp_rounds_and_the_runner_builds_them_only_for_probes():
    from experiments.configs import EXPERIMENTS
    from experiments.measure import runs_ring_probes
    assert "--engine-rounds" in probe_step([64], 3, "r.json", 4).split()
    words = probe_step([64], 3, "r.json", 4, engine_max=1 << 20).split()
    assert words[words.index("--engine-max") + 1] == f"{1 << 20}B"
    assert runs_ring_probes([EXPERIMENTS["allreduce"](True)])
    assert runs_ring_probes([EXPERIMENTS["sync"](True)])
    assert not runs_ring_probes([EXPERIMENTS["async"](True)])


def test_the_cpp_rounds_reach_the_size_a_link_carries_in_a_set_time_never_below_the_default():
    from experiments.measure import ENGINE_ROUND_S, ROUND_SIZES_FULL, engine_max_bytes
    assert engine_max_bytes(10e6) == ENGINE_MAX_BYTES  # 20 kB in 16 ms: the default is more
    assert engine_max_bytes(200e6) == int(200e6 * ENGINE_ROUND_S / 8) == 400_000
    # at 50 Mbit/s 100 kB: the probe's grid has no size between 64 KiB and 128 KiB
    assert max(n for n in ROUND_SIZES_FULL if n <= engine_max_bytes(50e6)) == 64 << 10
    assert engine_max_bytes(1e9) == 2_000_000


def test_each_source_is_built_from_its_own_copy_in_a_folder_named_by_its_contents(
        monkeypatch, tmp_path):
    # the build names its source's path: built from the checkout's own file, every other
    # checkout would build it again; two sources each keep their own folder, not one rebuilt
    source = tmp_path / "checkout" / "engine_rounds.cpp"
    source.parent.mkdir()
    source.write_text("int first;\n")
    monkeypatch.setattr(engine_rounds, "SOURCE", source)
    base = tmp_path / "build"
    first, copy = engine_rounds.kept_source(base)
    assert copy == first / "engine_rounds.cpp" and copy.read_text() == "int first;\n"
    os.utime(copy, (1, 1))
    assert engine_rounds.kept_source(base) == (first, copy) and copy.stat().st_mtime == 1
    source.write_text("int second;\n")
    second, other = engine_rounds.kept_source(base)
    assert second != first and other.read_text() == "int second;\n"
    assert copy.read_text() == "int first;\n"  # the first source's build is left as it was
    copy.write_text("int fi")  # a copy cut short is written again
    source.write_text("int first;\n")
    assert engine_rounds.kept_source(base) == (first, copy) and copy.read_text() == "int first;\n"
    assert sorted(p.name for p in first.iterdir()) == ["engine_rounds.cpp"]  # no stray file


def test_a_failed_build_is_one_line_that_says_why(monkeypatch, tmp_path):
    import torch.utils.cpp_extension as cpp_extension
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(engine_rounds, "_module", None)

    def failing_build(*args, **kwargs):
        raise RuntimeError("Error building extension 'dsgd_engine_rounds': [1/2] c++ -MMD -MF "
                           "engine_rounds.o.d -O2 -c engine_rounds.cpp\nFAILED: engine_rounds.o\n"
                           "engine_rounds.cpp:9:10: fatal error: Python.h: No such file or "
                           "directory\nninja: build stopped: subcommand failed.")
    monkeypatch.setattr(cpp_extension, "load", failing_build)
    with pytest.raises(engine_rounds.EngineRoundsError) as error:
        engine_rounds.load()
    message = str(error.value)
    assert "\n" not in message and "fatal error: Python.h" in message and "install.sh dev" in message
    assert engine_rounds.build_directory().is_relative_to(tmp_path)


def test_the_runner_stops_in_one_line_when_the_rounds_cannot_be_built(monkeypatch, capsys):
    import real.testbed
    from experiments import run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: None)

    def no_build():
        raise engine_rounds.EngineRoundsError("cannot build the C++ ring rounds: no compiler")
    monkeypatch.setattr(engine_rounds, "load", no_build)
    assert run.main(["--quick", "allreduce"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot build the C++ ring rounds" in err


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    import os
    import time
    lock = tmp_path / "lock"
    lock.touch()
    assert not engine_rounds.remove_stale_lock(tmp_path) and lock.exists()
    old = time.time() - engine_rounds.STALE_LOCK_S - 60
    os.utime(lock, (old, old))
    assert engine_rounds.remove_stale_lock(tmp_path) and not lock.exists()
    assert not engine_rounds.remove_stale_lock(tmp_path)  # none: nothing to do


def test_an_mpi_communicator_is_refused_in_one_line():
    with pytest.raises(engine_rounds.EngineRoundsError, match="^C\\+\\+ rounds run on torch"):
        engine_rounds.check_comm(SimpleNamespace(engine="mpi", backend="mpi"))


def pass_rank_numbers(rounds: int) -> list:
    """Each rank sends a buffer of its own around the ring in C++ rounds: what arrived last, and
    the round ends."""
    from real.comm import init
    comm = init("torch", "gloo", timeout_s=60)
    try:
        mine = torch.arange(11.0) + 100 * comm.rank  # halves of 5 and 6 elements
        buffers = (mine.clone(), torch.full((11,), -1.0))
        marks, arrived = engine_rounds.chain_marks(comm, buffers, rounds, tag=33)
        return [arrived.tolist(), marks]
    finally:
        comm.close()


@needs_compiler
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_cpp_rounds_pass_both_halves_on_around_the_ring(rounds):
    world = 3
    for rank, (arrived, marks) in enumerate(run_function(pass_rank_numbers, world, rounds,
                                                         timeout_s=240)):
        # after k rounds a rank holds, in order, the buffer its k-th neighbour to the left
        # started with: both halves, neither crossed nor repeated
        assert arrived == (torch.arange(11.0) + 100 * ((rank - rounds) % world)).tolist()
        assert len(marks) == rounds and all(0 < a < b for a, b in zip(marks, marks[1:] + [1e9]))


@needs_compiler
def test_probe_times_cpp_rounds_up_to_the_engine_limit_on_two_ranks(tmp_path):
    out = tmp_path / "rounds.json"
    run = run_script(["experiments/ring_probe.py", "--sizes", f"4B,64B,16KiB,{2 * ENGINE_MAX_BYTES}B",
                      "--repeats", "1", "--rounds", "3", "--engine-rounds", "--json", str(out)],
                     2, timeout_s=240)
    assert run.returncode == 0, run.stderr
    record = json.loads(out.read_text())
    # a 4-byte message has no two halves: Python-driven rounds only
    assert [r["bytes"] for r in record["results"]] == [4, 64, 16384, 2 * ENGINE_MAX_BYTES]
    assert [r["bytes"] for r in record["engine_results"]] == [64, 16384]
    assert all(len(ends) == 3 and 0 < ends[0] < ends[1] < ends[2]
               for r in record["engine_results"] for ends in r["ends_chains_s"])
    assert "C++" in run.stdout
    assert engine_table(record).sizes_bytes == (64, 16384, 2 * ENGINE_MAX_BYTES)
    assert engine_table(record).next_s[:2] == tuple(r["next_s"] for r in record["engine_results"])


@needs_compiler
def test_engine_max_sets_the_largest_size_timed_from_cpp(tmp_path):
    out = tmp_path / "rounds.json"
    run = run_script(["experiments/ring_probe.py", "--sizes", f"64B,{2 * ENGINE_MAX_BYTES}B",
                      "--repeats", "1", "--rounds", "3", "--engine-rounds",
                      "--engine-max", f"{2 * ENGINE_MAX_BYTES}B", "--json", str(out)],
                     2, timeout_s=240)
    assert run.returncode == 0, run.stderr
    record = json.loads(out.read_text())
    assert [r["bytes"] for r in record["engine_results"]] == [64, 2 * ENGINE_MAX_BYTES]
    assert engine_table(record).next_s == tuple(r["next_s"] for r in record["engine_results"])


def test_ablation_prices_gloos_rows_from_the_python_rounds_only_in_its_own_model():
    from experiments.ablation import errors
    nets = {1e9: NetworkInputs.from_calibration(CALIBRATION)}
    engine_s, python_s = 1.1e-3 + 13 * 0.6e-3, 1.4e-3 + 13 * 0.9e-3  # 14 rounds of 64 KiB
    row = {"algorithm": "backend", "hosts": 8, "bytes": 512 << 10, "bandwidth_bps": 1e9,
           "measured_s": engine_s}
    assert errors([row], nets, "rounds") == [pytest.approx(0.0, abs=1e-12)]
    assert errors([row], nets, "rounds, Gloo's from Python") == \
        [pytest.approx((python_s - engine_s) / engine_s)]
    # with the point's own probe (its C++ rounds twice as slow): that table, or its Python one
    slow = [{**r, "first_s": 2 * r["first_s"], "next_s": 2 * r["next_s"]} for r in ENGINE_ROWS]
    tables = {"H=8 1000Mbps": {"results": PYTHON_ROWS, "engine_results": slow}}
    assert errors([row], nets, "rounds", tables) == [pytest.approx(1.0)]
    assert errors([row], nets, "rounds, Gloo's from Python", tables) == \
        [pytest.approx((python_s - engine_s) / engine_s)]


def test_the_probe_refuses_cpp_rounds_on_mpi_before_building_anything(monkeypatch, capsys):
    from experiments.ring_probe import main as probe_main

    def no_build():
        raise AssertionError("built the C++ rounds for a backend that cannot run them")
    monkeypatch.setattr(engine_rounds, "load", no_build)
    with pytest.raises(SystemExit) as exit_info:
        probe_main(["--engine-rounds", "--backend", "mpi"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backend mpi" in err[0] and "Gloo" in err[0]
