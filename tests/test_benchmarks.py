"""The benchmarks' command lines: a bad flag is one line and exit status 2, before any run."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    """A benchmark script as a module of its own name (``benchmarks/`` is not a package); the
    scripts put the repository on ``sys.path``, which is put back as it was."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


@pytest.mark.parametrize("name, argv, named", [
    ("allreduce_sweep", ["--engines", "torch", "--ranks", "0"], "--ranks"),
    ("allreduce_sweep", ["--engines", "torch", "--sizes", "6B"], "6 bytes"),
    ("allreduce_sweep", ["--engines", "torch", "--iters", "0"], "--iters"),
    ("allreduce_sweep", ["--engines", "torch", "--out-dir", __file__], "is not a folder"),
    ("async_ps", ["--compute-mean", "fast"], "'fast'"),
    ("async_ps", ["--procs", "1"], "--procs"),
    ("async_ps", ["--time", "nan"], "--time"),
    ("async_ps", ["--time", "99999999"], "at most 3600 s"),
    ("async_ps", ["--seed", "-1"], "seed '-1' must be from 0 to 2**63-1"),
    ("async_ps", ["--model", "resnet"], "'resnet'"),
    ("async_ps", ["--json", str(BENCHMARKS)], "is not a file name"),
    ("sync_throughput", ["--ranks", "0"], "--ranks"),
    ("sync_throughput", ["--models", "resnet"], "'resnet'"),
    ("sync_throughput", ["--steps", "0"], "--steps"),
    ("sync_throughput", ["--warmup", "-1"], "--warmup must"),
    ("sync_throughput", ["--num-samples", "10"], "exceeds the 10 samples"),
    ("sync_throughput", ["--json", "/no/such/dir/out.json"], "/no/such/dir"),
    ("sync_throughput", ["--num-samples", "1000000000000"], "do not fit in this machine's memory"),
    ("sync_throughput", ["--ranks", "abc"], "--ranks 'abc': expected comma-separated whole"),
    ("sync_throughput", ["--ranks", "2,,4"], "--ranks '2,,4': expected comma-separated whole"),
    ("sync_throughput", ["--emulate-compute", "80"], "--emulate-compute: time '80' needs a unit"),
    ("async_ps", ["--compute-mean", "80"], "--compute-mean: time '80' needs a unit"),
    ("async_ps", ["--json", "-"], "--json '-': this command writes files, not stdout"),
    ("sync_throughput", ["--json", "-"], "--json '-': this command writes files, not stdout"),
    ("allreduce_sweep", ["--engines", "torch", "--json", "-"], "--json '-': this command"),
])
def test_bad_flag_is_one_line_and_status_2_before_any_run(name, argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(name).main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ": error: " in err[0] and named in err[0]


@pytest.mark.parametrize("argv, named", [
    (["--repeats", "0"], "--repeats"),
    (["--repeats", "99999999999"], "from 1 to 1000"),
    (["--json", str(BENCHMARKS)], "is not a file name"),
    (["--json", "/no/such/dir/out.json"], "/no/such/dir"),
    (["--seed", "-1"], "seed '-1' must be from 0 to 2**63-1"),
    (["--json", "-"], "--json '-': this command writes files, not stdout"),
])
def test_simulator_benchmarks_check_their_flags_in_one_line(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load("sim_sync").parse_args("simulator speed", argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ": error: " in err[0] and named in err[0]


def test_sweep_passes_its_seed_to_every_run_and_writes_all_runs_in_one_json(monkeypatch, tmp_path):
    sweep = load("allreduce_sweep")
    commands = []

    def run(cmd, **kwargs):  # what real/allreduce.py writes, for the command it was given
        commands.append(cmd)
        with open(cmd[cmd.index("--json") + 1], "w") as handle:
            json.dump({"backend": "gloo", "results": []}, handle)
        return subprocess.CompletedProcess(cmd, 0)
    monkeypatch.setattr(sweep.subprocess, "run", run)
    folder = tmp_path / "not-yet"  # made by the sweep, --json inside it
    out = folder / "all.json"
    # a count or an engine named twice runs once: its second run would overwrite the first's
    # file and its table rows would stand twice
    assert sweep.main(["--engines", "torch,torch", "--ranks", "2,4,2", "--seed", "7",
                       "--out-dir", str(folder), "--json", str(out)]) == 0
    assert [cmd[cmd.index("--seed") + 1] for cmd in commands] == ["7", "7"]
    assert json.loads(out.read_text()) == {"runs": [{"backend": "gloo", "results": []}] * 2}


@pytest.mark.parametrize("sync, allreduce", [("ddp", "ring"), ("ddp,ddp", "backend,ring")])
def test_sync_throughput_refuses_an_allreduce_that_ddp_alone_would_ignore(
        sync, allreduce, monkeypatch, capsys):
    """DDP always runs the backend's all-reduce: ``--sync ddp --allreduce ring`` once ran the
    whole benchmark with the ring left out, and said nothing."""
    bench = load("sync_throughput")
    monkeypatch.setattr(bench, "run_config", lambda *args: pytest.fail("the benchmark started"))
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--sync", sync, "--allreduce", allreduce])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith(
        f": error: --allreduce {allreduce}: --sync ddp uses the backend's own all-reduce; add "
        f"another --sync mode (bucketed, flat, per-param) or leave --allreduce out")


def test_sweep_refuses_a_json_on_a_file_its_runs_write(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load("allreduce_sweep").main(["--engines", "torch", "--ranks", "2", "--out-dir",
                                      str(tmp_path), "--json",
                                      str(tmp_path / "allreduce_gloo_p2.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is the torch run on 2 ranks' file, which this run reads" in err[0]


def test_async_benchmark_passes_its_seed_and_window_to_the_trainer(monkeypatch):
    bench, commands = load("async_ps"), []

    def run(cmd, **kwargs):
        commands.append(cmd)
        with open(cmd[cmd.index("--json") + 1], "w") as handle:
            json.dump({"updates_per_s": 5.0, "staleness_mean": 1.0, "grad_bytes": 940584}, handle)
        return subprocess.CompletedProcess(cmd, 0)
    monkeypatch.setattr(bench.subprocess, "run", run)
    synced = []
    monkeypatch.setattr(bench, "sync_rate", lambda *args: synced.append(args) or 10.0)
    assert bench.main(["--procs", "2", "--time", "2s", "--seed", "9"]) == 0
    assert all(cmd[cmd.index("--seed") + 1] == "9" and cmd[cmd.index("--time") + 1] == "2.0s"
               for cmd in commands) and len(commands) == 3
    assert [args[-1] for args in synced] == [9]  # sync_rate(procs, compute, iterations, model, seed)


def test_sweep_table_of_one_rank_has_no_ratio_to_divide_by():
    run = {"backend": "gloo", "results": [
        {"algorithm": a, "bytes": 4096, "world_size": 1, "time_s": 1e-6, "algbw_Bps": 4e9,
         "busbw_Bps": 0.0} for a in ("ring", "backend")]}
    assert load("allreduce_sweep").table([run]).splitlines()[-1].endswith("| 0 B/s | - |")


def test_sync_throughput_reads_the_round_from_names_past_round_9(tmp_path):
    for sync, round_index, rate in [("ddp", 1, 100.0), ("ddp", 10, 400.0),
                                    ("per-param", 1, 50.0), ("per-param", 10, 100.0)]:
        (tmp_path / f"{sync}-backend-{round_index}.json").write_text(
            json.dumps({"sync": sync, "allreduce": "backend", "samples_per_s": rate}))
    runs = load("sync_throughput").load_runs(str(tmp_path))
    assert sorted((r["sync"], r["round"]) for r in runs) == [
        ("ddp", 1), ("ddp", 10), ("per-param", 1), ("per-param", 10)]


def test_sync_throughput_without_ddp_prints_its_rows_with_no_ratio(capsys):
    bench = load("sync_throughput")
    run = {"model": "mlp", "world_size": 2, "sync": "flat", "allreduce": "backend", "round": 0,
           "samples_per_s": 3000.0, "iteration_time_s": 0.02, "compute_time_s": 0.01,
           "comm_time_s": 0.005, "idle_time_s": 0.005}
    [row] = bench.summarise([run])
    bench.print_row(row)
    assert capsys.readouterr().out.split() == ["mlp", "2", "flat", "3000", "-", "-", "20.0",
                                               "10.0", "5.0", "5.0"]


def test_async_ps_run_that_times_no_update_is_one_line_and_status_1(monkeypatch, capsys):
    bench = load("async_ps")

    def finished_before_any_update(cmd, **kwargs):  # async_ps.py's summary of a too-short window
        with open(cmd[cmd.index("--json") + 1], "w") as handle:
            json.dump({"updates_per_s": None, "staleness_mean": None, "grad_bytes": 940584},
                      handle)
        return subprocess.CompletedProcess(cmd, 0)
    monkeypatch.setattr(bench.subprocess, "run", finished_before_any_update)
    monkeypatch.setattr(bench, "sync_rate", lambda *args: 10.0)
    assert bench.main(["--procs", "2", "--time", "0.001"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith(": error: the async run on 2 processes timed no "
                                             "update in 0.001 s: give a longer --time")


def test_async_ps_sync_run_whose_rank_fails_ends_at_once_not_after_600_s():
    code = ("import sys; sys.path.append('benchmarks'); import async_ps\n"
            "try:\n    async_ps.sync_rate(2, 'exp:bogus', 10, 'mlp', 0)\n"
            "except async_ps.BenchmarkError as error:\n    print('BenchmarkError:', error)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=BENCHMARKS.parent, capture_output=True,
                         text=True, timeout=300)
    assert "BenchmarkError: a synchronous SGD rank failed with status 1" in run.stdout, run.stderr


def _lose_folder_during_the_run(folder, result):
    def run(*args, **kwargs):
        if folder.exists():
            folder.rmdir()
        return result
    return run


@pytest.mark.parametrize("name, stand_in, result", [
    ("async_ps", "measure", ([], [])),
    ("sync_throughput", "run_config", []),
])
def test_json_that_cannot_be_written_after_the_run_is_one_line_and_status_1(
        name, stand_in, result, monkeypatch, tmp_path, capsys):
    bench, out = load(name), tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(bench, stand_in, _lose_folder_during_the_run(out, result))
    argv = ["--ranks", "2", "--models", "mlp"] if name == "sync_throughput" else ["--procs", "2"]
    assert bench.main([*argv, "--json", str(out / "r.json")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ": error: --json: " in err[0] and "r.json" in err[0]


def test_simulator_benchmark_json_that_cannot_be_written_after_the_run_is_one_line(
        monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench, out = load("sim_sync"), tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(bench, "pin_to_one_core", lambda: None)
    monkeypatch.setattr(bench, "time_large_run", lambda *args, **kwargs: (1.0, 1.0))
    monkeypatch.setattr(bench, "time_default_command", _lose_folder_during_the_run(out, (0.1, 0.1)))
    monkeypatch.setattr(sys, "argv", ["sim_sync.py", "--repeats", "1", "--json",
                                      str(out / "r.json")])
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("sim_sync.py: error: --json: ")
    assert "r.json" in err[0]
