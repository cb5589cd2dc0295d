"""experiments/call_positions.py: positions read from a benchmark trace, the model's per
position, its CLI, and a run on a bed."""

import json
import statistics

import pytest

from experiments.call_positions import (beds_trace, load_calibration, main, measured_gaps,
                                        measured_positions, parse_args, position,
                                        predicted_positions)
from experiments.model import NetworkInputs, predict_allreduce_stream_s
from tests.bed_helpers import needs_namespaces
from tests.cli_helpers import usage_error

CALIBRATION = {"bandwidth_bps": 1e9, "goodput_bps": 956e6, "frame_bytes": 1514,
               "burst_bytes": 125_000, "duplex": {"goodput_bps": 950e6},
               "gloo": {"latency_s": 50e-6, "all_reduce_1_element_s": {"median": 150e-6}}}


def span(rank, start_us, dur_us, name, n_bytes=64000):
    return {"ph": "X", "tid": rank, "ts": start_us, "dur": dur_us, "name": name,
            "args": {"bytes": n_bytes}}


def test_a_position_names_the_call_and_the_two_before_it():
    algorithms = ["ring", "naive", "backend"]
    calls = [0, 1, 2, 1, 2, 0]
    assert position(algorithms, calls, 2) == "backend<naive<ring"
    assert position(algorithms, calls, 5) == "ring<backend<naive"
    # the first calls of a rotation that repeats follow its last
    assert position(algorithms, calls, 0) == "ring<ring<backend"


def test_measured_positions_are_medians_of_the_slowest_ranks_calls_after_each_pair():
    names = ["a", "b", "b", "a", "a", "b", "b", "a"]  # two algorithms taking turns: a b, b a
    events = [{"ph": "M", "name": "thread_name", "tid": 0}]
    for k, name in enumerate(names):
        events += [span(0, 1000 * k, 100 + k, name), span(1, 1000 * k + 5, 100, name)]
    got = measured_positions(events)[64000]
    # from the third call on: b after b, a (calls 2 and 6: 102 and 106 us), a after b, b (3 and
    # 7), a after a, b (4), b after a, a (5)
    assert got == pytest.approx({"b<b<a": 104e-6, "a<b<b": 105e-6, "a<a<b": 104e-6,
                                 "b<a<a": 105e-6})


def test_measured_gaps_are_from_the_slowest_ranks_end_to_each_start_median_over_ranks():
    names = ["a", "b", "b", "a", "a", "b"]
    events = []
    for k, name in enumerate(names):
        events += [span(0, 1000 * k, 100 + k, name), span(1, 1000 * k + 100, 100, name),
                   span(2, 1000 * k + 150, 150, name)]
    got = measured_gaps(events)[64000]
    # every rank starts 1000 us after its start before; the slowest rank of call k - 1 took
    # 150 us (rank 2) until rank 0's took longer (100 + k - 1 > 150: never here), so 850 us
    assert got == pytest.approx({"b<b<a": 850e-6, "a<b<b": 850e-6, "a<a<b": 850e-6,
                                 "b<a<a": 850e-6})
    # as the probes time it: from the slowest rank's end, not each rank's own
    slow = [dict(e, dur=400) if e["tid"] == 1 and e["ts"] == 3100 else e for e in events]
    assert measured_gaps(slow)[64000]["a<a<b"] == pytest.approx(600e-6)  # call 4, after call 3
    # a size's calls are gapped among themselves only: the first after another size has none
    events += [span(r, 10_000 + 1000 * k, 10, n, 8000) for k, n in enumerate("abab")
               for r in range(3)]
    assert measured_gaps(events)[8000] == pytest.approx({"a<b<a": 990e-6, "b<a<b": 990e-6})


def test_a_size_named_twice_is_run_once():
    _, args = parse_args(["--sizes", "64KB,256KB,64KB"])
    assert args.sizes == [64000, 256000]


def test_positions_skip_a_gap_across_another_sizes_calls():
    # 64 kB, then 8 kB, then 64 kB again (a trace of a run that named a size twice)
    order = [("a", 64000), ("b", 64000), ("a", 64000), ("a", 8000), ("b", 8000),
             ("b", 64000), ("a", 64000)]
    events = [span(0, 1000 * k, 100, n, size) for k, (n, size) in enumerate(order)]
    gaps = measured_gaps(events)[64000]
    assert all(g == pytest.approx(900e-6) for g in gaps.values())  # no NaN among them


