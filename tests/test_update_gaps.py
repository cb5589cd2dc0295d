"""experiments.update_gaps: the gaps between a parameter server's updates, read from stored runs."""

import json

import pytest

from experiments import update_gaps


def write_run(folder, gaps_s, workers=8, warmup=3, config=update_gaps.ROW):
    clock = [0.0]
    for gap in [0.5] * warmup + gaps_s:  # the warm-up's gaps are left out
        clock.append(clock[-1] + gap)
    row = {"config": config, "workers": workers, "predicted_s": 0.009, "measured_s": 0.010,
           "measured": {"warmup_updates": warmup, "loss_curve": [[t, None] for t in clock]}}
    folder.mkdir()
    (folder / "async.json").write_text(json.dumps({"rows": [row]}))
    return folder


def empty_point(folder):
    """The folder with one point of its row's loss curve emptied: a file not as written."""
    result = json.loads((folder / "async.json").read_text())
    result["rows"][0]["measured"]["loss_curve"][4] = []
    (folder / "async.json").write_text(json.dumps(result))
    return folder


def test_one_bubble_a_round_and_the_other_gaps_median(tmp_path, capsys):
    # 3 rounds of 8 pushes: seven 8 ms gaps and one of 15 ms each
    run = write_run(tmp_path / "run", ([0.008] * 7 + [0.015]) * 3)
    assert update_gaps.main([str(run)]) == 0
    line = capsys.readouterr().out.splitlines()[2]
    assert line == f"| {run} | 24 | 1.00 | 8 ms | 9.000 ms | 10.000 ms | -10.0% |"
    # a longer bubble threshold counts none
    assert update_gaps.spacing(json.loads((run / "async.json").read_text())["rows"][0],
                               0.02)["bubbles_a_round"] == 0


def test_a_stored_grid_reads_as_its_notebook_says():
    row = [r for r in json.loads(open("experiments/results/full-06cc3d3/async.json").read())["rows"]
           if r["config"] == update_gaps.ROW][0]
    seen = update_gaps.spacing(row, update_gaps.BUBBLE_S)
    assert seen["bubbles_a_round"] == pytest.approx(0.90, abs=0.005)
    assert seen["median_gap_s"] == pytest.approx(0.00817, abs=5e-6)


def test_a_bad_bubble_is_one_line_and_status_2(tmp_path, capsys):
    run = write_run(tmp_path / "run", [0.008] * 8)
    with pytest.raises(SystemExit) as exit_:
        update_gaps.main([str(run), "--bubble", "0s"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bubble must be a positive time" in err


@pytest.mark.parametrize("make, message", [
    (lambda folder: write_run(folder, [0.008] * 8, config="other"), "no async row"),
    (lambda folder: write_run(folder, [], warmup=0), "no gap to read"),
    # once "FileNotFoundError: [Errno 2] ..." and "IndexError: list index out of range"
    (lambda folder: folder, "run: no such folder"),
    (lambda folder: folder.mkdir() or folder, "run: async.json: no such file"),
    (lambda folder: empty_point(write_run(folder, [0.008] * 8)),
     "async.json: not as experiments/run.py writes it (list index out of range)"),
])
def test_a_run_without_the_row_or_its_gaps_is_one_line_and_status_2(tmp_path, capsys, make,
                                                                      message):
    folder = make(tmp_path / "run")
    assert update_gaps.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_folder_named_twice_is_one_line_and_status_2(tmp_path, capsys):
    # its rows counted twice, where experiments.grids and floor refuse it
    run = write_run(tmp_path / "run", [0.008] * 8)
    with pytest.raises(SystemExit) as exit_:
        update_gaps.main([str(run), str(run)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a folder is named twice" in err
