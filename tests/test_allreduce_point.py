"""experiments/allreduce_point.py: the probe, the benchmark and the probe again in one launch."""

import json
import statistics

import pytest

from experiments.allreduce_point import main
from experiments.measure import bracket
from tests.dist_helpers import run_script


def test_one_launch_writes_the_benchmarks_rows_between_two_probe_records(tmp_path):
    out, trace = tmp_path / "point.json", tmp_path / "trace.json"
    run = run_script(["experiments/allreduce_point.py", "--sizes", "64KB,256KB", "--iters", "3,2",
                      "--algorithms", "ring,backend", "--probe-sizes", "64B,16KiB",
                      "--repeats", "1", "--rounds", "2", "--ring-rounds", "--stream-gaps", "5",
                      "--json", str(out), "--trace", str(trace)], 2, timeout_s=180)
    assert run.returncode == 0, run.stderr
    point = json.loads(out.read_text())
    assert [(r["algorithm"], r["bytes"]) for r in point["results"]] == [
        ("ring", 64000), ("backend", 64000), ("ring", 256000), ("backend", 256000)]
    assert all(r["time_s"] > 0 and r["world_size"] == 2 for r in point["results"])
    assert point["iterations"] == [3, 2] and point["warmup"] == 1
    for side in ("rounds_before", "rounds_after"):
        record = point[side]
        assert record["world_size"] == 2 and record["rounds"] == 2
        assert [r["bytes"] for r in record["results"]] == [64, 16384]
        assert [r["bytes"] for r in record["ring_results"]] == [64, 16384]
        assert [r["bytes"] for r in record["engine_results"]] == [64, 16384]
        assert len(record["stream_gap_s"]) == 4 and statistics.median(record["stream_gap_s"]) > 0
    # the two records bracket as two launches' do
    table = bracket(point["rounds_before"], point["rounds_after"])
    assert len(table["stream_gap_s"]) == 8 and len(table["engine_results"]) == 2
    # the trace holds every timed call of both ranks: 3 + 2 iterations of 2 algorithms each
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert len(spans) == 2 * (3 + 2) * 2


@pytest.mark.parametrize("argv, named", [
    (["--sizes", "64KB,1MB", "--iters", "3,2,1", "--probe-sizes", "64B"], "3 counts for 2 sizes"),
    (["--sizes", "64KB", "--iters", "0", "--probe-sizes", "64B"], "--iters"),
    (["--sizes", "64KB", "--iters", "x", "--probe-sizes", "64B"], "'x'"),
    (["--sizes", "64KB", "--algorithms", "tree", "--probe-sizes", "64B"], "'tree'"),
    (["--sizes", "6B", "--probe-sizes", "64B"], "6 bytes"),
    (["--sizes", "64KB", "--probe-sizes", "6B"], "6 bytes"),
    (["--sizes", "64KB", "--probe-sizes", "64B", "--stream-gaps", "1"], "got 1"),
    (["--sizes", "64KB", "--probe-sizes", "64B", "--backend", "mpi"], "--engine-rounds"),
    (["--probe-sizes", "64B"], "--sizes"),
])
def test_bad_flags_are_one_line_and_status_2(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0]
