"""experiments/grids.py: stored grids' rows pooled by kind, its table and its CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.grids import (ALL, GridError, allreduce_kind, biases, core_samples,
                               experiment_speed_leans, experiment_speed_markdown, grid_rows,
                               main, misses, pooled,
                               spearman, speed_leans, stage_core_speed, stage_units_per_s,
                               summarise_kinds)
from tests.cli_helpers import usage_error


def allreduce_row(config, n_bytes, hosts, mbit, predicted, measured):
    return {"config": config, "algorithm": config.split()[0], "bytes": n_bytes, "hosts": hosts,
            "bandwidth_bps": mbit * 1e6, "predicted_s": predicted, "measured_s": measured}


def write_grid(folder, allreduce_rows, other_rows=()):
    """A folder as experiments/run.py --out writes it: fidelity.json, and allreduce.json."""
    folder.mkdir()
    rows = [{"experiment": "allreduce", "config": r["config"], "predicted_s": r["predicted_s"],
             "measured_s": r["measured_s"],
             "error": (r["predicted_s"] - r["measured_s"]) / r["measured_s"]}
            for r in allreduce_rows]
    rows += [{"experiment": name, "config": name, "predicted_s": p, "measured_s": m,
              "error": (p - m) / m} for name, p, m in other_rows]
    (folder / "fidelity.json").write_text(json.dumps(rows))
    (folder / "allreduce.json").write_text(json.dumps({"rows": list(allreduce_rows)}))
    return folder


@pytest.mark.parametrize("n_bytes, hosts, mbit, kind", [
    (4_000_000, 8, 1000, "allreduce, 1 MB and more"),
    (1_000_000, 2, 50, "allreduce, 1 MB and more"),
    (64_000, 8, 50, "allreduce under 1 MB, 50 Mbit/s"),
    (256_000, 2, 1000, "allreduce under 1 MB, 2 hosts, 200 and 1000 Mbit/s"),
    (64_000, 2, 200, "allreduce under 1 MB, 2 hosts, 200 and 1000 Mbit/s"),
    (64_000, 4, 1000, "allreduce under 1 MB, 4 hosts, 1000 Mbit/s"),
    (256_000, 8, 200, "allreduce under 1 MB, 8 hosts, 200 Mbit/s"),
])
def test_allreduce_rows_sort_by_size_then_rate_then_hosts(n_bytes, hosts, mbit, kind):
    assert allreduce_kind({"bytes": n_bytes, "hosts": hosts, "bandwidth_bps": mbit * 1e6}) == kind


def test_kinds_pool_every_grid_and_count_the_rows_over_the_target(tmp_path):
    small = "allreduce under 1 MB, 8 hosts, 1000 Mbit/s"
    one = write_grid(tmp_path / "one", [
        allreduce_row("ring 4MB H=8 1000Mbps", 4_000_000, 8, 1000, 1.01, 1.00),   # +1%
        allreduce_row("ring 0.064MB H=8 1000Mbps", 64_000, 8, 1000, 1.20, 1.00),  # +20%
    ], [("sync", 0.97, 1.00)])                                                  # -3%
    two = write_grid(tmp_path / "two", [
        allreduce_row("ring 4MB H=8 1000Mbps", 4_000_000, 8, 1000, 0.98, 1.00),   # -2%
        allreduce_row("ring 0.064MB H=8 1000Mbps", 64_000, 8, 1000, 0.95, 1.00),  # -5%
    ], [("sync", 1.00, 1.00)])
    grids = {"one": grid_rows(one), "two": grid_rows(two)}
    kinds = {k["kind"]: k for k in summarise_kinds(grids)}
    assert list(kinds) == ["allreduce, 1 MB and more", small, "sync", ALL]
    assert kinds[small]["rows"] == 2 and kinds[small]["grids"] == 2
    assert kinds[small]["median_abs_error"] == pytest.approx(0.125)
    assert kinds[small]["worst_abs_error_min"] == pytest.approx(0.05)
    assert kinds[small]["worst_abs_error_max"] == pytest.approx(0.20)
    assert kinds[small]["over_target"] == 1
    assert kinds["allreduce, 1 MB and more"]["over_target"] == 0
    assert kinds["sync"]["median_abs_error"] == pytest.approx(0.015)
    assert kinds[ALL]["rows"] == 6 and kinds[ALL]["over_target"] == 1
    assert kinds[ALL]["worst_abs_error_min"] == pytest.approx(0.05)
    assert misses(grids) == [{"experiment": "allreduce", "config": "ring 0.064MB H=8 1000Mbps",
                              "grids": 2, "errors": [pytest.approx(0.20)]}]


def test_a_kind_that_only_some_grids_hold_counts_only_those(tmp_path):
    one = write_grid(tmp_path / "one", [], [("async", 1.1, 1.0)])
    two = write_grid(tmp_path / "two", [], [("sync", 1.0, 1.0)])
    kinds = {k["kind"]: k for k in summarise_kinds({"a": grid_rows(one), "b": grid_rows(two)})}
    assert kinds["async"]["grids"] == 1 and kinds["sync"]["grids"] == 1
    assert kinds[ALL]["grids"] == 2


def test_cli_prints_a_markdown_table_and_writes_the_figures(tmp_path, capsys):
    grid = write_grid(tmp_path / "g", [
        allreduce_row("naive 0.064MB H=4 1000Mbps", 64_000, 4, 1000, 1.1, 1.0)])
    out = tmp_path / "kinds.json"
    assert main([str(grid), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| allreduce under 1 MB, 4 hosts, 1000 Mbit/s | 1 | 1 | 10.0% | 10.0% to 10.0% " \
           "| 1 of 1 |" in table
    assert "1 rows over 8% in some grid:\n- allreduce: naive 0.064MB H=4 1000Mbps: 1 of 1 " \
           "grids (+10.0%)" in table
    written = json.loads(out.read_text())
    assert written["grids"] == [str(grid)] and written["kinds"][0]["over_target"] == 1
    assert written["misses"][0]["config"] == "naive 0.064MB H=4 1000Mbps"


def test_cli_into_a_closed_pipe_ends_quietly_and_still_writes_the_figures(tmp_path):
    grid = write_grid(tmp_path / "g", [
        allreduce_row("naive 0.064MB H=4 1000Mbps", 64_000, 4, 1000, 1.1, 1.0)])
    out = tmp_path / "kinds.json"
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` leaves it once it has its lines
    try:
        done = subprocess.run([sys.executable, "-m", "experiments.grids", str(grid),
                               "--json", str(out)], cwd=Path(__file__).resolve().parent.parent,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 1 and done.stderr == ""
    assert json.loads(out.read_text())["kinds"][0]["over_target"] == 1


def test_cli_refuses_a_folder_that_is_not_a_grid_on_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no fidelity.json" in err


def test_cli_refuses_rows_missing_from_allreduce_json(tmp_path, capsys):
    grid = write_grid(tmp_path / "g", [
        allreduce_row("ring 4MB H=2 50Mbps", 4_000_000, 2, 50, 1.0, 1.0)])
    (grid / "allreduce.json").write_text(json.dumps({"rows": []}))
    assert main([str(grid)]) == 2
    assert "not in allreduce.json" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    ("{not json", "not JSON"),
    ("[" * 200_000, "not JSON (nested too deep to read"),
    ('[{"experiment": "sync", "config": "x", "error": 0.1, "predicted_s": 1' + "0" * 400 + "}]",
     "not JSON (an integer of 401 digits, too large for a float"),
    ("[1" + "0" * 5000 + "]", "not JSON (an integer of 5001 digits, too large for a float"),
    (json.dumps([{"experiment": "sync"}]), "expected a list of rows"),
    (json.dumps([{"experiment": ["sync"], "config": "x", "error": 0.1}]), "expected a list of rows"),
    (json.dumps([{"experiment": "sync", "config": {"x": 1}, "error": 0.1}]), "expected a list of rows"),
    (json.dumps([{"experiment": "sync", "config": "x", "error": None}]), "an error from -1"),
    (json.dumps([{"experiment": "sync", "config": "x", "error": "big"}]), "an error from -1"),
    (json.dumps([{"experiment": "sync", "config": "x", "error": 1e308}]), "to 1e6"),
    (json.dumps([{"experiment": "sync", "config": "x", "error": 0.1, "predicted_s": 1.1,
                  "measured_s": -1.0}]), "positive times"),
    ("[]", "hold no rows"),
])
def test_cli_refuses_a_fidelity_file_without_rows_on_one_line(tmp_path, capsys, text, message):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "fidelity.json").write_text(text)
    assert main([str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_cli_refuses_an_unreadable_fidelity_file_on_one_line(tmp_path, capsys):
    (tmp_path / "dir" / "fidelity.json").mkdir(parents=True)
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "fidelity.json").write_bytes(b"[\xff]")
    (tmp_path / "file").write_text("")
    for folder in ("dir", "latin", "file"):
        assert main([str(tmp_path / folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot read it" in err, folder


def test_cli_refuses_a_folder_named_twice(tmp_path, capsys, monkeypatch):
    grid = write_grid(tmp_path / "g", [], [("sync", 1.0, 1.0)])
    assert "named twice" in usage_error(main, [str(grid), str(grid)], capsys)
    monkeypatch.chdir(tmp_path)  # the same folder spelled two ways
    assert "named twice" in usage_error(main, ["g", str(grid)], capsys)


@pytest.mark.parametrize("name", ["run.json", "sync.json", "RESULTS.md", "kinds.json",
                                  "sub/kinds.json", "-"])
def test_cli_refuses_a_json_anywhere_in_a_grid_it_reads_and_leaves_the_grid_whole(
        tmp_path, capsys, name):
    """Only fidelity.json and allreduce.json (and run.json with --core-speed) were kept safe:
    ``--json GRID/run.json`` overwrote the stored grid's run record, status 0."""
    grid = write_grid(tmp_path / "g", [], [("sync", 1.0, 1.0)])
    (grid / "sub").mkdir()
    for stored in ("run.json", "sync.json", "RESULTS.md"):
        (grid / stored).write_text('{"kept": true}\n')
    before = {p: p.read_bytes() for p in grid.rglob("*") if p.is_file()}
    other = write_grid(tmp_path / "other", [], [("sync", 1.0, 1.0)])
    out = str(grid / name) if name != "-" else "-"
    message = usage_error(main, [str(other), str(grid), "--json", out], capsys)
    expected = ("this command writes files, not stdout" if name == "-" else
                f"--json {out!r} is inside the grid {grid}, which this run reads")
    assert "error: " in message and expected in message
    assert {p: p.read_bytes() for p in grid.rglob("*") if p.is_file()} == before


