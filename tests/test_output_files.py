"""Output files: checked before the work, written whole or not at all, never two on one path."""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from dist_helpers import REPO, child_env
from dsgd_sim.argparse_oneline import check_output_file, write_atomically


def test_a_write_that_fails_leaves_the_file_that_was_there_whole(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"kept": true}\n')
    os.chmod(path, 0o640)

    def cut_short(handle):
        handle.write('{"half": ')
        raise OSError(27, "File too large")

    with pytest.raises(OSError):
        write_atomically(path, cut_short)
    assert json.loads(path.read_text()) == {"kept": True}
    assert os.listdir(tmp_path) == ["run.json"]  # no part-written file left beside it
    write_atomically(path, lambda handle: handle.write('{"new": 1}\n'))
    assert json.loads(path.read_text()) == {"new": 1}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640  # the file keeps its mode


def test_a_new_output_gets_the_usual_mode_not_a_private_one(tmp_path):
    path = tmp_path / "new.json"
    write_atomically(path, lambda handle: handle.write("{}"))
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~mask


def test_a_file_system_that_takes_no_files_is_refused_before_the_work():
    # access() says yes to root everywhere; /proc takes no new files
    with pytest.raises(ValueError, match="cannot write into /proc"):
        check_output_file("--json", "/proc/dsgd-output.json")


def test_the_simulator_under_a_file_size_limit_keeps_the_old_output(tmp_path):
    # a full disk or a size limit met while writing once left the JSON cut short
    out = tmp_path / "run.json"
    out.write_text('{"kept": true}\n')
    done = subprocess.run(
        ["bash", "-c", f"ulimit -f 1; exec {sys.executable} -m dsgd_sim --mode sync "
                       f"--replicas 1,2,4,8,16,32,64 --iterations 200 --json {out}"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert json.loads(out.read_text()) == {"kept": True}
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


@pytest.mark.parametrize("argv", [
    ["-m", "dsgd_sim", "--iterations", "2", "--json", "{out}", "--trace", "{out}"],
    ["-m", "dsgd_sim", "--iterations", "2", "--trace", "{out}", "--plot", "{out}"],
    ["real/sync.py", "--steps", "2", "--json", "{out}", "--profile-out", "{out}"],
    ["real/async_ps.py", "--nproc-per-node", "2", "--updates", "2", "--json", "{out}",
     "--trace", "{out}"],
    ["real/allreduce.py", "--sizes", "4KB", "--json", "{out}", "--trace", "{out}"],
])
def test_two_outputs_on_one_path_are_refused(tmp_path, argv):
    out = str(tmp_path / "same.json")
    done = subprocess.run([sys.executable, *[a.replace("{out}", out) for a in argv]],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env())
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "name the same file" in errors[0], done.stderr
    assert not os.path.exists(out)


def test_a_trainers_summary_is_strict_json_even_with_a_diverged_loss_curve(tmp_path):
    """JSON has no Infinity or NaN: a diverged run's losses, however deep, are written as null."""
    from real.sync_report import write_json
    path = tmp_path / "run.json"
    inf, nan = float("inf"), float("nan")
    write_json(str(path), {"final_loss": inf, "steps": 3,
                           "loss_curve": [[0, 0.1, 2.5], [1, 0.2, inf], [2, 0.3, nan]]})

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")
    document = json.loads(path.read_text(), parse_constant=refuse)
    assert document == {"final_loss": None, "steps": 3,
                        "loss_curve": [[0, 0.1, 2.5], [1, 0.2, None], [2, 0.3, None]]}


def test_a_dash_is_refused_as_an_output_file_name_naming_the_flag():
    with pytest.raises(ValueError, match=r"^--trace '-': this command writes files, not stdout"):
        check_output_file("--trace", "-")
    check_output_file("--json", "./-")  # a file really named "-" can still be asked for


@pytest.mark.parametrize("argv, flag", [
    (["real/sync.py", "--nproc-per-node", "1", "--steps", "2", "--model", "mlp",
      "--no-progress", "--json", "-"], "--json"),
    (["real/async_ps.py", "--nproc-per-node", "2", "--updates", "4", "--model", "mlp",
      "--no-progress", "--json", "-"], "--json"),
    (["real/allreduce.py", "--iters", "1", "--warmup", "0", "--sizes", "1KB", "--json", "-"],
     "--json"),
    (["real/allreduce.py", "--iters", "1", "--warmup", "0", "--sizes", "1KB", "--trace", "-"],
     "--trace"),
    (["experiments/run.py", "--report-only", "--out", "{grid}", "--json", "-"], "--json"),
    (["experiments/run.py", "--report-only", "--out", "{grid}", "--trace", "-"], "--trace"),
    (["-m", "experiments.grids", "{grid}", "--json", "-"], "--json"),
    (["-m", "experiments.floor", "{grid}", "--json", "-"], "--json"),
    (["-m", "real.testbed", "calibrate", "--json", "-"], "--json"),
    (["experiments/after_pause.py", "--json", "-"], "--json"),
    (["benchmarks/sim_sync.py", "--json", "-"], "--json"),
    (["benchmarks/async_ps.py", "--json", "-"], "--json"),
    (["benchmarks/sync_throughput.py", "--json", "-"], "--json"),
    (["benchmarks/allreduce_sweep.py", "--engines", "torch", "--json", "-"], "--json"),
])
def test_a_dash_for_an_output_is_one_line_and_no_file_named_dash(tmp_path, argv, flag):
    """Only ``python -m dsgd_sim --json -`` writes to stdout; every other tool once made a file
    named ``-`` in the current folder and said nothing."""
    grid = tmp_path / "grid"  # a stored grid, copied: the run must leave it as it was
    if "{grid}" in argv:
        shutil.copytree(os.path.join(REPO, "experiments", "results", "quick-48f9159"), grid)
    work = tmp_path / "work"
    work.mkdir()
    argv = [a.replace("{grid}", str(grid)) for a in argv]
    argv = [os.path.join(REPO, a) if a.endswith(".py") else a for a in argv]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120,
                          cwd=work, env=child_env())
    assert done.returncode == 2, done.stderr
    err = done.stderr.splitlines()
    assert len(err) == 1 and f": error: {flag} '-': this command writes files" in err[0], err
    assert not os.listdir(work) and not (grid / "-").exists()


def test_the_simulator_still_writes_its_json_to_stdout_for_a_dash(tmp_path):
    done = subprocess.run([sys.executable, "-m", "dsgd_sim", "--iterations", "2", "--json", "-"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=child_env())
    assert done.returncode == 0, done.stderr
    assert "sync" in json.loads(done.stdout) and not os.listdir(tmp_path)
