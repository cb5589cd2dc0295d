"""Synchronous data-parallel SGD, for real: replicas start from rank 0's weights, compute gradients
on their own shard of each global batch, average them with an all-reduce and step together.

One node, N processes (the defaults: LeNet on a synthetic task, bucketed all-reduce, Gloo)::

    torchrun --standalone --nproc-per-node 4 real/sync.py
    torchrun --standalone --nproc-per-node 4 real/sync.py --model mlp-large --sync ddp --json ddp.json

Two nodes (run on each; ``HOST0`` is node 0's address, any free port)::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        --rdzv-id sync1 real/sync.py --steps 500

Surviving a killed worker (torchrun restarts every worker; the job resumes from the newest
complete checkpoint, so the final weights equal those of an uninterrupted run). The variable gives
each restart a fresh rendezvous store; without it, restarted Gloo workers can find the previous
attempt's addresses there and fail or hang (pytorch/pytorch#135712)::

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc-per-node 4 \\
        --max-restarts 3 real/sync.py --checkpoint-dir ckpt --checkpoint-every 20

Without torchrun (this script starts the N processes itself), over MPI, and on GPUs::

    python real/sync.py --nproc-per-node 4
    mpiexec -n 4 python real/sync.py --backend mpi
    torchrun --standalone --nproc-per-node 2 real/sync.py --device cuda      # NCCL, a GPU per rank

Measuring: ``--json FILE`` (summary, rank 0), ``--trace FILE`` (Chrome trace, one track per rank),
``--profile-out FILE`` (per-layer profile for ``python -m dsgd_sim --profile FILE``) and
``--emulate-compute 80ms`` (sleep instead of compute, real gradients exchanged), ``--emulate-comm
40ms`` (a wait after each exchange, as a slower network would add). Every flag and
its default: ``real/sync_config.py``; the guide: ``docs/sync.md``.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time

if __package__ in (None, ""):  # run as a script: import the repository, not real/ itself
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":  # before torch loads OpenMP, which would only warn about a bad value
    from real.thread_env import exit_on_bad_omp_num_threads
    exit_on_bad_omp_num_threads("sync.py")

import torch
import torch.nn.functional as F
from tqdm import tqdm

from dsgd_sim.argparse_oneline import run_command_line
from real.comm import CommError, init
from real.comm_cli import InputError, default_threads, first_failed_rank
from real.data import ShardedBatches, load_dataset
from real.emulate import ComputeFloor, EmulatedModel
from real.grad_sync import MiB, make_grad_sync
from real.layer_profile import LayerTimer
from real.local_launch import (env_rank, fast_exit, mpi_local_rank, own_error,
                               placement_from_env, rendezvous, report_error as report_job_error,
                               report_join_error, say, self_launch)
from real.models import build_model, grad_bytes
from real.replica_state import (replicas_agree, restore_or_start, weights_sha256,
                                write_checkpoint)
from real.sync_config import SyncConfig, check_outputs, parse_args
from real.sync_report import StepRecorder, gather_trace, output_named, write_json


FINAL_LOSS_STEPS = 10  # final_loss: the mean training loss of this many last steps
LOSS_CURVE_LIMIT = 100_000  # steps listed one by one in the summary's loss_curve


class ReplicaMismatch(RuntimeError):
    """``--check-replicas`` found ranks holding different weights."""


def main(argv: list[str] | None = None) -> int:
    try:
        env_rank()
    except ValueError as error:
        print(f"sync.py: error: {error}", file=sys.stderr)
        return 2
    config = parse_args(argv)  # ranks other than 0 stay quiet (RankArgumentParser)
    if config.nproc_per_node:
        try:  # check what can be checked once, here, before starting any process
            dataset = load_dataset(config.dataset_spec, config.num_samples, config.seed)
            ShardedBatches(len(dataset), config.batch_size, config.nproc_per_node, 0, config.seed)
            del dataset  # each rank loads its own: this copy would stay for the whole run
            pick_device(config, 0, config.nproc_per_node)
            address, port = rendezvous(config.master_addr, config.master_port)
        except ValueError as error:
            print(f"sync.py: error: {error}", file=sys.stderr)
            return 2
        return self_launch(run_worker, config, config.nproc_per_node, address, port)
    return run_worker(config)


def run_worker(config: SyncConfig) -> int:
    """One rank's whole life: join the job, train, report, leave. Returns the exit status."""
    rank = env_rank()
    say(f"rank {rank} pid {os.getpid()} role worker")
    try:
        local_rank, local_world_size = local_placement(config)
        device = pick_device(config, local_rank, local_world_size)
        torch.set_num_threads(config.threads or default_threads(local_world_size))
        comm = init(config.engine, config.backend, config.timeout_s, check_sizes=False)
    except ValueError as error:  # bad flags, a bad launcher variable, a device this node lacks
        return report_join_error("sync.py", error)
    except CommError as error:  # this rank could not join: perhaps its node's own fault
        return report_error(True, own_error(error), 1)
    try:
        dataset = load_data_together(config, comm)
        train(config, comm, dataset, device)
        return 0
    except ValueError as error:  # bad input found on every rank alike: rank 0 says it once
        return report_error(comm.rank == 0, error, 2)
    except (CommError, ReplicaMismatch, OSError) as error:  # OSError: an output not written
        return report_error(True, error, 1)
    finally:
        comm.close()


