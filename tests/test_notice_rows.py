"""experiments.notice_rows: the stored parameter-server rows priced without and with the notice."""

import json
import shutil
from pathlib import Path

import pytest

from experiments import notice_rows
from tests.cli_helpers import usage_error

STORED = "experiments/results/quick-2e75ca7"  # a quick grid calibrated before the queue probe
# one that keeps its own single-process runs, so that pricing it again times nothing here: the
# 4 workers' row moved by a point with what this machine's runs measured at the time
PRICED = "experiments/results/quick-4cb5b64"


def test_queues_are_rate_equals_time_per_rate():
    assert notice_rows.parse_queues("50Mbps=5.4ms, 200Mbps=5.6ms") == \
        {50e6: pytest.approx(0.0054), 200e6: pytest.approx(0.0056)}


@pytest.mark.parametrize("text, named", [
    ("200Mbps", "'200Mbps' is not RATE=TIME"), ("200Mbps=2s", "'2s'"), ("200Mbps=-1ms", "'-1ms'"),
    ("fast=5ms", "'fast'"), ("200Mbps=5ms,200Mbps=6ms", "'200Mbps' is given twice"),
    ("300Mbps=5ms", "no calibration in those folders is at 300 Mbps (they have 50 Mbps, 200 Mbps)"),
])
def test_bad_queues_are_one_line_and_status_2(capsys, text, named):
    assert named in usage_error(notice_rows.main, [STORED, "--queue", text], capsys)


def test_a_folder_that_is_not_a_stored_run_is_one_line_and_status_2(tmp_path, capsys):
    assert notice_rows.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "calibration.json" in err


@pytest.mark.parametrize("calibration", ["[1]", '[{"bandwidth_bps": 0}]'])
def test_a_calibration_not_as_written_is_one_line_and_status_2(tmp_path, capsys, calibration):
    (tmp_path / "calibration.json").write_text(calibration)
    assert notice_rows.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"experiments.notice_rows: {tmp_path}: ")


def test_the_notice_takes_the_two_workers_row_nearer_its_measurement(capsys, monkeypatch):
    """The 2 workers at 200 Mbit/s wait for a notice behind the other's reply on every push: priced
    so, that row's error moves from about -5% towards zero; the 4 workers, whose server's link
    is full, hardly move."""
    from experiments.single_process import RUNS
    take = RUNS.take

    def stored_only(kind, key, measure):  # every price from the grid's own runs, none timed here
        return take(kind, key, lambda: pytest.fail(f"{PRICED} keeps no {kind} run {key}"))
    monkeypatch.setattr(RUNS, "take", stored_only)
    rows = {kind: (without, with_) for kind, without, with_ in
            notice_rows.errors(notice_rows.Path(PRICED), {200e6: 0.0056})}
    assert set(rows) == {"async: 2 workers 200Mbps mlp emulate 50ms",
                         "async: 4 workers 200Mbps mlp emulate 50ms",
                         "ps_vs_ring: PS server link 1x 4 workers 200Mbps mlp",
                         "ps_vs_ring: PS server link 4x 4 workers 200Mbps mlp",
                         "async_vs_sync: async per update 4 workers 200Mbps mlp 50ms"}
    without, with_ = rows["async: 2 workers 200Mbps mlp emulate 50ms"]
    assert without < -0.03 and abs(with_) < abs(without) - 0.02
    assert rows["async: 4 workers 200Mbps mlp emulate 50ms"][1] == \
        pytest.approx(rows["async: 4 workers 200Mbps mlp emulate 50ms"][0], abs=0.01)
    # the server's link 4x a worker's: the replies leave it room, no notice waits
    assert rows["ps_vs_ring: PS server link 4x 4 workers 200Mbps mlp"][1] == \
        pytest.approx(rows["ps_vs_ring: PS server link 4x 4 workers 200Mbps mlp"][0], abs=0.002)
    lines = notice_rows.summary_lines([(k, *v) for k, v in rows.items()])
    assert lines[-1].startswith("with it: 5 rows, median |error|")


def test_a_folder_named_twice_is_refused_as_experiments_grids_refuses_it(capsys):
    err = usage_error(notice_rows.main, [PRICED, f"{PRICED}/."], capsys)
    assert err.endswith("error: a folder is named twice: each grid counts once\n")


def stored_run(folder: Path, damage) -> Path:
    """The priced grid's calibration and async.json in ``folder``, async.json changed by
    ``damage``."""
    folder.mkdir()
    shutil.copy(Path(PRICED, "calibration.json"), folder)
    result = json.loads(Path(PRICED, "async.json").read_text())
    damage(result)
    (folder / "async.json").write_text(json.dumps(result))
    return folder


@pytest.mark.parametrize("damage, named", [
    (lambda r: r.update(name="sync"), "async.json: it is named 'sync', not 'async' as its file is"),
    (lambda r: r.update(rows=[]), "async.json: 'rows' must be a non-empty list of objects (a run "
                                  "writes one per comparison), got []"),
    (lambda r: r.pop("points"), "async.json: missing key 'points'"),
])
def test_a_result_not_as_written_is_named_on_one_line(tmp_path, capsys, damage, named):
    folder = stored_run(tmp_path / "run", damage)
    assert notice_rows.main([str(folder)]) == 2
    assert capsys.readouterr().err == f"experiments.notice_rows: {folder}: {named}\n"


@pytest.mark.parametrize("folder, named", [
    ("none", "no such folder"),
    ("calibration", "calibration.json: the calibration must be a non-empty list of records, "
                    "got []"),
])
def test_a_missing_folder_or_an_empty_calibration_is_said_in_words(tmp_path, capsys, folder,
                                                                    named):
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "calibration.json").write_text("[]")
    assert notice_rows.main([str(tmp_path / folder)]) == 2
    assert capsys.readouterr().err == f"experiments.notice_rows: {tmp_path / folder}: {named}\n"