def test_cli_refuses_a_json_link_into_a_grid(tmp_path, capsys):
    grid = write_grid(tmp_path / "g", [], [("sync", 1.0, 1.0)])
    (grid / "run.json").write_text('{"kept": true}\n')
    (tmp_path / "out.json").symlink_to(grid / "run.json")  # written through: its target
    assert "inside the grid" in usage_error(main, [str(grid), "--json",
                                                   str(tmp_path / "out.json")], capsys)
    assert (grid / "run.json").read_text() == '{"kept": true}\n'


def test_a_row_on_one_side_in_every_grid_is_a_bias_and_one_on_both_sides_is_not(tmp_path):
    grids = {}
    for i in range(5):
        noisy = 1.10 if i % 2 else 0.90  # misses by 10% on both sides: the noise
        steady = 1.05 + 0.001 * i  # 5.0-5.4% over, every time: the model
        small = 1.01  # over every time, but within the median target
        grids[str(i)] = grid_rows(write_grid(tmp_path / str(i), [], [
            ("noisy", noisy, 1.0), ("steady", steady, 1.0), ("small", small, 1.0)]))
    found = biases(grids)
    assert [b["config"] for b in found] == ["steady"]
    assert found[0]["grids"] == 5 and found[0]["mean_error"] == pytest.approx(0.052)
    assert biases(grids, min_grids=6) == []  # too few grids to tell


