"""experiments/launch_spread.py: gaps read from a benchmark trace, its CLI, and a run on a bed."""

import json

import pytest

from experiments.launch_spread import main, probe_figures, range_line, trace_gaps
from tests.bed_helpers import needs_namespaces
from tests.cli_helpers import usage_error


def span(rank, start_us, dur_us, n_bytes):
    return {"ph": "X", "tid": rank, "ts": start_us, "dur": dur_us, "args": {"bytes": n_bytes}}


def test_trace_gaps_are_start_to_start_less_the_slowest_ranks_call():
    events = [{"ph": "M", "name": "thread_name", "tid": 0},
              # size 4: three calls; rank 1's second call is the slower one
              span(0, 0, 100, 4), span(1, 5, 90, 4),
              span(0, 200, 100, 4), span(1, 205, 150, 4),
              span(0, 500, 100, 4), span(1, 505, 90, 4),
              # size 64000: two calls, after the untimed check that separates the sizes
              span(0, 2000, 400, 64000), span(1, 2010, 380, 64000),
              span(0, 2500, 400, 64000), span(1, 2510, 380, 64000)]
    gaps = trace_gaps(events)
    assert gaps[4] == pytest.approx([100e-6, 150e-6])  # 200 - 100, 300 - 150
    assert gaps[64000] == pytest.approx([100e-6])      # 500 - 400; no gap across the sizes
    assert set(gaps) == {4, 64000}


def test_trace_gaps_refuse_a_trace_whose_ranks_disagree():
    with pytest.raises(ValueError, match="rank 0"):
        trace_gaps([span(0, 0, 10, 4), span(0, 20, 10, 4), span(1, 0, 10, 4)])
    with pytest.raises(ValueError, match="rank 0"):
        trace_gaps([span(1, 0, 10, 4)])


def test_probe_figures_are_medians_of_each_drivers_chain_ends_and_of_the_gaps():
    record = {"results": [{"bytes": 64, "ends_chains_s": [[0.1, 0.2], [0.1, 0.4], [0.1, 0.3]]}],
              "engine_results": [{"bytes": 64, "ends_chains_s": [[0.5], [0.7]]}],
              "stream_gap_s": [1e-4, 3e-4, 2e-4]}
    figures = probe_figures(record)
    assert figures == pytest.approx({"python 64 B": 0.3, "engine 64 B": 0.6, "probe gap": 2e-4})
    # and with sized streams, each size's median gap
    sized = [{"bytes": 64000, "calls": "whole", "gaps_s": [3e-4, 1e-4, 2e-4, 9e-4]}]
    assert probe_figures({**record, "sized_stream_gaps": sized})["probe gap 64 KB"] == \
        pytest.approx(2.5e-4)


def test_a_range_is_a_ratio_only_where_every_launchs_figure_is_positive():
    # a gap at or under zero (start to start less the slowest call) gave a negative ratio, or
    # ZeroDivisionError
    assert range_line("probe gap", [0.2, 0.1, 0.4]) == \
        "probe gap: 0.100 to 0.400 ms (median 0.200, max/min 4.00)"
    assert range_line("benchmark gap 64 kB", [-0.05, 0.0, 0.1]) == \
        "benchmark gap 64 kB: -0.050 to 0.100 ms (median 0.000, max − min 0.150 ms)"


@pytest.mark.parametrize("argv, named", [
    (["--launches", "1"], "--launches"),
    (["--hosts", "1"], "--hosts"),
    (["--hosts", "65"], "2 to 64 hosts"),
    (["--bandwidth", "fast"], "bandwidth"),
    (["--sizes", "6B"], "multiples of 4"),
    (["--benchmark", "64KB,x"], "x"),
    (["--stream-gaps", "1"], "--stream-gaps"),
    (["--stream-gaps", "1000000"], "1000000 and 0"),
    (["--iters", "2000000"], "2000000,"),
    (["--repeats", "5000"], "got 5000,"),
    (["--seed", "10000000000000000"], "and 10000000000000000"),
    (["--gap-sizes", "6B"], "multiples of 4"),
    (["--gap-sizes", "64KB", "--gap-calls", "some"], "--gap-calls"),
    (["--gap-sizes", "1e15B"], "at most"),
    (["--gap-calls", "element"], "--gap-calls needs --gap-sizes"),
])
def test_bad_arguments_are_one_line_and_status_2(argv, named, capsys):
    assert named in usage_error(main, argv, capsys)


def test_each_launchs_probe_runs_its_sizes_in_the_order_asked_for(tmp_path):
    from experiments.launch_spread import launch_commands, parse_args
    for argv, order in (([], "blocks"), (["--probe-order", "interleaved"], "interleaved")):
        _, args = parse_args(["--hosts", "2", "--sizes", "64B", *argv])
        (what, probe), = launch_commands(args, tmp_path, 0)
        words = probe.split()
        assert what == "probe" and words[words.index("--order") + 1] == order
        assert "--gap-sizes" not in words  # none asked for
    # sized streams where asked for, their calls as asked for (whole by default)
    for argv, calls in (([], "whole"), (["--gap-calls", "element"], "element")):
        _, args = parse_args(["--hosts", "2", "--gap-sizes", "64KB,1MB", *argv])
        (_, probe), = launch_commands(args, tmp_path, 0)
        words = probe.split()
        assert words[words.index("--gap-sizes") + 1] == "64000B,1000000B"
        assert words[words.index("--gap-calls") + 1] == calls


@needs_namespaces
def test_two_launches_on_one_bed_report_the_probes_and_the_benchmarks_gaps(tmp_path, capsys):
    out = tmp_path / "spread.json"
    assert main(["--hosts", "2", "--bandwidth", "1000Mbps", "--launches", "2", "--sizes", "64B",
                 "--repeats", "2", "--stream-gaps", "20", "--benchmark", "64KB", "--iters", "4",
                 "--json", str(out)]) == 0
    launches = json.loads(out.read_text())["launches"]
    assert len(launches) == 2
    for figures in launches:
        assert {"python 64 B", "engine 64 B", "ring 64 B", "probe gap", "ring 64 KB",
                "naive 64 KB", "backend 64 KB", "benchmark gap 64 KB"} <= set(figures)
        # a 64 kB call at 1000 Mbit/s, and the gap before one, take well under 50 ms
        assert 0.0 < figures["backend 64 KB"] < 0.05
        assert 0.0 < figures["benchmark gap 64 KB"] < 0.05
    printed = capsys.readouterr().out
    assert "launch 0:" in printed and "launch 1:" in printed and "benchmark gap 64 KB:" in printed


def test_killed_it_unwinds_as_when_interrupted_so_its_test_bed_comes_down(monkeypatch, capsys):
    import os
    import signal
    import time
    from experiments import launch_spread
    unwound = []

    def killed(args):  # `kill` while the test bed is up
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            unwound.append(True)  # where the test bed's `with` tears it down

    monkeypatch.setattr(launch_spread, "run_launches", killed)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["--launches", "2"]) == 130
    assert unwound == [True]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted (SIGTERM)" in err
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_failing_launch_is_one_line_and_status_1(monkeypatch, capsys):
    from experiments import launch_spread
    from real.testbed import TestbedError

    def failing(args):
        raise TestbedError("launch 0: the probe failed: no route to host")

    monkeypatch.setattr(launch_spread, "run_launches", failing)
    assert main(["--launches", "2"]) == 1
    err = capsys.readouterr().err
    assert err == "launch_spread: launch 0: the probe failed: no route to host\n"