def load_data_together(config: SyncConfig, comm):
    """Collective: every rank loads its data; if any rank fails, all exit with one report.

    Rank 0 prints its own error before the ranks compare notes; otherwise the lowest failing
    rank prints its own (a file missing on one node, say).
    """
    error = None
    try:
        if comm.rank == 0:  # see sync_config.parse_args
            check_outputs(config)
        dataset = load_dataset(config.dataset_spec, config.num_samples, config.seed)
        ShardedBatches(len(dataset), config.batch_size, comm.world_size, comm.rank, config.seed)
    except ValueError as caught:
        error = caught
        if comm.rank == 0:
            say(f"sync.py: error: {error}", sys.stderr)
    first = first_failed_rank(comm, error is not None)
    if first == comm.rank != 0:  # rank 0 said it above
        say(f"sync.py: error: rank {comm.rank}: {error}", sys.stderr)
    if first is not None:
        raise InputError(error or f"rank {first} could not load its data")
    return dataset


def report_error(speak: bool, error: Exception, status: int) -> int:
    """``local_launch.report_error`` for this program; an ``InputError`` was reported already."""
    return report_job_error("sync.py", speak and not isinstance(error, InputError), error, status)


def local_placement(config: SyncConfig) -> tuple[int, int]:
    if config.engine == "mpi":
        return mpi_local_rank()
    placement = placement_from_env()
    return placement.local_rank, placement.local_world_size