def test_cli_prints_a_named_row_in_every_grid_that_holds_it(tmp_path, capsys):
    one = write_grid(tmp_path / "one", [
        allreduce_row("ring 1MB H=2 200Mbps", 1_000_000, 2, 200, 0.0420, 0.0415)])
    two = write_grid(tmp_path / "two", [
        allreduce_row("ring 1MB H=2 200Mbps", 1_000_000, 2, 200, 0.0421, 0.0467)],
        [("sync", 1.0, 1.0)])
    out = tmp_path / "rows.json"
    assert main([str(one), str(two), "--row", "allreduce: ring 1MB H=2 200Mbps",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert ("allreduce: ring 1MB H=2 200Mbps, in 2 grids: priced 42.000-42.100 ms, "
            "measured 41.500-46.700 ms\n"
            f"- {one}: priced 42.000 ms, measured 41.500 ms, +1.2%\n"
            f"- {two}: priced 42.100 ms, measured 46.700 ms, -9.9%") in text
    history = json.loads(out.read_text())["rows"]["allreduce: ring 1MB H=2 200Mbps"]
    assert [h["grid"] for h in history] == [str(one), str(two)]
    assert history[1]["measured_s"] == pytest.approx(0.0467)


def test_cli_refuses_a_row_no_grid_holds_on_one_line(tmp_path, capsys):
    grid = write_grid(tmp_path / "g", [], [("sync", 1.0, 1.0)])
    assert main([str(grid), "--row", "sync"]) == 2  # named without its experiment
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "no grid holds the row 'sync'" in captured.err
    assert captured.out == ""
    assert main([str(grid), "--row", "sync: sync"]) == 0


def with_core_speed(folder, medians, stage="allreduce"):
    """``folder``'s run.json holding each core's median speed sampled before ``stage``."""
    (folder / "run.json").write_text(json.dumps({"core_speed": {stage: [
        {"core": i, "median": m} for i, m in enumerate(medians)]}}))
    return folder


def test_spearman_ranks_ties_together_and_refuses_what_cannot_correlate():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 1, 0, -5]) == pytest.approx(-1.0)
    # ties share their mean rank: ranks (1.5, 1.5, 3) against (1, 2, 3)
    assert spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(1.5 / (1.5 * 2) ** 0.5)
    # the tie at 2 takes ranks 2.5 and 2.5 (lowest rank to both would give 0.923)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / (4.5 * 5) ** 0.5)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 2, 3], [4, 4, 4]) is None


