"""experiments/core_speed.py: how steadily the machine's cores run; the runner's record of it."""

import json
import os

import pytest

from experiments import core_speed, stage_samples
from experiments.core_speed import main, pinned, summarise, time_windows
from tests.cli_helpers import usage_error


class FakeClock:
    """A clock that only the work moves: each unit of work takes ``unit_s[i]`` (cycling)."""

    def __init__(self, unit_s):
        self.now, self.unit_s, self.done = 0.0, unit_s, 0

    def __call__(self):
        return self.now

    def work(self):
        self.now += self.unit_s[self.done % len(self.unit_s)]
        self.done += 1


def test_windows_count_the_work_each_window_held():
    clock = FakeClock([1 / 64])  # binary fractions: the sums are exact
    windows = time_windows(0.25, 4 / 64, clock=clock, work=clock.work)
    assert windows == [(0.0, 64.0), (0.0625, 64.0), (0.125, 64.0), (0.1875, 64.0)]
    slower = FakeClock([1 / 64, 1 / 64, 1 / 64, 1 / 64, 1 / 32, 1 / 32])  # 4 units, then 2
    assert [s for _, s in time_windows(0.25, 4 / 64, clock=slower, work=slower.work)] == [
        64.0, 32.0, 64.0, 32.0]


def test_a_slower_stretch_shows_as_slow_windows_and_their_longest_run():
    # 20 windows: 16 at full speed, a run of three at half speed and one alone at 0.8
    speeds = [100.0] * 5 + [50.0] * 3 + [100.0] * 6 + [80.0] + [100.0] * 5
    figures = summarise(speeds, 0.05)
    assert figures["windows"] == 20
    assert figures["slow_share"] == pytest.approx(4 / 20)      # 0.5 x3 and 0.8 are under 0.85
    assert figures["longest_slow_s"] == pytest.approx(0.15)     # the three in a row
    assert figures["p10"] == pytest.approx(0.5)                 # the 3rd slowest of 20
    assert figures["median"] == pytest.approx(1.0)
    assert figures["slowest"] == pytest.approx(0.5)
    assert figures["fastest_units_per_s"] == figures["median_units_per_s"] == 100.0
    steady = summarise([100.0] * 10, 0.05)
    assert steady["p10"] == steady["median"] == 1.0 and steady["slow_share"] == 0.0
    assert steady["longest_slow_s"] == 0.0
    with pytest.raises(ValueError):
        summarise([], 0.05)


def test_one_outlier_fast_window_does_not_set_the_fastest():
    figures = summarise([100.0] * 19 + [400.0], 0.05)  # one window 4x fast (a clock glitch)
    assert figures["median"] == pytest.approx(1.0) and figures["slow_share"] == 0.0


def test_pinned_runs_on_the_core_and_gives_back_the_cores_it_had():
    before = os.sched_getaffinity(0)
    core = min(before)
    with pinned(core):
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), pinned(core):
        raise RuntimeError("the body failed")
    assert os.sched_getaffinity(0) == before


def test_the_cli_times_each_core_and_writes_every_window(tmp_path, capsys):
    out, trace = tmp_path / "speed.json", tmp_path / "trace.json"
    core = min(os.sched_getaffinity(0))
    assert main(["--cores", str(core), "--seconds", "300ms", "--window", "20ms", "--json", str(out),
                 "--trace", str(trace)]) == 0
    assert capsys.readouterr().out.startswith(f"core {core}: ")
    record = json.loads(out.read_text())
    assert record["window_s"] == 0.02 and record["seconds"] == 0.3
    (only,) = record["cores"]
    assert only["core"] == core and only["windows"] == len(only["windows_s"]) >= 10
    assert all(speed > 0 for _, speed in only["windows_s"])
    assert 0 < only["slowest"] <= only["p10"] <= only["median"] and 0 <= only["slow_share"] <= 1
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == only["windows"] and all(e["args"]["units_per_s"] > 0 for e in spans)


@pytest.mark.parametrize("argv, words", [
    (["--cores", "99999"], "core 99999 is not one"),
    (["--cores", "x"], "not a core number"),
    (["--window", "1ms"], "--window <= --seconds"),
    (["--seconds", "2s", "--window", "3s"], "--window <= --seconds"),
    (["--seconds", "11min"], "--seconds <= 600 s"),
    (["--seconds", "soon"], "not a time"),
    (["--json", "/nonexistent-dir/x.json"], "cannot write into"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    assert words in usage_error(main, argv, capsys)


def test_the_runner_records_each_stages_core_speed_and_its_report_says_so(monkeypatch):
    calls = []

    def fake_sample(cores, seconds, window_s):
        calls.append((cores, seconds, window_s))
        return [{"core": c, "p10": 0.71234, "median": 0.95, "slow_share": 0.25, "windows": 30,
                 "longest_slow_s": 0.2, "fastest_units_per_s": 9000.4,
                 "median_units_per_s": 8000.6, "windows_s": []} for c in cores]

    monkeypatch.setattr(core_speed, "sample_cores", fake_sample)
    meta = {}
    stage_samples.note_core_speed(meta, "sync")
    cores = sorted(os.sched_getaffinity(0))[:stage_samples.CORE_SPEED_MAX_CORES]
    assert calls == [(cores, stage_samples.CORE_SPEED_SECONDS, stage_samples.CORE_SPEED_WINDOW_S)]
    assert meta == {"core_speed": {"sync": [{"core": c, "p10": 0.712, "median": 0.95,
                                             "slow_share": 0.25, "median_units_per_s": 8001}
                                            for c in cores]},
                    "core_speed_sampling": {"seconds": stage_samples.CORE_SPEED_SECONDS,
                                            "window_s": stage_samples.CORE_SPEED_WINDOW_S}}
    meta["core_speed"]["async"] = [{"core": 0, "p10": 0.9, "median": 1.0, "slow_share": 0.05,
                                    "median_units_per_s": 9500}]
    note = stage_samples.core_speed_note(meta)
    assert "0.71–0.90 of its fastest" in note and "5%–25%" in note
    assert note.endswith("its median speed 8,001–9,500 units of work a second.")
    meta["core_speed_sampling"] = {"seconds": 2.0, "window_s": 0.1}  # as the run kept it
    assert "for 2 s in 100 ms windows" in stage_samples.core_speed_note(meta)
    del meta["core_speed_sampling"]  # a run stored before it was kept: today's constants
    assert (f"for {stage_samples.CORE_SPEED_SECONDS:g} s in {stage_samples.CORE_SPEED_WINDOW_S * 1e3:g} ms windows"
            in stage_samples.core_speed_note(meta))
    for stage in meta["core_speed"].values():  # a run stored before the speeds were kept
        for record in stage:
            del record["median_units_per_s"]
    assert stage_samples.core_speed_note(meta).endswith("(an idle, steady core: about 1.0 and 0%).")
    assert stage_samples.core_speed_note({}) == stage_samples.core_speed_note({"core_speed": {}}) == ""