def pick_device(config: SyncConfig, local_rank: int, local_world_size: int) -> torch.device:
    """The CPU, or GPU ``local_rank``; ``ValueError`` saying why when GPUs are missing."""
    if config.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"--device cuda: no usable CUDA GPU here (torch {torch.__version__}, "
                         f"torch.cuda.is_available() is False); use --device cpu")
    if torch.cuda.device_count() < local_world_size:
        raise ValueError(f"--device cuda needs one GPU per rank: {local_world_size} ranks on "
                         f"this node but {torch.cuda.device_count()} GPUs")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def clock(device: torch.device) -> float:
    """``time.perf_counter()`` once the device has finished the work queued so far."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def train(config: SyncConfig, comm, dataset, device: torch.device) -> None:
    """Train for ``config.steps`` steps (resuming from a checkpoint) and write the reports."""
    is_main = comm.rank == 0
    batches = ShardedBatches(len(dataset), config.batch_size, comm.world_size, comm.rank,
                             config.seed)
    model = build_model(config.model, config.seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    run_identity = {"model": config.model, "dataset": config.dataset, "seed": config.seed,
                    "num_samples": len(dataset), "global_batch_size": batches.global_batch_size,
                    "lr": config.lr, "momentum": config.momentum}
    start_step = restore_or_start(comm, config.checkpoint_dir, model, optimizer, run_identity)
    if start_step > config.steps:  # every rank has it: rank 0 broadcast it
        raise ValueError(f"the checkpoint in {config.checkpoint_dir} is of step {start_step}, "
                         f"past --steps {config.steps}: give --steps {start_step} or more, or "
                         f"another --checkpoint-dir")
    if is_main and start_step:
        print(f"resumed from the checkpoint of step {start_step} in {config.checkpoint_dir}",
              flush=True)
    emulated = config.emulate_compute_s > 0 and not config.real_gradients
    step_model = EmulatedModel(model, config.emulate_compute_s) if emulated else model
    floor = ComputeFloor(config.emulate_compute_s) if config.real_gradients else None
    extra = {"device_ids": [device.index]} if config.sync == "ddp" and device.type == "cuda" else {}
    sync = make_grad_sync(config.sync, comm, step_model, config.allreduce,
                          int(config.bucket_mb * MiB), **extra)
    timer = LayerTimer(model) if config.profile_out and is_main else None
    comm.barrier()
    recorder = StepRecorder(origin_s=time.perf_counter(), comm_measured=config.sync != "ddp",
                            keep_spans=config.trace is not None)
    first_measured = start_step + min(config.warmup_steps, max(0, config.steps - start_step - 1))
    window_start_s = time.perf_counter()
    bar = progress_bar(config, comm, start_step)
    try:
        for step in range(start_step, config.steps):
            if step == first_measured:
                comm.barrier()
                window_start_s = time.perf_counter()
            loss = train_step(step, dataset, batches, sync, optimizer, device, emulated, timer,
                              recorder, first_measured, floor, config.emulate_comm_s)
            if config.check_replicas and not replicas_agree(comm, model):
                raise ReplicaMismatch(f"ranks hold different weights after step {step}")
            if config.checkpoint_dir and ((step + 1) % config.checkpoint_every == 0
                                          or step + 1 == config.steps):
                write_checkpoint(comm, config.checkpoint_dir, step + 1, model, optimizer,
                                 run_identity, batches.position(step + 1), config.keep_checkpoints)
            bar.update(1)
            if step % 10 == 0 and not emulated:
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        comm.barrier()
        window_s = time.perf_counter() - window_start_s
    finally:
        bar.close()
        sync.close()
        if timer:
            timer.close()
    finish(config, comm, model, batches, recorder, timer, start_step, window_s, first_measured)


def progress_bar(config: SyncConfig, comm, start_step: int) -> tqdm:
    """The tqdm bar (drawn on rank 0 only). tqdm's default lock holds a multiprocessing semaphore
    that only an interpreter's normal exit unlinks; workers leave by ``os._exit`` (``fast_exit``),
    so the resource tracker would report it leaked. One process draws the bar: a thread lock
    serves."""
    tqdm.set_lock(threading.RLock())
    return tqdm(total=config.steps, initial=start_step, unit="step",
                desc=f"sync x{comm.world_size}", disable=not (comm.rank == 0 and config.progress),
                file=sys.stderr)


def train_step(step, dataset, batches, sync, optimizer, device, emulated, timer, recorder,
               first_measured, floor=None, comm_pause_s: float = 0.0) -> float:
    """One SGD step of this rank; records its timings; returns this rank's loss (NaN if emulated).
    ``floor`` (a ``ComputeFloor``): pad the real forward and backward to the emulated time;
    ``comm_pause_s``: wait this long after the gradients' exchange, as part of it."""
    marks = [time.perf_counter()]
    images, labels = dataset.batch(batches.indices(step))
    images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    sync.zero_grad()
    marks.append(clock(device))
    output = sync.forward(images)
    loss = output if emulated else F.cross_entropy(output, labels)
    if timer:
        timer.backward_started()
    if floor:
        floor.pad(marks[1])
    backward_start_s = time.perf_counter()
    sync.backward(loss)
    marks.append(clock(device))
    if floor:
        floor.backward_done(marks[2] - backward_start_s)
    comm_spans = sync.finish()
    if comm_pause_s:
        waited_s = time.perf_counter()
        time.sleep(comm_pause_s)
        comm_spans = [*comm_spans, ("emulated wait", waited_s, time.perf_counter())]
    marks.append(clock(device))
    optimizer.step()
    marks.append(clock(device))
    loss_value = math.nan if emulated else loss.item()
    recorder.add(step, marks, comm_spans, loss_value)
    if timer and step >= first_measured:
        timer.step_done(marks[2] - marks[1])
    return loss_value


