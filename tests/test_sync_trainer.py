"""real/sync.py end to end on CPU with Gloo (2 ranks): equivalence with one process, identical
replicas, restart after SIGKILL under torchrun, reports, and one clear line on bad input."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.multiprocessing as mp

from real.checkpoint import load_latest_checkpoint
from real.comm import init
from real.data import load_dataset
from real.local_launch import free_port
from real.models import build_model
from real.replica_state import weights_sha256
from real.sync import pick_device, train
from real.sync_config import SyncConfig, check_outputs, parse_args
from tests.dist_helpers import have_mpiexec, run_into_closed_pipe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNC = os.path.join(REPO, "real", "sync.py")
MODES = [("per-param", "backend"), ("flat", "backend"), ("bucketed", "backend"), ("ddp", "backend"),
         ("bucketed", "ring"), ("flat", "ring"), ("per-param", "naive")]
# torchrun's agent shares its rendezvous store with the workers by default, and restarted workers
# then read the previous attempt's Gloo addresses from it (pytorch/pytorch#135712): connection
# refused, or a hang in connectFullMesh. A store per worker group avoids it.
RESTARTABLE_TORCHRUN_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# The default task (lenet, synthetic teacher task, batch 32, lr 0.05) on 2 ranks: the loss starts
# at ln 10 and is well below the label entropy (2.27: class frequencies alone) by step 150.
LEARNING_STEPS, LEARNING_LOSS_TARGET = 150, 1.9
SMALL = dict(model="lenet", num_samples=96, batch_size=4, steps=5, warmup_steps=0, progress=False,
             bucket_mb=0.05)  # small buckets: lenet's 0.25 MB of gradients spread over several


def run_cli(args, timeout=120, launcher=None):
    """Run real/sync.py (through ``launcher`` if given); the finished process."""
    command = (launcher or [sys.executable]) + [SYNC, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=env)


def torchrun(nproc, *extra):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), *extra]


def error_lines(process):
    return [line for line in process.stderr.splitlines() if line.startswith("sync.py: error")]


def _modes_worker(rank, world_size, port, out_dir):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    comm = init("torch", "gloo", timeout_s=30, check_sizes=False)
    try:
        dataset = load_dataset(SyncConfig().dataset_spec, SMALL["num_samples"], 0)
        for sync, allreduce in MODES:
            config = SyncConfig(**SMALL, sync=sync, allreduce=allreduce, check_replicas=True,
                                checkpoint_dir=os.path.join(out_dir, f"{sync}-{allreduce}"))
            train(config, comm, dataset, torch.device("cpu"))
        emulated = SyncConfig(**{**SMALL, "model": "mlp", "steps": 3}, emulate_compute_s=0.03,
                              json=os.path.join(out_dir, "emulated.json"),
                              trace=os.path.join(out_dir, "emulated.trace.json"))
        train(emulated, comm, dataset, torch.device("cpu"))
        one = comm.new_group([0])
        if one is not None:  # the same samples, one process, batch world_size × B
            reference = {**SMALL, "batch_size": SMALL["batch_size"] * world_size}
            config = SyncConfig(**reference, sync="flat",
                                checkpoint_dir=os.path.join(out_dir, "one-process"))
            train(config, one, dataset, torch.device("cpu"))
        comm.barrier()  # leave together
    finally:
        comm.close()
    # and by the interpreter's own exit (not os._exit, as real/sync.py's ranks): comm.close()
    # must leave nothing of Gloo's to its teardown, which aborted a rank now and then


@pytest.fixture(scope="module")
def mode_runs(tmp_path_factory):
    """Final weights of every --sync mode on 2 ranks (each checked for identical replicas after
    every step), and of one process with the doubled batch."""
    out_dir = tmp_path_factory.mktemp("modes")
    mp.start_processes(_modes_worker, args=(2, free_port("127.0.0.1"), str(out_dir)), nprocs=2,
                       start_method="spawn")
    weights = {"emulated": json.load(open(out_dir / "emulated.json")),
               "emulated trace": json.load(open(out_dir / "emulated.trace.json"))}
    for name in os.listdir(out_dir):
        if name.endswith(".json"):
            continue
        step, state = load_latest_checkpoint(str(out_dir / name))
        assert step == SMALL["steps"]
        weights[name] = torch.cat([t.flatten() for t in state["model"].values()])
    return weights


@pytest.mark.parametrize("sync, allreduce", MODES)
def test_two_ranks_end_with_the_weights_of_one_process_with_the_global_batch(
        mode_runs, sync, allreduce):
    reference, weights = mode_runs["one-process"], mode_runs[f"{sync}-{allreduce}"]
    initial = torch.cat([t.flatten() for t in build_model("lenet", 0).state_dict().values()])
    assert not torch.equal(reference, initial)  # training moved the weights
    assert (weights - reference).norm() / reference.norm() <= 1e-5


def test_a_closed_stdout_neither_stops_the_run_nor_fails_it(tmp_path):
    # every rank's first line meets the closed pipe; a rank that failed for it would end the
    # others (self_launch), perhaps before rank 0 wrote its report
    out = tmp_path / "run.json"
    run = run_into_closed_pipe([SYNC, "--nproc-per-node", "2", "--steps", "4", "--num-samples",
                                "64", "--batch-size", "8", "--no-progress", "--json", str(out)])
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""  # no traceback, and no line: the reader chose to go
    assert json.loads(out.read_text())["steps"] == 4


def test_cli_run_writes_json_trace_and_profile(tmp_path):
    files = {k: str(tmp_path / f"out.{k}") for k in ("json", "trace", "profile")}
    run = run_cli(["--nproc-per-node", "2", "--steps", "6", "--warmup-steps", "2",
                   "--num-samples", "256", "--batch-size", "8", "--bucket-mb", "0.1",
                   "--json", files["json"], "--trace", files["trace"],
                   "--profile-out", files["profile"], "--no-progress"])
    assert run.returncode == 0, run.stderr
    assert sorted(re.findall(r"^rank (\d) pid \d+ role worker$", run.stdout, re.M)) == ["0", "1"]
    summary = json.load(open(files["json"]))
    for key in ("world_size", "steps", "iteration_time_s", "samples_per_s", "final_loss",
                "compute_time_s", "comm_time_s", "weights_sha256"):
        assert summary[key] is not None, key
    assert summary["world_size"] == 2 and summary["steps"] == 6 and summary["measured_steps"] == 4
    events = json.load(open(files["trace"]))["traceEvents"]
    comm_tracks = {e["tid"] for e in events if e.get("cat") == "communication"}
    assert comm_tracks == {0, 1}
    from dsgd_sim.workload import load_profile
    profile = json.load(open(files["profile"]))
    assert profile["format"] == "dsgd-profile/1" and profile["world_size"] == 2
    assert [layer["name"] for layer in profile["layers"]][:2] == ["conv1.weight", "conv1.bias"]
    assert sum(layer["grad_bytes"] for layer in profile["layers"]) == 246824
    assert len(profile["compute_s"]) == 4
    assert load_profile(files["profile"]).name == "lenet"


def test_default_model_learns_the_default_task_and_exits_without_leaks(tmp_path):
    run = run_cli(["--nproc-per-node", "2", "--steps", str(LEARNING_STEPS), "--no-progress",
                   "--json", str(tmp_path / "out.json")])
    assert run.returncode == 0, run.stderr
    summary = json.load(open(tmp_path / "out.json"))
    assert summary["model"] == "lenet" and summary["dataset"] == "synthetic"
    assert summary["initial_loss"] > 2.25 and summary["final_loss"] < LEARNING_LOSS_TARGET
    assert "leaked" not in run.stderr, run.stderr  # multiprocessing's resource tracker is silent


def test_emulated_compute_sleeps_and_exchanges_full_gradients(mode_runs):
    summary = mode_runs["emulated"]
    assert summary["compute_time_s"] >= 0.03 and summary["final_loss"] is None
    assert summary["weights_sha256"] == weights_sha256(build_model("mlp", 0))  # zero gradients
    # ... all-reduced all the same: mlp's 0.94 MB of gradients fit one 25 MB bucket, one call a
    # step on each rank
    trace = mode_runs["emulated trace"]
    calls = sorted((e["pid"], e["tid"], e["args"]["iteration"]) for e in trace["traceEvents"]
                   if e.get("ph") == "X" and e["name"] == "all-reduce bucket 0")
    assert summary["comm_time_s"] > 0 and len(calls) == 2 * 3 == len(set(calls))


@pytest.mark.skipif(not have_mpiexec(), reason="needs mpi4py and mpiexec (./install.sh dev)")
def test_mpi_backend_reaches_the_same_weights_as_gloo(mode_runs, tmp_path):
    args = ["--model", "lenet", "--num-samples", str(SMALL["num_samples"]), "--batch-size",
            str(SMALL["batch_size"]), "--steps", str(SMALL["steps"]), "--sync", "flat",
            "--no-progress", "--backend", "mpi",
            "--checkpoint-dir", str(tmp_path)]
    run = run_cli(args, launcher=["mpiexec", "-n", "2", sys.executable])
    assert run.returncode == 0, run.stderr
    step, state = load_latest_checkpoint(str(tmp_path))
    weights = torch.cat([t.flatten() for t in state["model"].values()])
    assert step == SMALL["steps"] and torch.equal(weights, mode_runs["flat-backend"])


@pytest.mark.skipif(not have_mpiexec(), reason="needs mpi4py and mpiexec (./install.sh dev)")
def test_a_bad_output_path_under_mpiexec_ends_every_rank_with_one_line(tmp_path):
    # rank 0 checks its outputs after joining: had it left before MPI_Init, rank 1 would wait
    # for it there forever (tests/test_comm.py: the same under torchrun and plain launches)
    run = run_cli(["--backend", "mpi", "--steps", "3", "--no-progress",
                   "--json", str(tmp_path / "missing" / "run.json")],
                  timeout=60, launcher=["mpiexec", "-n", "2", sys.executable])
    assert run.returncode == 2
    assert len(error_lines(run)) == 1 and "cannot write into" in error_lines(run)[0]


class OutputWatcher:
    """Reads a process's merged output on a thread; remembers each rank's newest pid."""

    def __init__(self, process):
        self.process, self.lines, self.pids = process, [], {}
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)
            match = re.match(r"rank (\d+) pid (\d+) role worker", line)
            if match:
                self.pids[int(match.group(1))] = int(match.group(2))


def test_worker_killed_mid_run_resumes_to_the_uninterrupted_weights(tmp_path):
    args = ["--steps", "30", "--batch-size", "16", "--num-samples", "2048", "--no-progress"]
    reference = run_cli([*args, "--nproc-per-node", "2", "--json", str(tmp_path / "ref.json")])
    assert reference.returncode == 0, reference.stderr
    checkpoints, out = tmp_path / "faulty", str(tmp_path / "faulty.json")
    process = subprocess.Popen(
        torchrun(2, "--max-restarts", "3") + [SYNC, *args, "--checkpoint-dir", str(checkpoints),
                                               "--checkpoint-every", "5", "--json", out],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **RESTARTABLE_TORCHRUN_ENV})
    watcher = OutputWatcher(process)
    deadline = time.monotonic() + 90
    while not (checkpoints.is_dir() and any(n >= "ckpt-000000010" for n in os.listdir(checkpoints))):
        assert process.poll() is None and time.monotonic() < deadline, "".join(watcher.lines)
        time.sleep(0.01)
    os.kill(watcher.pids[1], signal.SIGKILL)
    assert process.wait(timeout=120) == 0, "".join(watcher.lines)
    watcher.thread.join(timeout=10)
    output = "".join(watcher.lines)
    assert re.search(r"resumed from the checkpoint of step (1\d|2\d)", output), output
    assert json.load(open(out))["weights_sha256"] == json.load(open(tmp_path / "ref.json"))["weights_sha256"]


@pytest.mark.parametrize("sync", ["ddp", "bucketed"])
def test_a_peer_killed_mid_run_ends_the_other_rank_with_one_line(sync):
    # DDP runs its collectives itself, inside backward: a dead peer gave a 27-line traceback
    # where every other strategy gives one line
    port, procs = free_port("127.0.0.1"), []
    args = [SYNC, "--sync", sync, "--steps", "300", "--emulate-compute", "100ms", "--no-progress"]
    for rank in (0, 1):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    watcher = OutputWatcher(procs[1])
    deadline = time.monotonic() + 60
    while 1 not in watcher.pids:
        assert procs[1].poll() is None and time.monotonic() < deadline, "".join(watcher.lines)
        time.sleep(0.05)
    time.sleep(2.0)  # a few steps in
    procs[1].kill()
    procs[1].wait(timeout=30)
    _, err = procs[0].communicate(timeout=120)
    assert procs[0].returncode == 1, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("sync.py: error: rank 0: ") and "failed after" in err, err


def test_a_self_launched_rank_killed_by_a_signal_is_named_in_one_line():
    # the launcher ended the other rank and exited 1 without a word
    process = subprocess.Popen([sys.executable, SYNC, "--nproc-per-node", "2", "--steps", "300",
                                "--emulate-compute", "100ms", "--no-progress"], cwd=REPO,
                               env={**os.environ, "OMP_NUM_THREADS": "1"}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watcher = OutputWatcher(process)
    deadline = time.monotonic() + 60
    while len(watcher.pids) < 2:
        assert process.poll() is None and time.monotonic() < deadline, "".join(watcher.lines)
        time.sleep(0.05)
    os.kill(watcher.pids[1], signal.SIGKILL)
    err = process.communicate(timeout=120)[1]
    assert process.returncode == 1
    assert err == "sync.py: error: rank 1 was killed by SIGKILL; the other ranks were stopped\n"


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--model", "resnet"], "unknown model 'resnet'"),
    (["--emulate-compute", "80"], "time '80' needs a unit"),
    (["--sync", "ddp", "--allreduce", "ring"], "--sync ddp uses the backend's all-reduce"),
    (["--sync", "per-param", "--bucket-mb", "5"], "--sync per-param has none"),
    (["--sync", "flat", "--bucket-mb", "5"], "--sync flat has none"),
    (["--bucket-mb", "inf"], "--bucket-mb must be positive and finite"),
    (["--bucket-mb", "1e308"], "--bucket-mb must be at most 1,048,576 (1 TiB), got 1e+308"),
    (["--timeout", "1e300s"], "--timeout must be at most"),
    (["--threads", "100000000"], "--threads must be at most 1024"),
    (["--emulate-compute", "1e300s"], "--emulate-compute must be 0 to"),
    (["--emulate-comm", "1e300s"], "--emulate-comm must be 0 to"),
    (["--emulate-comm", "40"], "time '40' needs a unit"),
    (["--nproc-per-node", "2", "--checkpoint-dir", __file__], "is not a folder"),  # self-launch
])
def test_bad_flag_gives_one_error_line_and_exit_status_2(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sync.py: error: ") and message in lines[0]


@pytest.mark.parametrize("name", ["train-labels-idx1-ubyte", "train-images-idx3-ubyte.gz"])
def test_an_output_on_an_mnist_input_file_or_the_checkpoint_folder_is_refused(tmp_path, name,
                                                                              capsys):
    # --json on the labels file overwrote it (the next run: "not an IDX file"); --json on the
    # checkpoint folder failed with "Is a directory" after the whole run, its summary lost
    for argv, said in [
            (["--dataset", f"mnist:{tmp_path}", "--json", str(tmp_path / name)],
             f"is the MNIST {'labels' if 'labels' in name else 'images'} file, which this run "
             f"reads"),
            (["--checkpoint-dir", str(tmp_path / "ck"), "--trace", str(tmp_path / "ck")],
             "is the --checkpoint-dir, where the run writes its checkpoints")]:
        config = parse_args(argv)
        with pytest.raises(ValueError, match=said):
            check_outputs(config)


def test_an_mnist_file_that_cannot_be_read_is_a_data_error(tmp_path, monkeypatch):
    # os.path.getsize and np.memmap raised OSError (no permission, a file that cannot be
    # mapped): a traceback under --nproc-per-node, every rank's line and status 1 under torchrun
    import real.data
    from real.data import DataError, read_idx
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(b"\0\0\x08\x01\0\0\0\0")

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(real.data.np, "memmap", refused)
    with pytest.raises(DataError, match=f"cannot read MNIST file {path}: Permission denied"):
        read_idx(str(path))


@pytest.mark.parametrize("launcher_env", [{"RANK": "0", "WORLD_SIZE": "2"}, {"PMI_RANK": "0"}])
def test_nproc_per_node_under_a_launcher_is_refused_in_one_line(launcher_env, monkeypatch,
                                                                  capsys):
    # each torchrun worker started a nested job of its own on torchrun's port
    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in launcher_env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--nproc-per-node", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--nproc-per-node launches the ranks itself" in err


@pytest.mark.parametrize("env, argv, message", [
    ({"RANK": "abc"}, [], "environment variable RANK='abc' is not a whole number"),
    ({"MASTER_PORT": "x"}, ["--nproc-per-node", "2", "--num-samples", "64"],
     "environment variable MASTER_PORT='x'"),
    ({}, ["--nproc-per-node", "2", "--num-samples", "64", "--master-addr", "192.0.2.1"],
     "cannot listen on master address '192.0.2.1'"),
    ({}, ["--nproc-per-node", "2", "--num-samples", "1000000000000"],
     "do not fit in this machine's memory"),
])
def test_bad_environment_or_launch_setting_is_one_line_before_any_rank(env, argv, message,
                                                                        monkeypatch, capfd):
    from real.sync import main
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv + ["--no-progress"]) == 2
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sync.py: error: ") and message in lines[0]


def test_more_ranks_than_samples_is_refused_before_starting_ranks():
    run = run_cli(["--nproc-per-node", "4", "--num-samples", "3"], timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert error_lines(run) == ["sync.py: error: 4 ranks but only 3 samples: every rank needs at least one"]


def test_corrupt_mnist_file_is_reported_once_under_torchrun(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03garbage")
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x01\x07")
    run = run_cli(["--dataset", f"mnist:{tmp_path}"], launcher=torchrun(2), timeout=60)
    assert run.returncode != 0
    assert error_lines(run) == [f"sync.py: error: truncated IDX header in {tmp_path}/train-images-idx3-ubyte"]


def test_missing_mnist_directory_is_one_clear_line():
    with pytest.raises(ValueError, match="MNIST directory not found: /no/such/dir"):
        load_dataset(SyncConfig(dataset="mnist:/no/such/dir").dataset_spec, 1, 0)
    run = run_cli(["--dataset", "mnist:/no/such/dir", "--nproc-per-node", "2"], timeout=60)
    assert run.returncode == 2
    assert error_lines(run) == ["sync.py: error: MNIST directory not found: /no/such/dir"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_without_gpus_says_so():
    with pytest.raises(ValueError, match="no usable CUDA GPU"):
        pick_device(SyncConfig(device="cuda"), 0, 1)


def test_a_self_launched_job_that_refuses_a_checkpoint_says_it_in_one_line(tmp_path):
    # the launcher ending the other rank once added torch's "Terminating process" warning
    args = ["--model", "mlp", "--steps", "2", "--num-samples", "64", "--batch-size", "8",
            "--checkpoint-dir", str(tmp_path), "--checkpoint-every", "2", "--no-progress"]
    assert run_cli(args).returncode == 0
    refused = run_cli([*args, "--nproc-per-node", "2"])  # twice the global batch
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "sync.py: error: checkpoint of step 2 belongs to another run: global_batch_size 8 "
        "there, 16 here"]


def test_finished_run_resumes_at_its_end_and_refuses_another_runs_checkpoint(tmp_path):
    args = ["--model", "mlp", "--steps", "4", "--num-samples", "64", "--batch-size", "8",
            "--checkpoint-dir", str(tmp_path), "--checkpoint-every", "2", "--no-progress"]
    first = run_cli([*args, "--json", str(tmp_path / "first.json")])
    profile = tmp_path / "profile.json"
    again = run_cli([*args, "--json", str(tmp_path / "again.json"), "--profile-out", str(profile)])
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert "resumed from the checkpoint of step 4" in again.stdout
    # no step ran, so nothing was timed: said, not passed over
    assert not profile.exists()
    assert f"sync.py: note: no step ran (the checkpoint is at step 4 of 4), so --profile-out " \
        f"{profile} was not written" in again.stderr.splitlines()
    assert (json.load(open(tmp_path / "again.json"))["weights_sha256"]
            == json.load(open(tmp_path / "first.json"))["weights_sha256"])
    other = run_cli([*args, "--seed", "1"])
    assert other.returncode == 2
    assert error_lines(other) == ["sync.py: error: checkpoint of step 4 belongs to another run: "
                                  "seed 0 there, 1 here"]
    shorter = run_cli([*[a if a != "4" else "3" for a in args]])  # --steps 3, from step 4
    assert shorter.returncode == 2
    assert error_lines(shorter) == [f"sync.py: error: the checkpoint in {tmp_path} is "
                                    f"of step 4, past --steps 3: give --steps 4 or more, or "
                                    f"another --checkpoint-dir"]


def test_under_mpiexec_the_backend_is_mpi_unless_one_is_named(monkeypatch):
    # a gloo rank under mpiexec would train alone, as if it were the only one
    from real.sync_config import SyncConfig
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("PMI_RANK", "0")
    assert SyncConfig().backend == "mpi" and SyncConfig(backend="gloo").backend == "gloo"
    assert SyncConfig(sync="ddp").backend == "gloo"  # DDP needs torch.distributed
    monkeypatch.delenv("PMI_RANK")
    assert SyncConfig().backend == "gloo"
