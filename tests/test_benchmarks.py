"""The benchmarks' command lines: a bad flag is one line and exit status 2, before any run."""

import importlib.util
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
    ("async_ps", ["--seconds", "nan"], "--seconds"),
    ("async_ps", ["--model", "resnet"], "'resnet'"),
    ("async_ps", ["--json", str(BENCHMARKS)], "is not a file name"),
    ("sync_throughput", ["--ranks", "0"], "--ranks"),
    ("sync_throughput", ["--models", "resnet"], "'resnet'"),
    ("sync_throughput", ["--steps", "0"], "--steps"),
    ("sync_throughput", ["--num-samples", "10"], "exceeds the 10 samples"),
    ("sync_throughput", ["--json", "/no/such/dir/out.json"], "/no/such/dir"),
])
def test_bad_flag_is_one_line_and_status_2_before_any_run(name, argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(name).main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ": error: " in err[0] and named in err[0]


@pytest.mark.parametrize("argv, named", [
    (["--repeats", "0"], "--repeats"),
    (["--json", str(BENCHMARKS)], "is not a file name"),
    (["--json", "/no/such/dir/out.json"], "/no/such/dir"),
])
def test_simulator_benchmarks_check_their_flags_in_one_line(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load("sim_sync").parse_args("simulator speed", argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ": error: " in err[0] and named in err[0]


def test_sweep_table_of_one_rank_has_no_ratio_to_divide_by():
    run = {"backend": "gloo", "results": [
        {"algorithm": a, "bytes": 4096, "world_size": 1, "time_s": 1e-6, "algbw_Bps": 4e9,
         "busbw_Bps": 0.0} for a in ("ring", "backend")]}
    assert load("allreduce_sweep").table([run]).splitlines()[-1].endswith("| 0 B/s | - |")
