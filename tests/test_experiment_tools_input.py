"""Bad input to the experiment tools (duplex_probe, ablation, grids, call_positions,
launch_spread): one line on stderr and a non-zero exit, never a traceback or a hang."""

import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from experiments import call_positions, launch_spread
from experiments.grids import main as grids_main
from tests.cli_helpers import usage_error

REPO = Path(__file__).resolve().parent.parent
STORED = REPO / "experiments" / "results" / "full"
CALIBRATION = {"bandwidth_bps": 1e9, "goodput_bps": 956e6, "frame_bytes": 1514,
               "burst_bytes": 125_000, "duplex": {"goodput_bps": 950e6},
               "gloo": {"latency_s": 50e-6, "all_reduce_1_element_s": {"median": 150e-6}}}


def run_tool(args: list[str], timeout_s: float = 10.0) -> subprocess.CompletedProcess:
    """``python ARGS`` from the repository root; a run past ``timeout_s`` fails the test."""
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


def one_line_error(result: subprocess.CompletedProcess, status: int) -> str:
    """The stderr of a run that failed with ``status`` on one line, without a traceback."""
    assert result.returncode == status, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


@pytest.fixture
def full_disk(monkeypatch):
    """Every output written after the up-front check fails as on a full disk: what a tool
    says when its --json cannot be written once the work is done."""
    import errno

    from dsgd_sim import argparse_oneline

    def no_space(path, write, binary=False):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(argparse_oneline, "write_atomically", no_space)


# -- experiments/duplex_probe.py ----------------------------------------------------------

def silent_peer(address: str) -> socket.socket:
    """A listener on ``address`` and a free port that the probe's own listener (``0.0.0.0``,
    ``SO_REUSEPORT``) can share: it takes the probe's connection and never answers."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((address, 0))
    listener.listen()
    return listener


def probe(port: int, tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return run_tool(["experiments/duplex_probe.py", "--peer", "127.0.0.2", "--port", str(port),
                     "--sizes", "1000", "--repeats", "1", "--json", str(tmp_path / "d.json"),
                     *flags])


def test_duplex_probe_names_a_peer_that_accepts_but_never_connects_back(tmp_path):
    listener = silent_peer("127.0.0.2")
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    with listener:
        result = probe(port, tmp_path, "--timeout", "1s")
    assert accepted  # the probe did reach this peer
    err = one_line_error(result, 1)
    assert f"127.0.0.2 did not connect back to port {port} within 1 s" in err


def test_duplex_probe_names_a_peer_that_connects_back_but_sends_nothing(tmp_path):
    listener = silent_peer("127.0.0.2")
    port = listener.getsockname()[1]
    held = []

    def connect_back():  # take the probe's connection, then connect to its listener, silent
        held.append(listener.accept())
        held.append(socket.create_connection(("127.0.0.1", port), timeout=5))

    threading.Thread(target=connect_back, daemon=True).start()
    with listener:
        result = probe(port, tmp_path, "--timeout", "1s")
    assert len(held) == 2
    assert "127.0.0.2 sent nothing for 1 s" in one_line_error(result, 1)


def test_duplex_probe_says_its_port_is_taken(tmp_path):
    with socket.create_server(("0.0.0.0", 0)) as taken:  # no SO_REUSEPORT: the port is not shared
        port = taken.getsockname()[1]
        err = one_line_error(probe(port, tmp_path), 1)
    assert f"cannot listen on port {port}" in err and "Address already in use" in err


@pytest.mark.parametrize("flags, named", [
    (["--idle", "1e308"], "--idle seconds from 0 to 60"),
    (["--sizes", "1000000000"], "--sizes must be at most 256 MB"),
    (["--sizes", "100000000000000"], "is not a list of positive byte counts (each at most"),
    (["--timeout", "0"], "--timeout must be more than 0"),
    (["--timeout", "1e300s"], "at most 3600 s"),
    (["--timeout", "5"], "needs a unit"),
])
def test_duplex_probe_refuses_flags_out_of_bounds_before_any_connection(tmp_path, flags, named):
    err = one_line_error(probe(1, tmp_path, *flags), 2)
    assert err.startswith("duplex_probe.py: error: ") and named in err


def test_duplex_probe_refuses_an_output_it_cannot_write_before_any_connection(tmp_path):
    err = one_line_error(probe(1, tmp_path, "--json", "/proc/x.json"), 2)
    assert "--json '/proc/x.json'" in err


# -- experiments/ablation.py --------------------------------------------------------------

def results_folder(tmp_path, rows) -> Path:
    """A run's results: the stored full grid's calibration and ``rows`` as allreduce.json's."""
    (tmp_path / "calibration.json").write_text((STORED / "calibration.json").read_text())
    (tmp_path / "allreduce.json").write_text(json.dumps({"rows": rows}))
    return tmp_path


