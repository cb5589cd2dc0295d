"""The runner's timeline (``--trace``) and summary (``--json``): spans nest, an error inside one
marks it, and the trace is written however a measuring run ends. No test bed: the measuring is
stood in for, so this runs without root."""

from __future__ import annotations

import json

import pytest

from real.testbed import timeline


def spans(trace: dict) -> dict[str, dict]:
    return {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}


def test_spans_nest_and_an_error_marks_the_span_it_left():
    assert not timeline.recording()
    with timeline.span("not recorded"):
        pass
    assert timeline.stop() is None  # never started: nothing kept
    timeline.start("test")
    try:
        with timeline.span("outer", "stage", rate=200):
            with timeline.span("inner"):
                pass
            with pytest.raises(KeyError), timeline.span("failed"):
                raise KeyError("x")
    finally:
        trace = timeline.stop()
    assert not timeline.recording()
    found = spans(trace.to_json())
    assert set(found) == {"outer", "inner", "failed"}
    outer, inner, failed = found["outer"], found["inner"], found["failed"]
    assert outer["args"] == {"rate": 200} and outer["cat"] == "stage"
    assert failed["args"] == {"ended": "by KeyError"} and "args" not in inner
    for event in (inner, failed):
        assert outer["ts"] <= event["ts"] and event["ts"] + event["dur"] <= outer["ts"] + outer["dur"]
    assert inner["ts"] + inner["dur"] <= failed["ts"]


@pytest.fixture
def stood_in(monkeypatch, tmp_path):
    """run.main with the test bed, the C++ build and the report stood in for; ``measure_all``
    set per test (``stood_in.measure_all = ...``)."""
    import real.testbed
    from experiments import engine_rounds, run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    monkeypatch.setattr(real.testbed, "unavailable_reason", lambda: None)
    monkeypatch.setattr(engine_rounds, "load", lambda: None)
    monkeypatch.setattr(run, "load_results", lambda names: [])
    monkeypatch.setattr(run, "regenerate", lambda results, meta: {
        "rows": 1, "median_abs_error": 0.01, "worst_abs_error": 0.02, "worst_config": "c",
        "meets_target": True})

    def measure_all(args, meta):
        meta.update(finished=[])
        with timeline.span("experiment stood in", "experiment"):
            pass
    monkeypatch.setattr(run, "measure_all", measure_all)
    return run


def test_a_measuring_run_writes_its_trace_and_its_summary(stood_in, tmp_path, capsys):
    trace_path, json_path = tmp_path / "trace.json", tmp_path / "summary.json"
    assert stood_in.main(["multinode", "--out", str(tmp_path / "out"), "--trace", str(trace_path),
                          "--json", str(json_path)]) == 0
    found = spans(json.loads(trace_path.read_text()))
    assert {"build the C++ ring rounds", "experiment stood in", "report"} <= set(found)
    summary = json.loads(json_path.read_text())
    assert summary["rows"] == 1 and summary["wall_s"] >= summary["build_s"] >= 0
    run_json = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run_json["wall_s"] == summary["wall_s"] and run_json["build_s"] == summary["build_s"]
    assert not stood_in.timeline.recording()


@pytest.mark.parametrize("failure, status", [("testbed", 1), ("interrupt", 130),
                                             ("bug", None)])
def test_a_run_that_fails_still_writes_its_trace_and_no_summary(stood_in, tmp_path, capsys,
                                                                failure, status):
    from real.testbed import TestbedError

    def measure_all(args, meta):
        with timeline.span("the bed that failed"):
            raise {"testbed": TestbedError("a host failed"), "interrupt": KeyboardInterrupt(),
                   "bug": ZeroDivisionError("a bug")}[failure]
    stood_in.measure_all = measure_all
    trace_path, json_path = tmp_path / "trace.json", tmp_path / "summary.json"
    argv = ["multinode", "--out", str(tmp_path / "out"), "--trace", str(trace_path),
            "--json", str(json_path)]
    if status is None:  # a bug keeps its traceback; the timeline up to it is still written
        with pytest.raises(ZeroDivisionError):
            stood_in.main(argv)
    else:
        assert stood_in.main(argv) == status
    failed = spans(json.loads(trace_path.read_text()))["the bed that failed"]
    assert failed["args"]["ended"].startswith("by ")
    assert not json_path.exists()
    assert not stood_in.timeline.recording()