def finish(config, comm, model, batches, recorder, timer, start_step, window_s, first_measured):
    """Collective: average the losses over ranks, hash the weights, write json/trace/profile."""
    losses = recorder.losses or [math.nan]
    tail = losses[-FINAL_LOSS_STEPS:]  # one global batch's loss is too noisy to judge a run by
    loss = torch.tensor([losses[0], sum(tail) / len(tail)], dtype=torch.float64, device=comm.device)
    comm.all_reduce(loss, op="avg")
    curve = loss_curve(comm, recorder, start_step)
    trace = (gather_trace(comm, recorder, f"real/sync.py {config.sync} x{comm.world_size}")
             if config.trace else None)
    if comm.rank != 0:
        return
    measured = max(0, config.steps - first_measured)
    summary = {
        "world_size": comm.world_size, "steps": config.steps, "start_step": start_step,
        **recorder.summary(first_measured - start_step),
        "samples_per_s": measured * batches.global_batch_size / window_s if measured else None,
        "initial_loss": loss[0].item(), "final_loss": loss[1].item(),
        "weights_sha256": weights_sha256(model),
        "model": config.model, "dataset": config.dataset, "sync": config.sync,
        "allreduce": config.allreduce, "bucket_mb": config.bucket_mb,
        "batch_size": config.batch_size, "global_batch_size": batches.global_batch_size,
        "grad_bytes": grad_bytes(model), "seed": config.seed, "backend": config.backend,
        "device": config.device, "emulate_compute_s": config.emulate_compute_s,
        "emulate_comm_s": config.emulate_comm_s,
        "threads_per_rank": torch.get_num_threads(),
        "real_gradients": config.real_gradients, "loss_curve": curve,
    }
    # the figures first: an output the disk then refuses (said in one line) loses none of them
    rate, loss = summary["samples_per_s"], summary["final_loss"]
    loss_text = "-" if loss is None or not math.isfinite(loss) else f"{loss:.4f}"  # emulated: none
    print(f"done: {config.steps} steps on {comm.world_size} ranks, "
          f"{'-' if rate is None else f'{rate:.0f}'} samples/s, loss {loss_text}, "
          f"weights sha256 {summary['weights_sha256'][:16]}", flush=True)
    if trace is not None:
        with output_named("--trace", config.trace):
            trace.write(config.trace)
    if config.json:
        with output_named("--json", config.json):
            write_json(config.json, summary)
    if timer and timer.samples:
        with output_named("--profile-out", config.profile_out):
            timer.write(config.profile_out, config.model, config.batch_size, comm.world_size)
    elif timer:  # resumed at its last step: nothing was timed, and the asker should know
        print(f"sync.py: note: no step ran (the checkpoint is at step {start_step} of "
              f"{config.steps}), so --profile-out {config.profile_out} was not written",
              file=sys.stderr, flush=True)


def loss_curve(comm, recorder, start_step: int) -> list[list]:
    """Collective: ``[step, end_s, loss]`` per step of this run (rank 0's seconds since the
    barrier before the first step; the loss averaged over ranks, null when emulated), the first
    ``LOSS_CURVE_LIMIT`` steps. One all-reduce after training, none during it."""
    losses = recorder.losses[:LOSS_CURVE_LIMIT]
    if not losses:
        return []
    mean = torch.tensor(losses, dtype=torch.float64, device=comm.device)
    comm.all_reduce(mean, op="avg")
    return [[start_step + i, end_s, None if math.isnan(x) else x]
            for i, (end_s, x) in enumerate(zip(recorder.ends_s, mean.tolist()))]


if __name__ == "__main__":
    fast_exit(run_command_line(main, keep_status=True))  # a rank fails for no reader's sake
