"""experiments.notice_rows: the stored parameter-server rows priced without and with the notice."""

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