def test_speed_leans_order_grids_slowest_first_with_each_kinds_signed_median(tmp_path):
    folders = []
    for name, speeds, errors in (("fast", (0.98, 1.0), (0.00, -0.02, 0.01)),
                                 ("slow", (0.60, 0.70), (0.30, 0.10, 0.20)),
                                 ("mid", (0.80, 0.84), (0.05, 0.03, 0.04))):
        rows = [allreduce_row(f"ring 0.064MB H=8 200Mbps #{i}", 64_000, 8, 200, 1.0 + e, 1.0)
                for i, e in enumerate(errors)]
        folders.append(with_core_speed(write_grid(tmp_path / name, rows), speeds))
    folders.append(write_grid(tmp_path / "unsampled", [  # no run.json: left out
        allreduce_row("ring 0.064MB H=8 200Mbps #0", 64_000, 8, 200, 5.0, 1.0)]))
    grids = {str(f): grid_rows(f) for f in folders}
    leans = speed_leans(grids, {str(f): stage_core_speed(core_samples(f)) for f in folders})
    kind = "allreduce under 1 MB, 8 hosts, 200 Mbit/s"
    order = [str(tmp_path / name) for name in ("slow", "mid", "fast")]
    assert [g["grid"] for g in leans["grids"]] == order
    assert [g["core_speed"] for g in leans["grids"]] == pytest.approx([0.65, 0.82, 0.99])
    assert [g["median_error"][kind] for g in leans["grids"]] == pytest.approx([0.2, 0.04, 0.0])
    assert leans["spearman"][kind] == pytest.approx(-1.0)  # slower cores, priced further over