def test_the_beds_traces_are_one_trace_a_process_per_bed():
    trace = {"traceEvents": [{"name": "process_name", "ph": "M", "pid": 0,
                              "args": {"name": "all_reduce benchmark (gloo)"}},
                             span(0, 0, 10, "ring"), span(1, 0, 12, "ring")]}
    merged = beds_trace([trace, trace], "H=2 1000Mbps")["traceEvents"]
    assert [e["pid"] for e in merged] == [0, 0, 0, 1, 1, 1]
    assert [e["args"]["name"] for e in merged if e["ph"] == "M"] == \
        ["bed 0 (H=2 1000Mbps)", "bed 1 (H=2 1000Mbps)"]
    assert trace["traceEvents"][0]["args"]["name"] == "all_reduce benchmark (gloo)"  # not changed


def test_measured_positions_refuse_ranks_that_disagree():
    with pytest.raises(ValueError, match="as many calls"):
        measured_positions([span(0, 0, 10, "a"), span(0, 20, 10, "a"), span(1, 0, 10, "a")])
    with pytest.raises(ValueError, match="disagree"):
        measured_positions([span(0, 0, 10, "a"), span(1, 0, 10, "b")])


def test_predicted_positions_are_the_rotation_whose_medians_the_model_reports():
    net = NetworkInputs.from_calibration(CALIBRATION)
    algorithms = ["ring", "naive", "backend"]
    for hosts, n_bytes in ((4, 64_000), (8, 256_000)):
        got = predicted_positions(algorithms, hosts, n_bytes, net)
        assert len(got) == 9  # each algorithm after three different pairs
        medians = predict_allreduce_stream_s(algorithms, hosts, n_bytes, net)
        for a in algorithms:
            mine = [s for p, s in got.items() if p.startswith(f"{a}<")]
            assert len(mine) == 3
            assert statistics.median(mine) == pytest.approx(medians[a])


@pytest.mark.parametrize("argv, named", [
    (["--beds", "0"], "--beds"),
    (["--hosts", "1"], "--hosts"),
    (["--hosts", "65"], "2 to 64 hosts"),
    (["--bandwidth", "fast"], "bandwidth"),
    (["--sizes", "6B"], "multiples of 4"),
    (["--iters", "2"], "--iters"),
    (["--iters", "2000000"], "got 2000000 and 0"),
    (["--seed", "10000000000000000"], "got 300 and 10000000000000000"),
    (["--calibration", "/nonexistent/calibration.json"], "--calibration"),
])
def test_bad_arguments_are_one_line_and_status_2(argv, named, capsys):
    assert named in usage_error(main, argv, capsys)


def test_a_calibration_without_the_rate_is_one_line_and_status_2(tmp_path, capsys):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps([CALIBRATION]))
    err = usage_error(main, ["--bandwidth", "200Mbps", "--calibration", str(path)], capsys)
    assert "no calibration at 200 Mbit/s (it has 1000 Mbit/s)" in err


def test_the_default_calibration_has_the_default_rate():
    _, args = parse_args([])  # the documented command names neither, so the two must agree
    assert load_calibration(args.calibration, args.bandwidth).rate_bps == args.bandwidth


def test_a_failing_bed_is_one_line_and_status_1(tmp_path, monkeypatch, capsys):
    from experiments import call_positions
    from real.testbed import TestbedError

    def failing(args, net, bed):
        raise TestbedError("bed 0 (H=2 1000Mbps): exit 1: no route to host")

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps([CALIBRATION]))
    monkeypatch.setattr(call_positions, "run_bed", failing)
    assert main(["--hosts", "2", "--calibration", str(path)]) == 1
    assert capsys.readouterr().err == \
        "call_positions: bed 0 (H=2 1000Mbps): exit 1: no route to host\n"


