"""The command line: the default run, JSON schema, sweeps, and one-line errors with exit status 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsgd_sim import AsyncConfig, ClusterConfig, from_preset
from dsgd_sim.cli import main, parse_replicas

SYNC_KEYS = {"iteration_time_s", "iteration_time_p50_s", "iteration_time_p99_s", "compute_time_s",
             "comm_time_s", "exposed_comm_s", "speedup", "efficiency", "samples_per_s",
             "algbw_Bps", "busbw_Bps"}
CONFIG_KEYS = {"replicas", "bandwidth_bps", "latency_s", "grad_bytes", "algorithm", "iterations",
               "seed"}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "dsgd_sim", *args], capture_output=True,
                          text=True, timeout=120)


def test_default_run_prints_a_readable_table():
    done = run_cli("--replicas", "16", "--bandwidth", "10Gbps")
    assert done.returncode == 0, done.stderr
    assert "16 replicas" in done.stdout and "10 Gbps" in done.stdout
    for word in ("iteration time", "compute", "exposed comm", "idle", "busbw", "speedup"):
        assert word in done.stdout


def test_json_has_the_documented_schema(tmp_path):
    out = tmp_path / "run.json"
    assert main(["--replicas", "4", "--bandwidth", "25Gbps", "--latency", "5us",
                 "--grad-bytes", "10MB", "--iterations", "7", "--seed", "3",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert CONFIG_KEYS <= data["config"].keys() and SYNC_KEYS <= data["sync"].keys()
    assert data["config"]["bandwidth_bps"] == 25e9
    assert data["config"]["latency_s"] == 5e-6
    assert data["config"]["grad_bytes"] == 10_000_000
    sync = data["sync"]
    assert sync["busbw_Bps"] == pytest.approx(sync["algbw_Bps"] * 2 * 3 / 4)
    # Ring on 4 replicas: 6 steps of 5 us and 2(p - 1)/p of the 10 MB at 25 Gbps, so busbw is
    # the link's 3.125 GB/s less the latency terms (3.1056 GB/s; 3.125 without them).
    ring_s = 6 * 5e-6 + 1.5 * 8 * 10_000_000 / 25e9
    assert sync["busbw_Bps"] == pytest.approx(1.5 * 10_000_000 / ring_s, rel=1e-9)


def test_a_parameter_server_run_has_no_all_reduce_bus_bandwidth(tmp_path, capsys):
    out = tmp_path / "ps.json"
    assert main(["--mode", "sync", "--algorithm", "ps", "--replicas", "4", "--iterations", "3",
                 "--json", str(out)]) == 0
    sync = json.loads(out.read_text())["sync"]
    assert sync["busbw_Bps"] is None and sync["algbw_Bps"] > 0
    assert "busbw n/a (ps)" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--replicas", "1"], ["--replicas", "4", "--grad-bytes", "0"]])
def test_a_run_that_communicates_nothing_has_no_bandwidth(argv, tmp_path, capsys):
    # one replica, or no gradient: algbw and busbw came out 0 B/s, a rate of nothing over no time
    out = tmp_path / "none.json"
    assert main(["--mode", "sync", "--iterations", "3", *argv, "--json", str(out)]) == 0
    sync = json.loads(out.read_text())["sync"]
    assert sync["comm_time_s"] == 0 and sync["algbw_Bps"] is None and sync["busbw_Bps"] is None
    assert "algbw n/a, busbw n/a" in capsys.readouterr().out


def test_output_into_a_closed_pipe_ends_quietly_and_still_writes_its_json(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` leaves it once it has its lines
    out = tmp_path / "run.json"
    try:
        # a sweep of 200 runs: its table (about 19 kB) is more than stdout buffers, so the
        # printing itself meets the closed pipe, before the JSON is written
        done = subprocess.run([sys.executable, "-m", "dsgd_sim", "--mode", "sync",
                               "--replicas", "1,2,...,200", "--iterations", "3",
                               "--json", str(out)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 1 and done.stderr == ""
    assert len(json.loads(out.read_text())["runs"]) == 200


def test_json_to_stdout_is_pure_json():
    done = run_cli("--replicas", "2", "--iterations", "3", "--json", "-")
    assert done.returncode == 0
    assert SYNC_KEYS <= json.loads(done.stdout)["sync"].keys()


def test_sweep_writes_one_run_per_replica_count(tmp_path):
    out = tmp_path / "sweep.json"
    assert main(["--replicas", "1,2,4,...,32", "--iterations", "3", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["config"]["replicas"] for r in runs] == [1, 2, 4, 8, 16, 32]
    assert runs[0]["sync"]["speedup"] == pytest.approx(1.0)


def test_trace_and_plot_files_are_written(tmp_path):
    trace, plot = tmp_path / "t.json", tmp_path / "p.png"
    assert main(["--replicas", "4", "--iterations", "3", "--trace", str(trace),
                 "--plot", str(plot)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "communication" for e in events)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sweep_named_out_of_order_runs_in_order_and_traces_its_largest_count(tmp_path):
    trace, out = tmp_path / "t.json", tmp_path / "o.json"
    assert main(["--mode", "sync", "--replicas", "8,2", "--iterations", "2", "--trace", str(trace),
                 "--json", str(out)]) == 0
    assert [run["config"]["replicas"] for run in json.loads(out.read_text())["runs"]] == [2, 8]
    tracks = {e["tid"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert len(tracks) == 8


@pytest.mark.parametrize("text, expected", [
    ("16", [16]), ("1,2,4", [1, 2, 4]), ("1,2,4,...,64", [1, 2, 4, 8, 16, 32, 64]),
    ("2,4,...,16", [2, 4, 8, 16]), ("4,8,12,...,20", [4, 8, 12, 16, 20]),
    ("1,3,...,7", [1, 3, 5, 7]), ("1,2,...,5", [1, 2, 3, 4, 5]),  # geometric would not reach
    ("2,3,...,6", [2, 3, 4, 5, 6]),  # ratio 1.5: 4.5 is no replica count, so arithmetic
    ("64,2", [2, 64]), ("4,2,4", [2, 4]),  # a sweep runs in increasing order, each count once
])
def test_replica_lists_and_series(text, expected):
    assert parse_replicas(text) == expected


BAD_INPUTS = [
    (["--replicas", "0"], "'0'"), (["--replicas", "-4"], "'-4'"), (["--replicas", "2.5"], "'2.5'"),
    (["--replicas", "10000000000"], "'10000000000'"), (["--replicas", "many"], "'many'"),
    (["--replicas", ""], "''"), (["--replicas", "nan"], "'nan'"),
    (["--replicas", "1,2,4,...,1000"], "1000"),
    (["--bandwidth", "10"], "'10'"), (["--bandwidth", "10Gbpx"], "'10Gbpx'"),
    (["--bandwidth", "nan"], "'nan'"), (["--bandwidth", ""], "''"),
    (["--bandwidth", "0Gbps"], "0"), (["--latency", "5"], "'5'"), (["--latency", "-1ms"], "'-1ms'"),
    (["--grad-bytes", "25"], "'25'"), (["--params", "lots"], "'lots'"),
    (["--compute", "80"], "'80'"), (["--compute", "gamma:80ms"], "'gamma'"),
    (["--compute", "exp:80ms,1ms"], "'exp:80ms,1ms'"), (["--compute", ""], "''"),
    (["--iterations", "0"], "'0'"), (["--iterations", "1e99"], "'1e99'"),
    (["--replicas", "4", "--k-sync", "5"], "K=5"), (["--k-sync", "0"], "'0'"),
    (["--preset", "alexnet"], "'alexnet'"), (["--algorithm", "butterfly"], "'butterfly'"),
    (["--stragglers", "2:3"], "'2:3'"), (["--stragglers", "0.1:0.5"], "'0.1:0.5'"),
    (["--cores", "0"], "'0'"), (["--bucket-size", "0"], "0"), (["--seed", "x"], "'x'"),
    (["--profile", "/nonexistent/profile.json"], "/nonexistent/profile.json"),
    (["--preset", ""], "''"), (["--profile", ""], "''"), (["--seed", "-1"], "'-1'"),
    (["--seed", "1.5"], "'1.5'"), (["--json", ""], "''"), (["--trace", ""], "''"),
    (["--json", "."], "'.'"), (["--plot", "timeline.xyz"], "'xyz'"),
    (["--plot", "/nonexistent/dir/p.png"], "/nonexistent/dir"),
    (["--stragglers", "1:1e308"], "'1:1e308'"), (["--grad-bytes", "1e30B"], "'1e30B'"),
    (["--compute", "1e300s"], "'1e300s'"), (["--latency", "1e9s"], "'1e9s'"),
    (["--bandwidth", "1e-300bps"], "'1e-300bps'"), (["--bandwidth", "1e300Gbps"], "'1e300Gbps'"),
    (["--ps-bandwidth", "1e-300bps"], "'1e-300bps'"),
    (["--ps-memory-bandwidth", "1e-300bps", "--mode", "async"], "'1e-300bps'"),
    (["--ps-service-time", "1e308s", "--mode", "async"], "'1e308s'"),
    (["--compute", "lognormal:80ms,1e5"], "'lognormal:80ms,1e5'"),
    (["--compute", "normal:80ms,1e307s"], "'normal:80ms,1e307s'"),
    (["--compute", "normal:1ms,1s"], "'normal:1ms,1s': a normal compute time's standard deviation"),
    (["--compute", "1e-320s"], "'1e-320s' is too short (mean at least 1e-09 s)"),
    # flags the run would ignore
    (["--mode", "async", "--algorithm", "tree"], "--algorithm applies to the sync run"),
    (["--mode", "async", "--k-sync", "2"], "--k-sync applies to the sync run"),
    (["--mode", "async", "--overlap"], "--overlap applies to the sync run"),
    (["--mode", "sync", "--servers", "2"], "--servers applies to the async run"),
    (["--mode", "sync", "--max-staleness", "2"], "--max-staleness applies to the async run"),
    (["--mode", "sync", "--ps-bandwidth", "1Gbps"], "--ps-bandwidth applies to a parameter server"),
    (["--mode", "sync", "--ps-service-time", "1ms"],
     "--ps-service-time applies to a parameter server"),
    (["--mode", "sync", "--algorithm", "tree", "--ps-memory-bandwidth", "10GB/s"],
     "--ps-memory-bandwidth applies to a parameter server"),
    (["--lr", "0.5"], "--lr applies to --replay"),
    (["--staleness-lr"], "--staleness-lr applies to --replay"),
    (["--overlap"], "without --bucket-size the gradient is one bucket"),
    (["--iterations", "2000000"], "'2000000'"),
    (["--replicas", "65536", "--iterations", "1000"], "65,536,000 replica-iterations"),
    (["--mode", "async", "--ps-service-time", "1ms", "--ps-memory-bandwidth", "10GB/s"],
     "give one of them"),
    (["--stragglers", "0.1"], "'0.1' must be FRACTION:FACTOR"),
]


@pytest.mark.parametrize("flags, apply_s", [
    ([], 3 * 102_228_128 / 20e9),  # the async server's rule: 3 x the gradient at 20 GB/s
    (["--ps-memory-bandwidth", "10GB/s"], 3 * 102_228_128 / 10e9),
    (["--ps-service-time", "40ms"], 0.04),
])
def test_the_sync_parameter_server_applies_as_the_async_one_does(flags, apply_s, tmp_path):
    path = tmp_path / "ps.json"
    assert main(["--mode", "both", "--algorithm", "ps", "--replicas", "4", "--iterations", "3",
                 "--json", str(path), *flags]) == 0
    data = json.loads(path.read_text())
    assert data["config"]["grad_bytes"] == 102_228_128
    assert data["config"]["ps_apply_s"] == pytest.approx(apply_s, rel=1e-12)
    assert data["async"]["service_time_s"] == pytest.approx(apply_s, rel=1e-12)
    assert data["sync"]["idle_time_s"] == pytest.approx(apply_s, rel=1e-9)


@pytest.mark.parametrize("args", [
    ["--mode", "sync", "--algorithm", "ps", "--ps-bandwidth", "1Gbps", "--k-sync", "2"],
    ["--mode", "sync", "--algorithm", "ps", "--ps-service-time", "2ms"],
    ["--mode", "async", "--servers", "2", "--ps-bandwidth", "1Gbps", "--max-staleness", "3"],
    ["--mode", "both", "--algorithm", "tree", "--servers", "2", "--replay", "--lr", "1"],
    # the replay draws every mode's curve, whatever --mode
    ["--mode", "async", "--replay", "--k-sync", "2", "--algorithm", "tree"],
    ["--mode", "sync", "--replay", "--staleness-lr", "--max-staleness", "2", "--servers", "2"],
])
def test_flags_of_the_modes_that_run_are_taken(args, capsys):
    assert main(args + ["--replicas", "4", "--iterations", "2"]) == 0
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("args, named", BAD_INPUTS)
def test_bad_input_gives_one_line_and_status_2(args, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--iterations", "2"] if "--iterations" not in args else args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsgd_sim: error:")
    assert named in err


@pytest.mark.parametrize("content", ["{not json", "[]", '{"compute_s": []}',
                                     '{"compute_s": [0.1], "layers": [{"grad_bytes": -5}]}',
                                     '{"compute_s": ["fast"], "grad_bytes": 10}',
                                     '{"compute_s": [1e308], "grad_bytes": 10}',
                                     '{"compute_s": [0.01], "grad_bytes": 1e308}',
                                     pytest.param("[" * 100_000 + "]" * 100_000,
                                                  id="nested-past-the-parser"),
                                     pytest.param('{"compute_s": [0.01], "grad_bytes": 1'
                                                  + "0" * 400 + "}", id="huge-grad-bytes"),
                                     pytest.param('{"compute_s": [0.01], "grad_bytes": 1, '
                                                  '"batch_size": 1' + "0" * 400 + "}",
                                                  id="huge-batch"),
                                     # once taken as 0 B, and as 3e15 B over the 1e15 cap
                                     '{"compute_s": [0.01], "grad_bytes": 0.5}',
                                     '{"compute_s": [0.01], "layers": [{"grad_bytes": 1e15}, '
                                     '{"grad_bytes": 1e15}, {"grad_bytes": 1e15}]}',
                                     # once taken, and every sync figure came out NaN
                                     '{"compute_s": [5e-324], "layers": [{"grad_bytes": 1000, '
                                     '"backward_s": 1.0}, {"grad_bytes": 1000, "backward_s": 1.0}]}',
                                     # once taken: one replica drawing a 0 s step divided by 0
                                     '{"compute_s": [0, 1.0], "grad_bytes": 4}',
                                     # once the header's "workload: None", or split in two
                                     '{"compute_s": [0.01], "grad_bytes": 4, "model": null}',
                                     '{"compute_s": [0.01], "grad_bytes": 4, "model": "a\\nb"}'])
def test_malformed_profile_gives_one_line_and_status_2(tmp_path, content):
    path = tmp_path / "profile.json"
    path.write_text(content)
    done = run_cli("--profile", str(path), "--iterations", "2")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and str(path) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_profile_source_of_a_long_command_line_is_taken_on_one_line(tmp_path):
    # cuda/bench.py keeps its whole command line as the source; a 200-character cap refused it
    source = "python cuda/bench.py " + "--sizes 64,128,256 " * 20 + "\n--json out.json"
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"compute_s": [0.01], "grad_bytes": 4, "model": "conv",
                                "source": source}))
    done = run_cli("--profile", str(path), "--iterations", "2", "--mode", "sync")
    assert done.returncode == 0, done.stderr
    from dsgd_sim.workload import load_profile
    assert load_profile(str(path)).source == "profile " + " ".join(source.split())  # one line


def test_profile_sets_gradient_layers_and_compute(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({
        "format": "dsgd-profile/1", "model": "tiny", "batch_size": 16,
        "layers": [{"name": "a", "grad_bytes": 4000, "backward_s": 0.002},
                   {"name": "b", "grad_bytes": 6000, "backward_s": 0.004}],
        "compute_s": [0.01, 0.012, 0.011]}))
    out = tmp_path / "run.json"
    assert main(["--profile", str(path), "--replicas", "2", "--iterations", "50",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["grad_bytes"] == 10_000 and data["config"]["batch_size"] == 16
    assert 0.01 <= data["sync"]["compute_time_s"] <= 0.012


def test_round_costs_from_a_probe_file_time_every_round_as_measured(tmp_path):
    table = tmp_path / "rounds.json"
    table.write_text(json.dumps({"probe": "ring rounds", "results": [
        {"bytes": 1_000_000, "first_s": 0.100, "next_s": 0.110},
        {"bytes": 4_000_000, "first_s": 0.400, "next_s": 0.440}]}))
    out = tmp_path / "run.json"
    assert main(["--replicas", "4", "--grad-bytes", "8MB", "--compute", "50ms", "--mode", "sync",
                 "--iterations", "3", "--round-costs", str(table), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    # ring on 4 replicas: 6 rounds of 2 MB, the first at 0.2 s, the next at 0.22 s each
    assert data["sync"]["iteration_time_s"] == pytest.approx(0.050 + 0.200 + 5 * 0.220)
    assert data["config"]["round_costs"][0] == {"bytes": 1_000_000, "first_s": 0.1, "next_s": 0.11}


@pytest.mark.parametrize("content,named", [
    (None, "cannot read"),
    ("{not json", "not JSON"),
    ('{"results": [{"bytes": 64, "first_s": 0.1, "next_s": 0.1}]}', "at least 2 sizes"),
    ('{"rows": []}', "'results'"),
    pytest.param("[" * 100_000 + "]" * 100_000, "not JSON", id="nested-past-the-parser"),
    ('[{"bytes": NaN, "first_s": 0.1, "next_s": 0.1}, {"bytes": 2000, "first_s": 0.1, '
     '"next_s": 0.1}]', "must be increasing, from 1 B"),
    ('[{"bytes": 1, "first_s": 0.1, "next_s": 0.1}, {"bytes": 1e300, "first_s": 0.1, '
     '"next_s": 0.1}]', "to 1e+15 B"),
    ('{"world_size": "x", "results": [{"bytes": 1, "first_s": 0.1, "next_s": 0.1}, '
     '{"bytes": 2, "first_s": 0.1, "next_s": 0.1}]}', "world_size must be the ranks"),
    ('{"world_size": 0, "results": [{"bytes": 1, "first_s": 0.1, "next_s": 0.1}, '
     '{"bytes": 2, "first_s": 0.1, "next_s": 0.1}]}', "from 2 to 1,048,576, got 0"),
    pytest.param('[{"bytes": 1, "first_s": 0.1, "next_s": 0.1}, {"bytes": 1' + "0" * 400
                 + ', "first_s": 0.1, "next_s": 0.1}]', "too large", id="huge-size"),
    # these once ran to every figure NaN (and NaN in the JSON), or were read without a word
    ('[{"bytes": 1, "first_s": 1e308, "next_s": 1e308}, {"bytes": 2, "first_s": 1e308, '
     '"next_s": 1e308}]', "at most 1e+06"),
    ('[{"bytes": 1, "first_s": 1e-3, "next_s": 1e-3}, {"bytes": 2, "first_s": 1e5, '
     '"next_s": 1e5}]', "its last two sizes, extended"),
    ('[{"bytes": true, "first_s": 1, "next_s": 1}, {"bytes": 2, "first_s": 1, "next_s": 1}]',
     "true or false"),
    ('[{"bytes": 1, "first_s": 1, "next_s": 1, "reduce_s": 0}, {"bytes": 2, "first_s": 1, '
     '"next_s": 1}]', "reduce_s on 1 of 2 rows"),
])
def test_bad_round_costs_file_is_one_line_and_status_2(tmp_path, content, named):
    path = tmp_path / "rounds.json"
    if content is not None:
        path.write_text(content)
    done = run_cli("--round-costs", str(path), "--iterations", "2")
    assert done.returncode == 2
    assert named in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_round_costs_used_beyond_what_they_measured_say_so_on_stderr(tmp_path):
    table = tmp_path / "rounds.json"
    table.write_text(json.dumps({"probe": "ring rounds", "world_size": 2, "results": [
        {"bytes": 1_000_000, "first_s": 0.100, "next_s": 0.110},
        {"bytes": 4_000_000, "first_s": 0.400, "next_s": 0.440}]}))
    done = run_cli("--replicas", "2,4", "--grad-bytes", "20MB", "--mode", "sync",
                   "--iterations", "2", "--round-costs", str(table))
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    # 2 replicas match the table's ranks; a 2-replica ring of 20 MB sends rounds of 10 MB
    assert len(notes) == 2
    assert "measured on 2 ranks" in notes[0] and "the 4-replica all-reduce" in notes[0]
    assert "10,000,000 B" in notes[1] and "4,000,000 B" in notes[1]
    quiet = run_cli("--replicas", "2", "--grad-bytes", "8MB", "--mode", "sync", "--iterations",
                    "2", "--round-costs", str(table))
    assert quiet.returncode == 0 and "note:" not in quiet.stderr


@pytest.mark.parametrize("flag, value", [("--bandwidth", "1Gbps"), ("--latency", "1ms")])
def test_round_costs_refuse_a_network_the_sync_run_would_not_use(tmp_path, flag, value):
    table = tmp_path / "rounds.json"
    table.write_text('[{"bytes": 64, "first_s": 0.1, "next_s": 0.1}, '
                     '{"bytes": 128, "first_s": 0.2, "next_s": 0.2}]')
    done = run_cli("--round-costs", str(table), "--mode", "sync", flag, value)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"{flag}: with --round-costs" in done.stderr
    # where an async run uses the network too, the flag counts
    assert run_cli("--round-costs", str(table), "--iterations", "2", flag, value).returncode == 0


def test_round_costs_refuse_the_parameter_server_which_has_no_rounds(tmp_path):
    path = tmp_path / "rounds.json"
    path.write_text('[{"bytes": 64, "first_s": 0.1, "next_s": 0.1}, '
                    '{"bytes": 128, "first_s": 0.2, "next_s": 0.2}]')
    done = run_cli("--round-costs", str(path), "--algorithm", "ps")
    assert done.returncode == 2 and "ps algorithm" in done.stderr


def test_a_seed_is_read_exactly_not_through_a_float(tmp_path):
    out = tmp_path / "run.json"
    # 2**53 + 1 (a float rounds it), the maximum, and a whole number written as a float
    for seed, expected in (("9007199254740993", 2**53 + 1), ("9223372036854775807", 2**63 - 1),
                           ("1e3", 1000)):
        assert main(["--mode", "sync", "--iterations", "1", "--seed", seed,
                     "--json", str(out)]) == 0
        assert json.loads(out.read_text())["config"]["seed"] == expected


def test_a_full_disk_names_the_output_it_could_not_write(tmp_path, monkeypatch, capsys):
    import errno
    from dsgd_sim import cli

    def full_disk(args, runs):  # what a write to a full disk raises: no file name in it
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(cli, "write_outputs", full_disk)
    out = tmp_path / "run.json"
    assert main(["--iterations", "2", "--json", str(out)]) == 1
    assert f"cannot write {out}: No space left on device" in capsys.readouterr().err


@pytest.mark.parametrize("argv, header", [
    (["--mode", "sync", "--replicas", "1"], "synchronous SGD, ring, 1 replica, "),
    (["--mode", "sync", "--replicas", "2"], "synchronous SGD, ring, 2 replicas, "),
    (["--mode", "async", "--replicas", "1"], "asynchronous SGD, parameter server, 1 worker, "),
    (["--mode", "both", "--replicas", "1"], "(parameter server), 1 replica, "),
])
def test_one_replica_or_worker_is_said_in_the_singular(argv, header, capsys):
    assert main([*argv, "--iterations", "4"]) == 0
    out = capsys.readouterr().out
    assert header in out
    assert "1 replicas" not in out and "1 workers" not in out


@pytest.mark.parametrize("flag", ["--json", "--trace"])
def test_an_output_on_the_round_costs_file_it_reads_is_refused_and_the_file_kept(tmp_path, flag):
    table = tmp_path / "rounds.json"
    table.write_text(json.dumps({"world_size": 4, "results": [
        {"bytes": 1_000_000, "first_s": 0.1, "next_s": 0.11}]}))
    before = table.read_text()
    done = run_cli("--replicas", "4", "--iterations", "2", "--round-costs", str(table),
                   flag, str(table))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "is the --round-costs file, which this run reads" in done.stderr
    assert table.read_text() == before


def test_only_json_writes_to_stdout():
    done = run_cli("--iterations", "2", "--trace", "-")
    assert done.returncode == 2 and "--trace '-': only --json writes to stdout" in done.stderr


def test_a_replay_that_diverges_is_one_line_and_status_2_with_no_output(tmp_path):
    out = tmp_path / "run.json"
    done = run_cli("--iterations", "3", "--replay", "--lr", "1e308", "--json", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--lr 1e+308: the sync replay diverged after 1 update (its weights" in done.stderr
    assert not out.exists()  # no NaN or Infinity written as if it were JSON


def test_a_replay_whose_loss_only_grows_says_so_and_names_no_winner(capsys):
    # a step too large, whose losses stay finite: every mode "reached" the starting loss at
    # 0 s, and the line named the first of them the fastest
    assert main(["--iterations", "5", "--replicas", "4", "--replay", "--lr", "1e300"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("convergence: not every mode got below the starting loss 0.6931")
    assert "first" not in line


@pytest.mark.parametrize("flag", ["--profile", "--round-costs"])
@pytest.mark.parametrize("kind", ["device", "huge"])
def test_an_input_too_large_is_one_line_not_the_memory_filled(tmp_path, flag, kind):
    path = "/dev/zero"  # read whole, it would fill the memory
    if kind == "huge":
        path = tmp_path / "input.json"
        with open(path, "wb") as handle:
            handle.truncate(65 << 20)  # sparse: no disk spent
    done = run_cli("--iterations", "2", flag, str(path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "larger than 64 MiB" in done.stderr


def test_an_input_through_a_pipe_is_read_as_it_comes(tmp_path):
    import os
    pipe = tmp_path / "profile"
    os.mkfifo(pipe)  # as a shell's <(cat profile.json) hands it over
    profile = Path(__file__).resolve().parent.parent / "cuda/results/h100-profile.json"
    writer = subprocess.Popen(["sh", "-c", f"cat {profile} > {pipe}"])
    done = run_cli("--iterations", "2", "--profile", str(pipe))
    writer.wait(timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv, said", [
    (["--replicas", "65536", "--iterations", "700", "--overlap", "--bucket-size", "1MB"],
     "bucket transfers, at most 200,000,000"),
    (["--replicas", "65536", "--iterations", "700", "--cores", "16"],
     "replica-iterations, at most 5,000,000 with --cores"),
    # a parameter server simulates every replica's push (~25,000 a second): 34 minutes
    (["--replicas", "1000", "--iterations", "50000", "--algorithm", "ps"],
     "1,000 replicas and a parameter server are 50,000,000 replica-iterations, at most "
     "5,000,000 with --algorithm ps"),
])
def test_a_sync_run_too_long_to_simulate_is_refused_at_once(argv, said):
    done = run_cli("--mode", "sync", *argv)  # each would run for half an hour or more
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr


@pytest.mark.parametrize("argv, said", [
    # both modes: the async run serves as many gradients as the sync run uses, 1024 x 10,000
    (["--replicas", "1024", "--iterations", "10000"], "about 10,241,024 gradients"),
    # 10,000 updates, each with the other 1023 workers' gradients dropped as too stale
    (["--mode", "async", "--replicas", "1024", "--max-staleness", "0", "--iterations", "10000"],
     "about 10,241,024 gradients"),
    # sync mode's replay simulates the async run (16M updates) and replays its 16M steps
    (["--mode", "sync", "--replay", "--replicas", "16", "--iterations", "1000000"],
     "about 32,000,016 gradients"),
    # every run of a sweep is small; together they are not
    (["--mode", "sync", "--replicas", "1,3,...,65535", "--iterations", "1"],
     "1,073,741,824 replica-iterations summed over 32,768 runs"),
    # each run starts its ~65,536 workers, however few updates it serves: ~3.5 s a run
    (["--mode", "async", "--replicas", "65506,65507,...,65536", "--iterations", "1"],
     "about 2,031,182 gradients"),
    # with --cores each run is within its bound, the sweep's three together are not
    (["--mode", "sync", "--replicas", "65534,65535,65536", "--iterations", "30", "--cores", "16"],
     "5,898,150 replica-iterations, summed over 3 runs, at most 5,000,000 with --cores"),
])
def test_a_command_whose_runs_together_are_too_long_to_simulate_is_refused_at_once(argv, said):
    done = run_cli(*argv)  # each ran past two minutes, and to gigabytes, before the check
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr


def test_an_async_runs_gradients_count_those_dropped_as_too_stale():
    from dsgd_sim.cli import gradient_events
    workload = from_preset("resnet50")
    cluster = ClusterConfig(replicas=64)
    events = [gradient_events(AsyncConfig(cluster, workload, updates=100, max_staleness=s))
              for s in (None, 0, 7, 63, 100)]
    assert events == [64 + 100, 64 + 6400, 64 + 800, 64 + 100, 64 + 100]  # each worker's first