def test_a_trace_that_cannot_be_written_is_one_line_and_status_1_the_summary_kept(
        stood_in, tmp_path, capsys):
    gone = tmp_path / "gone"
    gone.mkdir()

    def measure_all(args, meta):
        gone.rmdir()  # the trace's folder goes while the run measures
    stood_in.measure_all = measure_all
    json_path = tmp_path / "summary.json"
    assert stood_in.main(["multinode", "--out", str(tmp_path / "out"), "--trace",
                          str(gone / "trace.json"), "--json", str(json_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace" in err
    assert json.loads(json_path.read_text())["rows"] == 1


@pytest.mark.parametrize("flag", ["--json", "--trace"])
def test_json_and_trace_may_not_name_one_of_the_runs_own_outputs(stood_in, tmp_path, capsys,
                                                                  flag):
    out = tmp_path / "out"
    out.mkdir()
    assert stood_in.main(["multinode", "--out", str(out), flag, str(out / "run.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one of the run's own outputs" in err
    assert not (out / "run.json").exists()


@pytest.mark.parametrize("argv", [["--report-only"], ["--repredict", "sync"], ["multinode"]])
@pytest.mark.parametrize("kept", ["allreduce.json", "sync.png", "run.json", "RESULTS.md"])
def test_json_may_not_name_a_file_the_results_folder_keeps(stood_in, tmp_path, capsys, argv,
                                                           kept):
    # --report-only and --repredict read the folder's files, and a run of one experiment keeps
    # the others': their --json once wrote its summary over a stored result and lost it.
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text("{}")
    (out / kept).write_text("stored")
    assert stood_in.main([*argv, "--out", str(out), "--json", str(out / kept)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one of the run's own outputs" in err
    assert (out / kept).read_text() == "stored"


def test_a_seed_past_the_benchmarks_largest_is_refused_before_any_work(capsys):
    from experiments import run
    from real.allreduce import MAX_SEED
    from tests.cli_helpers import usage_error
    assert run.BENCHMARK_MAX_SEED == MAX_SEED
    err = usage_error(run.main, ["--seed", str(MAX_SEED + 1), "allreduce"], capsys)
    assert f"--seed must be a whole number from 0 to {MAX_SEED:,}" in err
    assert run.parse_args(["--seed", str(MAX_SEED), "allreduce"]).seed == MAX_SEED


def test_the_reports_run_time_says_how_much_of_it_was_the_build():
    from experiments.run_header import run_time
    assert run_time({"wall_s": 600.0, "build_s": 33.4}) == \
        "in 10.0 min (33 s of it building the C++ ring rounds)"
    assert run_time({"wall_s": 600.0, "build_s": 0.2}) == "in 10.0 min"  # kept from before
    assert run_time({"wall_s": 600.0}) == "in 10.0 min"  # a grid stored before build_s


@pytest.mark.parametrize("seed", [-1, "7", True, 2**53 + 1])
def test_repredict_of_a_run_json_with_a_bad_seed_is_one_line_and_status_2(tmp_path, capsys,
                                                                          monkeypatch, seed):
    from experiments import measure, run
    monkeypatch.setattr(run, "RESULTS", run.RESULTS)  # main() rebinds them for --out
    monkeypatch.setattr(run, "REPORT", run.REPORT)
    (tmp_path / "run.json").write_text(json.dumps({"calibration": [], "seed": seed}))
    assert run.main(["--repredict", "sync", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad run.json" in err and "its --seed must be" in err
    assert measure.SEED is None
