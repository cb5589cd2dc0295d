"""Bad input to the real trainers is one error line and exit status 2, never a traceback: a
malformed checkpoint (left as it was), an lr past float32, a damaged or empty MNIST file, a ring
segment out of bounds in ``--algorithms``."""

import gzip
import os
import struct
import subprocess
import sys

import pytest
import torch

from real import allreduce, ps_config, sync_config
from real.checkpoint import UNREADABLE_SUFFIX, checkpoint_path, load_latest_checkpoint
from real.data import MNIST_FILES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNC = os.path.join(REPO, "real", "sync.py")
SMALL_RUN = ["--model", "mlp", "--num-samples", "64", "--batch-size", "8", "--no-progress"]


def run_sync(args):
    """real/sync.py as one process (no launcher); the finished process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, SYNC, *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def the_error_line(process) -> str:
    """The one line ``process`` wrote to stderr, after checking it failed with status 2."""
    assert process.returncode == 2, process.stderr
    lines = process.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sync.py: error: "), process.stderr
    return lines[0]


# -- 1. a malformed checkpoint ------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory):
    """The content of the checkpoint of step 4 that a real run writes."""
    directory = tmp_path_factory.mktemp("real-run")
    run = run_sync([*SMALL_RUN, "--steps", "4", "--checkpoint-dir", str(directory),
                    "--checkpoint-every", "2"])
    assert run.returncode == 0, run.stderr
    return torch.load(checkpoint_path(str(directory), 4), weights_only=False)


def replaced(state, **changes):
    return {**state, **changes}


def without(state, key):
    return {k: v for k, v in state.items() if k != key}


@pytest.mark.parametrize("damage, problem", [
    (lambda s: {"step": 4}, " is incomplete: it has no 'run', 'world_size', 'model'"),
    (lambda s: without(s, "model"), " is incomplete: it has no 'model'"),
    (lambda s: replaced(s, run=[1, 2]), ": its 'run' is a list, not a dict"),
    (lambda s: replaced(s, model={"x" + k: v for k, v in s["model"].items()}),
     ": its 'model' lacks weights 'layers.1.weight', 'layers.1.bias', 'layers.3.weight' and "
     "3 more for this model"),
    (lambda s: replaced(s, rng=[b"garbage"]), ": its 'rng' of rank 0 is not a random-number state"),
    (lambda s: replaced(s, optimizer={}), ": its 'optimizer' is not an optimizer's state_dict"),
], ids=["step-only", "no-model", "run-not-a-dict", "other-weights", "garbage-rng",
        "empty-optimizer"])
def test_malformed_checkpoint_is_one_line_naming_it_and_is_left_as_it_was(
        real_checkpoint, damage, problem, tmp_path):
    path = checkpoint_path(str(tmp_path), 4)
    torch.save(damage(real_checkpoint), path)
    written = open(path, "rb").read()
    run = run_sync([*SMALL_RUN, "--steps", "6", "--checkpoint-dir", str(tmp_path)])
    assert the_error_line(run).startswith(f"sync.py: error: checkpoint {path}{problem}")
    assert os.listdir(tmp_path) == ["ckpt-000000004.pt"]
    assert open(path, "rb").read() == written


def test_checkpoint_whose_step_is_not_a_number_is_set_aside_not_a_traceback(tmp_path, capsys):
    path = checkpoint_path(str(tmp_path), 4)
    torch.save({"step": torch.ones(3)}, path)
    assert load_latest_checkpoint(str(tmp_path)) is None
    assert os.listdir(tmp_path) == [os.path.basename(path) + UNREADABLE_SUFFIX]
    assert "its step does not match its name" in capsys.readouterr().err


# -- 2. an lr no float32 holds ------------------------------------------------------------------
@pytest.mark.parametrize("parse_args, argv, program", [
    (sync_config.parse_args, ["--lr", "1e39"], "sync.py"),
    (ps_config.parse_args, ["--nproc-per-node", "2", "--lr", "1e39"], "async_ps.py"),
], ids=["sync", "async_ps"])
def test_lr_past_the_largest_float32_is_one_line_and_status_2(parse_args, argv, program, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"{program}: error: --lr must be at most 3.402823e+38 "
                                       f"(the largest float32), got 1e+39\n")


@pytest.mark.parametrize("parse_args, argv, problem", [
    (sync_config.parse_args, ["--steps", "99999999999999999999"],
     "sync.py: error: --steps must be at most 100,000,000, got 99,999,999,999,999,999,999"),
    (ps_config.parse_args, ["--nproc-per-node", "2", "--updates", "100000001"],
     "async_ps.py: error: --updates must be at most 100,000,000, got 100,000,001"),
    (ps_config.parse_args, ["--nproc-per-node", "2", "--time", "1000h"],
     "async_ps.py: error: --time must be from 0 to 30 days, got 3.6e+06 s"),
    # 0 s once read as "no time limit", and without --updates as no stop condition at all
    (ps_config.parse_args, ["--nproc-per-node", "2", "--time", "0s"],
     "async_ps.py: error: --time 0s: give a positive time, or leave --time out for no time limit"),
    (ps_config.parse_args, ["--nproc-per-node", "2", "--time", "0s", "--updates", "4"],
     "async_ps.py: error: --time 0s: give a positive time, or leave --time out for no time limit"),
], ids=["steps", "updates", "time", "time-zero", "time-zero-with-updates"])
def test_a_run_length_past_the_cap_is_one_line_and_status_2(parse_args, argv, problem, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and capsys.readouterr().err == problem + "\n"


@pytest.mark.parametrize("parse_args, argv, problem", [
    (sync_config.parse_args, ["--checkpoint-every", "10"], "give --checkpoint-dir too"),
    (sync_config.parse_args, ["--keep-checkpoints", "5"], "give --checkpoint-dir too"),
    (sync_config.parse_args, ["--checkpoint-every", "50"], "give --checkpoint-dir too"),
    (sync_config.parse_args, ["--master-port", "29999"], "set the rendezvous of the ranks"),
    (ps_config.parse_args, ["--master-addr", "10.0.0.1"], "set the rendezvous of the ranks"),
    (ps_config.parse_args, ["--nproc-per-node", "2", "--trace-updates", "10"],
     "give --trace too"),
    (ps_config.parse_args, ["--nproc-per-node", "2", "--trace-updates", "500"],
     "give --trace too"),
], ids=["checkpoint-every", "keep-checkpoints", "checkpoint-every-as-default", "sync-master-port",
        "ps-master-addr", "trace-updates", "trace-updates-as-default"])
def test_a_flag_the_run_would_ignore_is_refused_in_one_line(parse_args, argv, problem, capsys):
    """A flag that only means something with another is refused without it, never ignored."""
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and problem in err


def test_the_flags_that_need_another_keep_their_defaults_and_take_a_value_with_it(tmp_path):
    assert (sync_config.parse_args([]).checkpoint_every, sync_config.parse_args([]).keep_checkpoints) \
        == (50, 2)
    config = sync_config.parse_args(["--checkpoint-dir", str(tmp_path), "--keep-checkpoints", "3"])
    assert (config.checkpoint_every, config.keep_checkpoints) == (50, 3)
    assert ps_config.parse_args(["--nproc-per-node", "2"]).trace_updates == 500
    assert ps_config.parse_args(["--nproc-per-node", "2", "--trace", str(tmp_path / "t.json"),
                                 "--trace-updates", "7"]).trace_updates == 7


def test_the_largest_lr_allowed_is_one_sgd_can_step_with():
    assert sync_config.SyncConfig(lr=sync_config.MAX_LR).lr == sync_config.MAX_LR
    weights = torch.zeros(2, requires_grad=True)
    weights.grad = torch.ones(2)
    torch.optim.SGD([weights], lr=sync_config.MAX_LR).step()  # raises on overflow
    assert weights[0].item() == -sync_config.MAX_LR


# -- 3. a damaged or empty MNIST file -----------------------------------------------------------
def idx_file(dims, body: bytes) -> bytes:
    """An IDX file of unsigned bytes with shape ``dims``."""
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + body


def damaged_gzip(data: bytes) -> bytes:
    """``data`` gzipped, its first deflate block header made a reserved (invalid) block type."""
    packed = gzip.compress(data, mtime=0)
    return packed[:10] + b"\xff" + packed[11:]  # 10 bytes of gzip header, then the deflate data


@pytest.mark.parametrize("count, compress, problem", [
    (4, damaged_gzip, "corrupt gzip file {}: Error -3 while decompressing data: invalid block "
                      "type"),
    (0, gzip.compress, "MNIST file {} holds no images"),
], ids=["damaged", "empty"])
def test_damaged_or_empty_mnist_images_are_one_line_naming_the_file(count, compress, problem,
                                                                    tmp_path):
    images = tmp_path / (MNIST_FILES["images"] + ".gz")
    images.write_bytes(compress(idx_file((count, 28, 28), bytes(count * 28 * 28))))
    (tmp_path / MNIST_FILES["labels"]).write_bytes(idx_file((count,), bytes(count)))
    run = run_sync(["--dataset", f"mnist:{tmp_path}", "--steps", "1", "--batch-size", "2",
                    "--no-progress"])
    assert the_error_line(run) == "sync.py: error: " + problem.format(images)


def test_a_gzip_that_unpacks_past_any_mnist_file_is_refused_unread(tmp_path, monkeypatch):
    """A gzip bomb is not read whole into memory: past the cap it is a DataError."""
    from real import data
    monkeypatch.setattr(data, "MAX_IDX_BYTES", 4096)
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(idx_file((5000,), bytes(5000))))
    with pytest.raises(data.DataError, match=r"bomb.gz unpacks to more than .*: not an MNIST file"):
        data.read_idx(str(path))
    path.write_bytes(gzip.compress(idx_file((4000,), bytes(4000))))
    assert data.read_idx(str(path)).shape == (4000,)  # 4,008 bytes: under the cap


# -- 4. a ring segment out of bounds in --algorithms --------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--algorithms", "ring@1B"], "--algorithms: 'ring@1B': '1B' is smaller than one float32 "
                                  "element"),
    (["--algorithms", "ring,ring@1e30GB"], "--algorithms: 'ring@1e30GB': '1e30GB' is more than "
                                           "the largest buffer this benchmark allocates (4 GB)"),
    (["--segment", "1B"], "--segment: '1B' is smaller than one float32 element"),
    (["--segment", "1e30GB"], "--segment: '1e30GB' is more than the largest buffer"),
])
def test_ring_segment_has_the_same_bounds_as_flag_and_as_algorithm_suffix(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        allreduce.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_buffers_past_the_machines_memory_are_one_line_and_status_2(monkeypatch, capsys):
    import os
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    ranks = memory // (allreduce.BUFFERS_PER_SIZE * 10**9) + 2  # a share under the 4 GB cap
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))  # that many ranks here, each with its own
    size = (memory // (ranks * allreduce.BUFFERS_PER_SIZE) // 4 + 1) * 4  # just past it, float32
    with pytest.raises(SystemExit) as exit_info:
        allreduce.parse_args(["--sizes", f"{size}B"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than this machine's" in err


def test_ring_segment_within_bounds_is_accepted():
    _, args = allreduce.parse_args(["--algorithms", "ring@4B,ring@4GB,naive", "--segment", "4B"])
    assert args.algorithm_names == ["ring@4B", "ring@4GB", "naive"] and args.segment_bytes == 4


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a full disk)")
@pytest.mark.parametrize("script, flags, output", [
    ("real/sync.py", ["--nproc-per-node", "1", "--steps", "2"], "--json"),
    ("real/sync.py", ["--nproc-per-node", "1", "--steps", "2"], "--trace"),
    ("real/async_ps.py", ["--nproc-per-node", "2", "--updates", "4"], "--json"),
])
def test_an_output_the_disk_refuses_is_named_in_the_one_line(script, flags, output):
    # the bare error said "[Errno 28] No space left on device", naming no file
    done = subprocess.run([sys.executable, script, *flags, "--model", "mlp", "--no-progress",
                           output, "/dev/full"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"{os.path.basename(script)}: error: {output} /dev/full: "
                                        f"cannot write it: No space left on device"]
    assert "\ndone: " in "\n" + done.stdout  # the figures printed before the write: not lost