def test_a_grid_without_core_samples_before_the_stage_has_no_speed(tmp_path):
    grid = write_grid(tmp_path / "g", [])
    assert stage_core_speed(core_samples(grid)) is None  # no run.json
    with_core_speed(grid, (0.9,), stage="sync")
    assert stage_core_speed(core_samples(grid)) is None  # sampled, but not before the all-reduce
    (grid / "run.json").write_text("{not json")
    assert stage_core_speed(core_samples(grid)) is None
    for medians in ([], ["fast"], [None], [float("nan")], [0.9, 1.5], [0.0], [True]):
        (grid / "run.json").write_text(json.dumps({"core_speed": {"allreduce": [
            {"core": 0, "median": m} for m in medians]}}))
        assert stage_core_speed(core_samples(grid)) is None, medians


def test_speed_leans_read_only_the_allreduce_rows_and_the_kinds_a_grid_holds(tmp_path):
    a = with_core_speed(write_grid(tmp_path / "a", [
        allreduce_row("ring 4MB H=2 200Mbps", 4_000_000, 2, 200, 1.1, 1.0)],
        [("sync", 3.0, 1.0)]), (0.5,))
    b = with_core_speed(write_grid(tmp_path / "b", [
        allreduce_row("ring 0.064MB H=8 200Mbps", 64_000, 8, 200, 1.2, 1.0)]), (0.9,))
    leans = speed_leans({str(g): grid_rows(g) for g in (a, b)},
                        {str(g): stage_core_speed(core_samples(g)) for g in (a, b)})
    assert leans["kinds"] == ["allreduce, 1 MB and more",
                              "allreduce under 1 MB, 8 hosts, 200 Mbit/s"]
    assert leans["grids"][0]["median_error"] == {"allreduce, 1 MB and more": pytest.approx(0.1)}
    assert set(leans["spearman"].values()) == {None}  # one grid a kind: nothing to correlate


def test_cli_core_speed_says_so_when_no_grid_sampled_and_keeps_run_json_safe(tmp_path, capsys):
    grid = write_grid(tmp_path / "g", [
        allreduce_row("ring 4MB H=2 200Mbps", 4_000_000, 2, 200, 1.1, 1.0)])
    assert main([str(grid), "--core-speed"]) == 0
    assert "--core-speed: no grid sampled its cores" in capsys.readouterr().out
    with_core_speed(grid, (0.9,))
    message = usage_error(main, [str(grid), "--core-speed", "--json", str(grid / "run.json")],
                          capsys)
    assert "run.json" in message
    assert json.loads((grid / "run.json").read_text())["core_speed"]  # left as it was