def stored_row(**changes) -> dict:
    row = json.loads((STORED / "allreduce.json").read_text())["rows"][0]
    return {**row, **changes}


@pytest.mark.parametrize("rows, named", [
    ([stored_row(hosts=1_000_000)], "row 0: hosts must be a whole number from 2 to 64"),
    ([stored_row(), stored_row(measured_s=float("nan"))], "row 1: measured_s must be a positive"),
    ([stored_row(measured_s=-0.01)], "row 0: measured_s must be a positive finite number"),
])
def test_ablation_refuses_stored_rows_it_cannot_compare(tmp_path, rows, named):
    folder = results_folder(tmp_path, rows)
    err = one_line_error(run_tool(["-m", "experiments.ablation", "--results", str(folder)]), 2)
    assert f"the results in {folder} are not as experiments/run.py writes them: " \
           f"allreduce.json: {named}" in err


def test_ablation_says_there_is_nothing_to_compare_without_rows(tmp_path):
    folder = results_folder(tmp_path, [])
    err = one_line_error(run_tool(["-m", "experiments.ablation", "--results", str(folder)]), 2)
    assert f"{folder / 'allreduce.json'} has no rows: nothing to compare" in err


def test_ablation_compares_a_stored_row():  # the checks pass what experiments/run.py writes
    result = run_tool(["-m", "experiments.ablation", "--results", str(STORED),
                       "--model", "rounds"], timeout_s=30)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.count("\n") == len(json.loads((STORED / "allreduce.json").read_text())
                                            ["rows"])


# -- --json written through write_json_output -----------------------------------------------

def test_grids_says_on_one_line_that_its_json_cannot_be_written(tmp_path, capsys, full_disk):
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "fidelity.json").write_text(json.dumps(
        [{"experiment": "sync", "config": "H=2", "error": 0.01}]))
    assert grids_main([str(grid), "--json", str(tmp_path / "out.json")]) == 1
    out, err = capsys.readouterr()
    assert "| sync | 1 | 1 |" in out  # the figures were printed before
    assert err.startswith("experiments.grids: error: --json: ") and err.count("\n") == 1
    assert "No space left on device" in err


def test_call_positions_says_on_one_line_that_its_json_cannot_be_written(tmp_path, monkeypatch,
                                                                        capsys, full_disk):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps([CALIBRATION]))
    figures = {"64 KB": {"ring<naive<backend": {"measured_s": 1e-3, "predicted_s": 1e-3}}}
    monkeypatch.setattr(call_positions, "run_bed",
                        lambda args, net, bed: (figures, {}, {"traceEvents": []}))
    argv = ["--hosts", "2", "--beds", "1", "--calibration", str(path), "--json",
            str(tmp_path / "out.json")]
    assert call_positions.main(argv) == 1
    out, err = capsys.readouterr()
    assert "ring<naive<backend: 1.000-1.000 ms" in out
    assert err.startswith("call_positions: error: --json: ") and err.count("\n") == 1


def test_launch_spread_says_on_one_line_that_its_json_cannot_be_written(tmp_path, monkeypatch,
                                                                       capsys, full_disk):
    monkeypatch.setattr(launch_spread, "run_launches",
                        lambda args: [{"probe gap": 1e-3}, {"probe gap": 2e-3}])
    assert launch_spread.main(["--launches", "2", "--json", str(tmp_path / "out.json")]) == 1
    out, err = capsys.readouterr()
    assert "probe gap: 1.000 to 2.000 ms" in out
    assert err.startswith("launch_spread: error: --json: ") and err.count("\n") == 1


# -- experiments/call_positions.py --calibration --------------------------------------------

