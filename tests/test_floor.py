"""experiments/floor.py: how far stored grids' measurements move by themselves."""

import json
import shutil
from pathlib import Path

import pytest

from experiments import allreduce
from experiments.floor import (MIN_OTHERS, held_line, main, one_side, others_median_errors,
                               side_prices, summarise)
from experiments.grids import ALL, grid_rows
from experiments.measure import bracket
from experiments.model import NetworkInputs
from tests.cli_helpers import usage_error
from tests.test_grids import allreduce_row, write_grid

REPO = Path(__file__).resolve().parents[1]
STORED = REPO / "experiments/results/full-2b6e8f2"  # a full grid, its probes bracketed


def stored_grid():
    meta = json.loads((STORED / "run.json").read_text())
    nets = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c) for c in meta["calibration"]}
    return json.loads((STORED / "allreduce.json").read_text()), nets


def probe_record(table: dict, side: str) -> dict:
    """The probe record one half of a bracketed table came from, as ring_probe.py writes it."""
    record = {k: v for k, v in table.items()
              if k not in ("before", "after") and not k.endswith(("_before", "_after"))}
    record["results"] = table[side]
    for driver in ("ring", "engine"):
        if f"{driver}_{side}" in table:
            record[f"{driver}_results"] = table[f"{driver}_{side}"]
    gaps = table["stream_gap_s"]
    record["stream_gap_s"] = gaps[:len(gaps) // 2] if side == "before" else gaps[len(gaps) // 2:]
    return record


def test_one_side_keeps_that_probes_rounds_and_its_half_of_the_gaps():
    result, _ = stored_grid()
    table = result["rounds"]["H=4 1000Mbps"]
    for side in ("before", "after"):
        half = one_side(table, side)
        assert half["results"] == table[side]
        assert half["ring_results"] == table[f"ring_{side}"]
        assert half["engine_results"] == table[f"engine_{side}"]
        assert len(half["stream_gap_s"]) * 2 == len(table["stream_gap_s"])
        assert not {"before", "after", "ring_before", "engine_after"} & set(half)  # one probe
    gaps = table["stream_gap_s"]
    assert one_side(table, "before")["stream_gap_s"] + one_side(table, "after")["stream_gap_s"] \
        == gaps
    assert table["stream_gap_s"] is gaps and table["results"] != table["before"]  # untouched


def test_one_side_splits_the_gaps_of_every_sized_stream():
    table = {"before": [], "after": [], "stream_gap_s": [1.0, 2.0],
             "sized_stream_gaps": [{"bytes": 64, "gaps_s": [3.0, 4.0, 5.0, 6.0]}]}
    assert one_side(table, "before")["sized_stream_gaps"] == [{"bytes": 64, "gaps_s": [3.0, 4.0]}]
    assert one_side(table, "after")["sized_stream_gaps"] == [{"bytes": 64, "gaps_s": [5.0, 6.0]}]
    assert table["sized_stream_gaps"][0]["gaps_s"] == [3.0, 4.0, 5.0, 6.0]
    # where the table counts the first probe's gaps, there; a stream of whole calls without
    # the count (each probe made as many as fit in its time): both probes' gaps on each side
    counted = {**table, "sized_stream_gaps": [{"bytes": 64, "calls": "whole", "before_gaps": 1,
                                               "gaps_s": [3.0, 4.0, 5.0]}]}
    assert one_side(counted, "before")["sized_stream_gaps"][0]["gaps_s"] == [3.0]
    assert one_side(counted, "after")["sized_stream_gaps"][0]["gaps_s"] == [4.0, 5.0]
    uncounted = {**table, "sized_stream_gaps": [{"bytes": 64, "calls": "whole",
                                                 "gaps_s": [3.0, 4.0, 5.0]}]}
    for side in ("before", "after"):
        assert one_side(uncounted, side)["sized_stream_gaps"][0]["gaps_s"] == [3.0, 4.0, 5.0]
    for bad in (0, 3):
        with pytest.raises(ValueError, match="cannot be the first probe's"):
            one_side({**table, "sized_stream_gaps": [{**counted["sized_stream_gaps"][0],
                                                       "before_gaps": bad}]}, "before")


def test_one_side_refuses_what_is_not_a_bracketed_table():
    with pytest.raises(ValueError, match="no probe halves"):
        one_side({"results": []}, "before")
    with pytest.raises(ValueError, match="side must be one of"):
        one_side({"before": [], "after": []}, "middle")
    with pytest.raises(ValueError, match="cannot be two probes' equal halves"):
        one_side({"before": [], "after": [], "stream_gap_s": [1e-4, 2e-4, 3e-4]}, "after")


def test_a_bed_probed_alike_on_both_sides_prices_each_half_as_the_bracket():
    """A probe bracketed by itself: each half alone prices every row as the bracket does."""
    result, nets = stored_grid()
    label = "H=8 1000Mbps"
    same = bracket(*(2 * [probe_record(result["rounds"][label], "after")]))
    doubled = {**result, "rounds": {label: same},
               "points": [p for p in result["points"]
                          if f"H={p['hosts']} {p['bandwidth_bps'] / 1e6:g}Mbps" == label]}
    both = {r["config"]: r["predicted_s"] for r in allreduce.repredict(doubled, nets)}
    halves = side_prices(doubled, nets)
    assert set(halves) == set(both) and len(both) == 15
    for config, price in both.items():
        assert halves[config]["before"] == pytest.approx(price, rel=1e-12)
        assert halves[config]["after"] == pytest.approx(price, rel=1e-12)


def test_the_stored_grid_halves_bracket_what_both_price():
    """Every stored row priced from each half alone, and the two halves' prices differ in most
    rows (the bracket's price need not lie between them: the bucket's walk is not monotone)."""
    result, nets = stored_grid()
    halves = side_prices(result, nets)
    both = {r["config"]: r["predicted_s"] for r in allreduce.repredict(result, nets)}
    assert set(halves) == set(both) == {r["config"] for r in result["rows"]}
    differ = sum(abs(h["before"] - h["after"]) > 1e-9 * both[c] for c, h in halves.items())
    assert differ > len(halves) // 2  # two launches of a probe never time alike
    for h in halves.values():
        assert h["before"] > 0 and h["after"] > 0


def test_each_row_is_set_against_the_median_of_the_other_grids(tmp_path):
    grids = {}
    for i, measured in enumerate([1.0, 1.0, 1.0, 1.25, 1.0]):
        grids[str(i)] = grid_rows(write_grid(tmp_path / str(i), [], [("sync", 1.0, measured)]
                                             + ([("async", 1.0, 1.0)] if i < 3 else [])))
    floor = others_median_errors(grids)
    assert floor[("3", "sync", "sync")] == pytest.approx((1.0 - 1.25) / 1.25)
    assert floor[("0", "sync", "sync")] == pytest.approx(0.0)  # median of 1.0, 1.0, 1.25, 1.0
    assert not any(key[1] == "async" for key in floor)  # held by 3 grids: 2 others each
    assert MIN_OTHERS == 3


def test_summarise_counts_each_way_of_missing_per_kind(tmp_path):
    small = "allreduce under 1 MB, 8 hosts, 1000 Mbit/s"
    config = "ring 0.064MB H=8 1000Mbps"
    grids, sides = {}, {}
    for i, (measured, before, after) in enumerate([(1.00, 1.00, 1.00), (1.00, 1.10, 0.95),
                                                   (1.00, 1.05, 1.02), (1.30, 1.02, 1.00)]):
        name = str(i)
        grids[name] = grid_rows(write_grid(tmp_path / name, [
            allreduce_row(config, 64_000, 8, 1000, 1.0, measured)], [("sync", 1.0, 1.0)]))
        sides[name] = {config: {"before": before, "after": after}}
    by_kind, by_grid = summarise(grids, sides)
    kinds = {k["kind"]: k for k in by_kind}
    assert list(kinds) == [small, "sync", ALL]
    k = kinds[small]
    assert k["rows"] == 4 and k["model_over"] == 1  # 1.0 against 1.30
    assert k["others_rows"] == 4 and k["others_over"] == 1  # 1.30 against the others' 1.0
    assert k["side_rows"] == 4
    assert k["before_over"] == 2  # 1.10 against 1.00, 1.02 against 1.30
    assert k["after_over"] == 1  # 1.00 against 1.30
    assert k["either_over"] == 2
    assert k["apart_over"] == 1  # 1.10 and 0.95 against 1.00
    assert kinds["sync"]["side_rows"] == 0 and kinds["sync"]["others_over"] == 0
    assert kinds[ALL]["rows"] == 8 and kinds[ALL]["model_over"] == 1
    assert [g["grid"] for g in by_grid] == ["0", "1", "2", "3"]
    assert [(g["rows"], g["model_over"], g["others_over"], g["either_over"], g["apart_over"])
            for g in by_grid] == [(2, 0, 0, 0, 0), (2, 0, 0, 1, 1), (2, 0, 0, 0, 0),
                                  (2, 1, 1, 1, 0)]
    assert held_line(by_grid) == ("Grids with every row within 8%: 3 of 4 as priced, 3 of 4 "
                                  "against the other grids' median.")


def test_a_row_without_its_measurement_is_priced_but_set_against_nothing(tmp_path):
    config = "ring 0.064MB H=8 1000Mbps"
    grids, sides = {}, {}
    for name in "0123":
        rows = grid_rows(write_grid(tmp_path / name, [
            allreduce_row(config, 64_000, 8, 1000, 1.0, 1.0)], [("sync", 1.0, 1.0)]))
        grids[name] = [{k: v for k, v in r.items() if k != "measured_s"} for r in rows]
        sides[name] = {config: {"before": 1.0, "after": 1.0}}
    (k,) = [k for k in summarise(grids, sides)[0] if k["kind"] == ALL]
    assert k["rows"] == 8 and k["others_rows"] == 0 and k["side_rows"] == 0


def copy_grid(name: str, to: Path) -> Path:
    folder = to / name
    folder.mkdir()
    for file in ("fidelity.json", "allreduce.json", "run.json"):
        shutil.copy(REPO / "experiments/results" / name / file, folder / file)
    return folder


def test_cli_prints_the_table_and_writes_the_figures(tmp_path, capsys):
    folders = [copy_grid(name, tmp_path) for name in
               ("full-2b6e8f2", "full-310bdec", "full-a9c7f80", "full-3e736e5")]
    out = tmp_path / "floor.json"
    assert main([str(f) for f in folders] + ["--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| kind of row | rows | priced, over 8% | the other grids' median")
    written = json.loads(out.read_text())
    every = written["kinds"][-1]
    assert every["kind"] == ALL and every["rows"] == 4 * 172 and every["side_rows"] == 4 * 132
    assert every["others_rows"] == 4 * 172
    assert f"| {ALL} | {4 * 172} | {every['model_over']} | {every['others_over']} of 688 |" \
        in table
    assert "| sync | 48 |" in table and "| — | — | — | — |" in table
    assert [g["grid"] for g in written["by_grid"]] == [str(f) for f in folders]
    assert f"| {folders[0]} | 172 |" in table
    assert table.rstrip().endswith("against the other grids' median.")


def test_cli_refuses_a_grid_without_its_calibration_on_one_line(tmp_path, capsys):
    folder = copy_grid("full-2b6e8f2", tmp_path)
    (folder / "run.json").unlink()
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run.json" in err
    (folder / "run.json").write_text("{}")
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == f"experiments.floor: {folder}: run.json: missing key 'calibration'\n"


def test_cli_names_a_calibration_table_it_cannot_read_on_one_line(tmp_path, capsys):
    # a duplex table the model cannot read came out as a KeyError and its traceback
    folder = copy_grid("full-2b6e8f2", tmp_path)
    meta = json.loads((folder / "run.json").read_text())
    meta["calibration"][0]["duplex"] = {"transfers": [{"x": 1}]}
    (folder / "run.json").write_text(json.dumps(meta))
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == (f"experiments.floor: {folder}: run.json: a calibration record not as "
                   f"experiments/run.py writes it (KeyError: 'bytes')\n")


@pytest.mark.parametrize("text, named", [
    ("not json", "run.json: not JSON (Expecting value"),
    ("[]", "run.json: not a run's record (a JSON object), got []"),
    ('{"calibration": []}', "run.json: the calibration must be a non-empty list of records"),
    ('{"calibration": [{"bandwidth_bps": 2e8}]}', "run.json: calibration[0]: missing key "
                                                  "'goodput_bps'"),
])
def test_cli_names_a_run_json_it_cannot_price_from_on_one_line(tmp_path, capsys, text, named):
    folder = copy_grid("full-2b6e8f2", tmp_path)
    (folder / "run.json").write_text(text)
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"experiments.floor: {folder}: {named}")


def test_cli_refuses_probe_tables_of_the_wrong_shape_on_one_line(tmp_path, capsys):
    folder = copy_grid("full-2b6e8f2", tmp_path)
    stored = json.loads((folder / "allreduce.json").read_text())
    stored["rounds"] = []  # a list where the points' tables are kept by name
    (folder / "allreduce.json").write_text(json.dumps(stored))
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its rounds are not a table per test bed" in err


def test_cli_refuses_a_folder_named_twice_and_an_output_over_an_input(tmp_path, capsys):
    grid = write_grid(tmp_path / "g", [], [("sync", 1.0, 1.0)])
    assert "named twice" in usage_error(main, [str(grid), str(grid)], capsys)
    assert "--json" in usage_error(main, [str(grid), "--json", str(grid / "fidelity.json")],
                                   capsys)


def test_cli_takes_grids_without_all_reduce_rows(tmp_path, capsys):
    grids = [write_grid(tmp_path / str(i), [], [("sync", 1.0, m)])
             for i, m in enumerate([1.0, 1.0, 1.0, 1.2])]
    for g in grids:
        (g / "allreduce.json").unlink()
    assert main([str(g) for g in grids]) == 0
    assert f"| {ALL} | 4 | 1 | 1 of 4 | — | — | — | — |" in capsys.readouterr().out