def test_cli_core_speed_prints_the_table_and_writes_it(tmp_path, capsys):
    grids = [with_core_speed(write_grid(tmp_path / f"g{i}", [
        allreduce_row("backend 0.064MB H=4 1000Mbps", 64_000, 4, 1000, 1.0 + e, 1.0)]), (s,))
        for i, (s, e) in enumerate(((0.6, 0.2), (0.9, 0.1), (1.0, 0.0)))]
    out = tmp_path / "kinds.json"
    assert main([*map(str, grids), "--core-speed", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"| {grids[0]} | 0.60 | +20.0% |" in printed
    assert "allreduce under 1 MB, 4 hosts, 1000 Mbit/s: -1.00" in printed
    written = json.loads(out.read_text())["core_speed"]
    assert [g["core_speed"] for g in written["grids"]] == [0.6, 0.9, 1.0]


def with_stage_speeds(folder, speeds):
    """``folder``'s run.json holding, per stage, each core's median speed in units of work a
    second (``speeds``: stage -> one figure per core)."""
    (folder / "run.json").write_text(json.dumps({"core_speed": {
        stage: [{"core": i, "median": 0.9, "median_units_per_s": x} for i, x in enumerate(xs)]
        for stage, xs in speeds.items()}}))
    return folder


def test_a_stages_speed_in_units_a_second_is_the_mean_over_its_cores_or_none(tmp_path):
    grid = with_stage_speeds(write_grid(tmp_path / "g", []), {"async": (8000, 12000)})
    assert stage_units_per_s(core_samples(grid), "async") == pytest.approx(10000)
    assert stage_units_per_s(core_samples(grid), "sync") is None  # not sampled before that stage
    for speeds in ([], ["fast"], [None], [float("nan")], [0], [-5], [True]):
        (grid / "run.json").write_text(json.dumps({"core_speed": {"async": [
            {"core": 0, "median_units_per_s": x} for x in speeds]}}))
        assert stage_units_per_s(core_samples(grid), "async") is None, speeds
    (grid / "run.json").write_text(json.dumps({"core_speed": {"async": [{"median": 0.9}]}}))
    # a grid from before the figure was kept
    assert stage_units_per_s(core_samples(grid), "async") is None
    (grid / "run.json").write_text("{not json")
    assert stage_units_per_s(core_samples(grid), "async") is None


def test_each_experiment_is_set_against_the_cores_speed_before_its_own_stage(tmp_path):
    # ps is measured slower than priced on slow cores; sync does not care; the all-reduce rows
    # are not this table's
    cases = (("a", 6000, 14000, -0.10, 0.00), ("b", 8000, 13000, -0.04, 0.02),
             ("c", 12000, 7000, 0.00, -0.01), ("d", 14000, 9000, 0.01, 0.01),
             ("e", 10000, 10000, -0.02, 0.00))
    folders = []
    for name, ps_speed, sync_speed, ps_error, sync_error in cases:
        folders.append(with_stage_speeds(write_grid(
            tmp_path / name, [allreduce_row("ring 4MB H=2 200Mbps", 4_000_000, 2, 200, 1.5, 1.0)],
            [("ps", 1.0 + ps_error, 1.0), ("sync", 1.0 + sync_error, 1.0)]),
            {"ps": (ps_speed,) * 2, "sync": (sync_speed, sync_speed), "allreduce": (1000,)}))
    folders.append(write_grid(tmp_path / "unsampled", [], [("ps", 2.0, 1.0)]))  # left out
    grids = {str(f): grid_rows(f) for f in folders}
    speeds = {str(f): {n: stage_units_per_s(core_samples(f), n)
                       for n in ("ps", "sync", "allreduce")} for f in folders}
    leans = experiment_speed_leans(grids, speeds)
    assert [e["experiment"] for e in leans] == ["ps", "sync"]
    ps, sync = leans
    assert [g["grid"] for g in ps["grids"]] == [str(tmp_path / n) for n in "abecd"]
    assert ps["spearman"] == pytest.approx(1.0)  # slower cores, measured further over the price
    # five grids: the two slowest and the two fastest, the middle one in neither half
    assert ps["slower_half"] == {"units_per_s": 7000, "median_error": pytest.approx(-0.07)}
    assert ps["faster_half"] == {"units_per_s": 13000, "median_error": pytest.approx(0.005)}
    assert sync["slower_half"]["median_error"] == pytest.approx(0.0)
    table = experiment_speed_markdown(leans)
    assert "| ps | 5 | +1.00 | 7,000, -7.0% | 13,000, +0.5% |" in table
    assert "allreduce |" not in table
    assert experiment_speed_markdown(experiment_speed_leans(grids, {})).startswith(
        "--core-speed: no two grids sampled")


def test_cli_core_speed_sets_every_other_experiment_against_its_stages_speed(tmp_path, capsys):
    grids = [with_stage_speeds(write_grid(tmp_path / f"g{i}", [], [("async", 1.0 + e, 1.0)]),
                               {"async": (x,)})
             for i, (x, e) in enumerate(((7000, -0.05), (9000, -0.02), (14000, 0.0)))]
    out = tmp_path / "kinds.json"
    assert main([*map(str, grids), "--core-speed", "--json", str(out)]) == 0
    assert "| async | 3 | +1.00 | 7,000, -5.0% | 14,000, +0.0% |" in capsys.readouterr().out
    written = json.loads(out.read_text())["core_speed_by_experiment"]
    assert [g["units_per_s"] for g in written[0]["grids"]] == [7000, 9000, 14000]


def test_pooling_prices_each_row_from_the_median_of_a_run_of_grids(tmp_path):
    # one row, five grids: measured 1.0 each time, priced +20%, -2%, +1%, -15%, +3%
    grids = {}
    for i, predicted in enumerate([1.20, 0.98, 1.01, 0.85, 1.03]):
        grids[str(i)] = grid_rows(write_grid(tmp_path / str(i), [], [("sync", predicted, 1.0)]))
    one = pooled(grids, 1)
    assert (one["groups"], one["rows"], one["over_target"], one["groups_within_target"]) == \
        (5, 5, 2, 3)
    assert one["worst_abs_error_max"] == pytest.approx(0.20)
    three = pooled(grids, 3)  # grids 0-2 (median price 1.01), grid 3-4 left out
    assert (three["groups"], three["rows"], three["over_target"]) == (1, 1, 0)
    assert three["median_abs_error"] == pytest.approx(0.01)
    two = pooled(grids, 2)  # medians of two: (1.20 + 0.98) / 2 and (1.01 + 0.85) / 2
    assert two["groups"] == 2 and two["over_target"] == 1
    assert two["worst_abs_error_min"] == pytest.approx(0.07)
    assert two["worst_abs_error_max"] == pytest.approx(0.09)


def test_pooling_prices_only_the_rows_every_grid_of_a_run_holds(tmp_path):
    one = grid_rows(write_grid(tmp_path / "one", [], [("sync", 1.5, 1.0), ("async", 1.0, 1.0)]))
    two = grid_rows(write_grid(tmp_path / "two", [], [("async", 1.02, 1.0)]))
    pool = pooled({"one": one, "two": two}, 2)
    assert pool["rows"] == 1 and pool["over_target"] == 0  # sync, in one grid only, is left out
    with pytest.raises(GridError, match="1 to 2 beds"):
        pooled({"one": one, "two": two}, 3)


def test_cli_pool_prints_a_line_per_count_of_beds_and_writes_them(tmp_path, capsys):
    folders = [str(write_grid(tmp_path / str(i), [], [("sync", p, 1.0)]))
               for i, p in enumerate([1.10, 1.00, 0.99])]
    out = tmp_path / "pooled.json"
    assert main(folders + ["--pool", "1,3", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| 1 | 3 | 1 a group | 1.0% | 0.0% to 10.0% | 1 of 3 | 2 |" in text
    assert "| 3 | 1 | 1 a group | 0.0% | 0.0% to 0.0% | 0 of 1 | 1 |" in text
    assert [p["beds"] for p in json.loads(out.read_text())["pooled"]] == [1, 3]


@pytest.mark.parametrize("pool, message", [
    ("3,x", "whole numbers of beds"), ("0", "at least 1 bed"), ("4", "at most 3 beds")])
def test_cli_refuses_a_pool_it_cannot_take_on_one_line(tmp_path, capsys, pool, message):
    folders = [str(write_grid(tmp_path / str(i), [], [("sync", 1.0, 1.0)])) for i in range(3)]
    assert message in usage_error(main, folders + ["--pool", pool], capsys)