@pytest.mark.parametrize("changes, named", [
    ({"goodput_bps": 0}, "goodput_bps must be a positive finite number, got 0"),
    ({"latency_s": "abc"}, "latency_s must be a positive finite number, got 'abc'"),
    ({"gloo": {**CALIBRATION["gloo"], "latency_s": float("nan")}}, "gloo.latency_s must be"),
    ({"duplex": {"goodput_bps": -1.0}}, "duplex.goodput_bps must be"),
])
def test_call_positions_refuses_a_bad_calibration_before_any_bed(tmp_path, monkeypatch, capsys,
                                                                 changes, named):
    def no_bed(args, net, bed):
        raise AssertionError("a test bed was built")

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps([{**CALIBRATION, **changes}]))
    monkeypatch.setattr(call_positions, "run_bed", no_bed)
    err = usage_error(call_positions.main, ["--hosts", "2", "--calibration", str(path)], capsys)
    assert f"--calibration {path}: {named}" in err


# -- experiments/emulated_steps.py ----------------------------------------------------------

EMULATED_GRID = REPO / "experiments" / "results" / "quick-48f9159"


def stored_run(folder: Path) -> Path:
    """A stored run's files that experiments.emulated_steps reads: run.json, sync.json and
    async_vs_sync.json of the quick grid."""
    folder.mkdir()
    for name in ("run.json", "sync.json", "async_vs_sync.json"):
        shutil.copy(EMULATED_GRID / name, folder / name)
    return folder


def damaged(folder: Path, name: str, damage) -> Path:
    """``folder`` with its file ``name`` changed by ``damage``: its JSON changed in place, or a
    text in its place where ``damage`` returns one."""
    document = json.loads((folder / name).read_text())
    text = damage(document)
    (folder / name).write_text(text if isinstance(text, str) else json.dumps(document))
    return folder


@pytest.mark.parametrize("name, damage, named", [
    ("sync.json", lambda d: d.pop("points"), "sync.json: missing key 'points'"),
    ("sync.json", lambda d: "[]", "sync.json: not a result file (a JSON object), got []"),
    ("sync.json", lambda d: d.update(rows=[]), "sync.json: 'rows' must be a non-empty list of "
                                               "objects (a run writes one per comparison), got []"),
    ("sync.json", lambda d: d["rows"].pop(), "sync.json: it has 3 points and 2 rows"),
    ("sync.json", lambda d: d.update(name="async"), "sync.json: it is named 'async'"),
    ("sync.json", lambda d: d["rows"][1].update(measured_s=float("inf")),
     "sync.json: rows[1] (H=4 200Mbps mlp emulate 50ms): 'measured_s' must be a positive, "
     "finite"),
    ("async_vs_sync.json", lambda d: d["rows"].pop(),  # the sync half's row, the last
     "async_vs_sync.json: no row 'sync per step 4 workers 200Mbps mlp 50ms'"),
    ("run.json", lambda d: "{}", "run.json: missing key 'calibration'"),
    ("run.json", lambda d: "nope", "run.json: not JSON (Expecting value"),
    ("run.json", lambda d: d.update(calibration=[]), "run.json: the calibration must be a "
                                                     "non-empty list of records, got []"),
])
def test_emulated_steps_names_the_stored_file_it_cannot_read(tmp_path, name, damage, named):
    folder = damaged(stored_run(tmp_path / "run"), name, damage)
    err = one_line_error(run_tool(["-m", "experiments.emulated_steps", str(folder)], 60), 2)
    assert err.startswith(f"experiments.emulated_steps: {folder}: {named}")


def test_emulated_steps_says_a_folder_is_missing_in_words(tmp_path):
    err = one_line_error(run_tool(["-m", "experiments.emulated_steps", str(tmp_path / "none")]),
                         2)
    assert err == f"experiments.emulated_steps: {tmp_path / 'none'}: no such folder\n"


def test_emulated_steps_refuses_a_folder_named_twice(tmp_path):
    folder = stored_run(tmp_path / "run")
    err = one_line_error(run_tool(["-m", "experiments.emulated_steps", str(folder),
                                   f"{folder}/."]), 2)
    assert err.endswith("error: a folder is named twice: each grid counts once\n")
