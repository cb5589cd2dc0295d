"""experiments.after_pause and real/sync.py --emulate-comm: a step's CPU work after a wait."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import after_pause
from tests.cli_helpers import usage_error
from tests.dist_helpers import child_env

REPO = Path(__file__).resolve().parent.parent


def test_the_trainer_waits_after_each_exchange_and_counts_the_wait_as_communication(tmp_path):
    out = tmp_path / "s.json"
    subprocess.run([sys.executable, "real/sync.py", "--nproc-per-node", "1", "--model", "mlp",
                    "--steps", "4", "--warmup-steps", "1", "--threads", "1", "--no-progress",
                    "--emulate-comm", "30ms", "--json", str(out)],
                   cwd=REPO, check=True, capture_output=True, timeout=120,
                   env=child_env({"MASTER_ADDR": "127.0.0.1"}))
    summary = json.loads(out.read_text())
    assert summary["emulate_comm_s"] == 0.03
    assert summary["comm_time_s"] >= 0.03  # the wait is part of the step's communication
    assert summary["compute_time_s"] > 0 and summary["idle_time_s"] > 0


def test_the_pauses_are_taken_in_turn_and_each_priced_by_the_median_of_its_runs():
    calls = []
    figures = iter([(1.0, 0.5), (2.0, 1.5), (1.2, 0.7), (2.4, 1.1), (0.8, 0.6), (2.2, 1.3)])

    def fake_run(config, steps, warmup_steps, *flags):
        calls.append((config.model, config.batch_size, steps, warmup_steps, flags))
        compute, rest = next(figures)
        return {"compute_time_s": compute, "idle_time_s": rest}, None

    rows = after_pause.measure([0.0, 0.04], 3, "lenet", 16, 20, 2, run=fake_run, seed=5)
    assert [c[4] for c in calls] == [("--emulate-comm", "0.0s", "--seed", "5"),
                                     ("--emulate-comm", "0.04s", "--seed", "5")] * 3
    assert all(c[:4] == ("lenet", 16, 20, 2) for c in calls)
    assert [(r["pause_s"], r["compute_s"], r["rest_s"]) for r in rows] == [
        (0.0, 1.0, 0.6), (0.04, 2.2, 1.3)]
    assert [len(r["runs"]) for r in rows] == [3, 3]
    lines = after_pause.table_lines(rows)
    assert "(2.20x)" in lines[1] and "(2.17x)" in lines[1] and "(1.00x)" in lines[0]


@pytest.mark.parametrize("text, want", [("0,39ms,156ms", [0.0, 0.039, 0.156]), ("5ms", [0.005])])
def test_pauses_parse_with_units(text, want):
    assert after_pause.parse_pauses(text) == pytest.approx(want)


@pytest.mark.parametrize("argv, message", [
    (["--pauses", "5"], "needs a unit"),
    (["--pauses", "0,5ms,0"], "given twice"),
    (["--pauses", "-1ms"], "--pauses"),
    (["--pauses", "0,2e6s"], "more than 1e+06 s"),
    (["--steps", "10000", "--pauses", "1s"], "more than the 300 s a run may wait"),
    (["--model", "resnet"], "unknown --model 'resnet'"),
    (["--repeats", "0"], "--repeats must be 1 to 100"),
    (["--steps", "5", "--warmup-steps", "5"], "--warmup-steps < --steps"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--json", "/no/such/folder/x.json"], "--json"),
    (["--seed", "-2"], "seed '-2' must be from 0 to 2**63-1"),
])
def test_bad_input_is_one_line_and_exit_status_2(argv, message, capsys):
    assert message in usage_error(after_pause.main, argv, capsys)


def test_a_failed_single_process_run_is_one_line_and_exit_status_1(capsys, monkeypatch):
    def failing(*args):
        raise subprocess.CalledProcessError(1, "sync.py",
                                            stderr=b"Traceback...\nsync.py: error: boom\n")
    monkeypatch.setattr(after_pause, "run_alone", failing)
    assert after_pause.main(["--repeats", "1", "--pauses", "0"]) == 1
    err = capsys.readouterr().err
    assert err == "experiments.after_pause: a single-process run failed: sync.py: error: boom\n"