def test_the_beds_finished_before_one_fails_are_kept(tmp_path, monkeypatch, capsys):
    from experiments import call_positions
    from real.testbed import TestbedError

    def bed(args, net, index):
        if index == 1:
            raise TestbedError("bed 1 (H=2 1000Mbps): exit 1: no route to host")
        return ({"64 KB": {"ring<naive<backend": {"measured_s": 2e-3, "predicted_s": 1e-3}}},
                {"results": []}, {"traceEvents": [span(0, 0, 10, "ring")]})

    path, out, trace = (tmp_path / name for name in ("c.json", "p.json", "t.json"))
    path.write_text(json.dumps([CALIBRATION]))
    monkeypatch.setattr(call_positions, "run_bed", bed)
    assert main(["--hosts", "2", "--beds", "3", "--calibration", str(path), "--json", str(out),
                 "--trace", str(trace)]) == 1
    err = capsys.readouterr()
    assert err.err.splitlines() == ["call_positions: bed 1 (H=2 1000Mbps): exit 1: no route to "
                                    "host", "call_positions: 1 of 3 beds finished; their figures "
                                    "follow and are written"]
    assert "ring<naive<backend: 2.000-2.000 ms (1.000-1.000); -50.0%" in err.out
    assert len(json.loads(out.read_text())["beds"]) == 1
    assert [e["pid"] for e in json.loads(trace.read_text())["traceEvents"]] == [0]


def test_measure_calibrates_this_machine_first_and_keeps_the_record(tmp_path, monkeypatch,
                                                                   capsys):
    from experiments import call_positions
    seen = []
    monkeypatch.setattr(call_positions, "calibrate_rate",
                        lambda rate, quick: seen.append((rate, quick)) or dict(CALIBRATION))

    def bed(args, net, index):
        assert net.rate_bps == 1e9  # priced from the record just measured
        return ({"64 KB": {"ring<naive<backend": {"measured_s": 1e-3, "predicted_s": 1e-3}}},
                {}, {"traceEvents": []})

    monkeypatch.setattr(call_positions, "run_bed", bed)
    out = tmp_path / "positions.json"
    assert main(["--hosts", "2", "--beds", "1", "--calibration", "measure",
                 "--json", str(out)]) == 0
    assert seen == [(1e9, True)]
    assert json.loads(out.read_text())["calibration"] == CALIBRATION


@needs_namespaces
def test_one_bed_reports_every_position_measured_and_predicted(tmp_path, capsys):
    path, out = tmp_path / "calibration.json", tmp_path / "positions.json"
    path.write_text(json.dumps([CALIBRATION]))
    trace = tmp_path / "trace.json"
    assert main(["--hosts", "2", "--beds", "1", "--iters", "6", "--probe-up-to", "64KB",
                 "--calibration", str(path), "--json", str(out), "--trace", str(trace)]) == 0
    record = json.loads(out.read_text())
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 2 * 3 * 6  # 2 ranks, 3 algorithms, 6 timed calls each
    rows = record["beds"][0]["64 KB"]
    assert len(record["probes"]) == 1 and record["probes"][0]["results"]
    assert {"ring (median)", "naive (median)", "backend (median)"} <= set(rows)
    assert sum("<" in p for p in rows) == 9
    for row in rows.values():
        # a 64 kB call at 1000 Mbit/s takes well under 50 ms
        assert 0.0 < row["measured_s"] < 0.05 and 0.0 < row["predicted_s"] < 0.05
    for p, row in rows.items():  # the barrier and the loop's work: well under 50 ms (a rank
        # that left the barrier late counts its skew off its gap, which may so fall below 0)
        assert ("<" in p) == ("gap_s" in row)
        assert "<" not in p or abs(row["gap_s"]) < 0.05 and 0.0 < row["gap_predicted_s"] < 0.05
    printed = capsys.readouterr().out
    assert "bed 0, 64 KB: " in printed and "naive<ring<backend: " in printed


def test_the_tools_beds_take_the_placement_asked_for(monkeypatch):
    from experiments import launch_spread, measure
    monkeypatch.setattr(measure, "HOST_CORES", measure.HOST_CORES)  # put back after the test
    for tool_args in (parse_args, launch_spread.parse_args):
        tool_args(["--host-cores", "block"])
        assert measure.testbed_config(8, 1e9).host_cores == "block"
        tool_args([])
        assert measure.testbed_config(8, 1e9).host_cores == "spread"
