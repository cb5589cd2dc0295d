"""Samples per second of each gradient synchronisation of ``real/sync.py``, against DDP.

For every model and number of ranks, one local job (Gloo, CPU) trains with each ``--sync`` mode in
turn, in several rounds with the order shuffled per round, all inside the same process group: the
modes share the same background load, and a ratio to ``ddp`` is taken within each round and its
median reported. Each training run discards its warm-up steps and times the rest between two
barriers (``real/sync_report.py``)::

    python benchmarks/sync_throughput.py                       # lenet and mlp-large, 2 and 4 ranks
    python benchmarks/sync_throughput.py --models mlp-large --ranks 4 --emulate-compute 80ms \\
        --json sync_bench.json

The launching process prints one row per (model, ranks, sync) (``-`` for the ratios when
``--sync`` leaves out ``ddp``): median samples/s, the median and the range of the
per-round ratio to DDP, and the median per-step compute, exposed communication and idle times.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import random
import statistics
import sys
import tempfile

if __package__ in (None, ""):
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.multiprocessing as mp

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, check_output_file, parse_flag,
                                       run_command_line, write_json_output)
from dsgd_sim.units import parse_time
from real.comm import init
from real.data import ShardedBatches, check_synthetic_fits, load_dataset
from real.local_launch import MAX_LOCAL_PROCESSES, free_port
from real.sync import train
from real.sync_config import SyncConfig

MODES = ("ddp", "bucketed", "flat", "per-param")


def worker(rank, world_size, port, jobs, out_dir, rounds, seed):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
    comm = init("torch", "gloo", timeout_s=120, check_sizes=False)
    try:
        dataset = load_dataset(SyncConfig().dataset_spec, jobs[0]["num_samples"], seed)
        order = random.Random(seed)
        for round_index in range(rounds):
            shuffled = list(jobs)
            order.shuffle(shuffled)  # the same order on every rank: same seed
            for job in shuffled:
                name = f"{job['sync']}-{job['allreduce']}-{round_index}.json"
                with contextlib.redirect_stdout(io.StringIO()):  # each run's own done line:
                    train(SyncConfig(**job, json=os.path.join(out_dir, name)), comm, dataset,
                          torch.device("cpu"))  # the table below says it per row
    finally:
        comm.close()


def run_config(model, world_size, args) -> list[dict]:
    jobs = [dict(model=model, sync=sync, allreduce=allreduce, steps=args.steps + args.warmup,
                 warmup_steps=args.warmup, batch_size=args.batch_size,
                 num_samples=args.num_samples, emulate_compute_s=args.emulate_compute_s,
                 bucket_mb=args.bucket_mb, progress=False, seed=args.seed)
            for sync in args.sync for allreduce in (["backend"] if sync == "ddp" else args.allreduce)]
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(worker, args=(world_size, free_port("127.0.0.1"), jobs, out_dir,
                                         args.rounds, args.seed),
                           nprocs=world_size, start_method="spawn")
        return load_runs(out_dir)


def load_runs(out_dir: str) -> list[dict]:
    """Every run's summary in ``out_dir``, with its round from the file name
    ``SYNC-ALLREDUCE-ROUND.json`` (the sync mode may itself hold a dash: ``per-param``)."""
    runs = []
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name)) as handle:
            runs.append({**json.load(handle), "round": int(name[:-len(".json")].rsplit("-", 1)[1])})
    return runs


def summarise(results: list[dict]) -> list[dict]:
    ddp = {r["round"]: r["samples_per_s"] for r in results if r["sync"] == "ddp"}
    rows = []
    for key in dict.fromkeys((r["sync"], r["allreduce"]) for r in results):
        runs = [r for r in results if (r["sync"], r["allreduce"]) == key]
        def median(field):
            values = [r[field] for r in runs if r[field] is not None]
            return statistics.median(values) if values else None
        ratios = [r["samples_per_s"] / ddp[r["round"]] for r in runs if r["round"] in ddp]
        rows.append({"model": runs[0]["model"], "world_size": runs[0]["world_size"],
                     "sync": key[0], "allreduce": key[1], "rounds": len(runs),
                     "samples_per_s": median("samples_per_s"),
                     "ratio_to_ddp": statistics.median(ratios) if ratios else None,
                     "ratio_range": [min(ratios), max(ratios)] if ratios else None,
                     "samples_per_s_runs": [r["samples_per_s"] for r in runs],
                     "iteration_time_s": median("iteration_time_s"),
                     "compute_time_s": median("compute_time_s"),
                     "comm_time_s": median("comm_time_s"), "idle_time_s": median("idle_time_s")})
    return rows


def print_row(row: dict) -> None:
    def ms(value):
        return "     -" if value is None else f"{value * 1e3:6.1f}"
    sync = row["sync"] if row["allreduce"] == "backend" else f"{row['sync']}/{row['allreduce']}"
    ratio, spread = "-", "-"  # without ddp in --sync there is nothing to divide by
    if row["ratio_to_ddp"] is not None:
        low, high = row["ratio_range"]
        ratio, spread = f"{row['ratio_to_ddp']:.2f}", f"{low:.2f}-{high:.2f}"
    print(f"{row['model']:>9} {row['world_size']:>5} {sync:>15} {row['samples_per_s']:>10.0f} "
          f"{ratio:>7} {spread:>10} {ms(row['iteration_time_s'])} "
          f"{ms(row['compute_time_s'])} {ms(row['comm_time_s'])} {ms(row['idle_time_s'])}",
          flush=True)


def parse_ranks(text: str) -> list[int]:
    """``--ranks``: comma-separated whole numbers (``2,4``); ``ValueError`` naming the flag."""
    try:
        return [int(n) for n in text.split(",")]
    except ValueError:
        raise ValueError(f"--ranks {text!r}: expected comma-separated whole numbers of ranks, "
                         f"e.g. 2,4") from None


def check_allreduce_used(syncs: list[str], allreduces: list[str]) -> None:
    """``ValueError`` for an ``--allreduce`` that no run would use: ``ddp`` always runs the
    backend's own all-reduce, so with ``--sync ddp`` alone any other would be ignored."""
    if set(syncs) == {"ddp"} and allreduces != ["backend"]:
        raise ValueError(f"--allreduce {','.join(allreduces)}: --sync ddp uses the backend's "
                         f"own all-reduce; add another --sync mode ({', '.join(MODES[1:])}) "
                         f"or leave --allreduce out")


def main(argv=None) -> int:
    p = OneLineArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="lenet,mlp-large",
                   help="comma-separated, from lenet, mlp, mlp-large (default %(default)s)")
    p.add_argument("--ranks", default="2,4",
                   help="comma-separated numbers of ranks, a job each (default %(default)s)")
    p.add_argument("--sync", default=",".join(MODES),
                   help="comma-separated --sync modes of real/sync.py (default %(default)s)")
    p.add_argument("--allreduce", default="backend", help="e.g. backend,ring (not for ddp)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps before each run's timed ones (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of every mode, in a shuffled order each (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="samples per rank a step (default %(default)s)")
    p.add_argument("--num-samples", type=int, default=4096,
                   help="size of the synthetic data set (default %(default)s)")
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="bucket capacity in MiB of bucketed and ddp (default %(default)g)")
    p.add_argument("--emulate-compute", default="0",
                   help="e.g. 80ms: sleep instead of compute (default 0: real compute)")
    p.add_argument("--seed", type=int, default=0,
                   help="model initialisation, data, the modes' order (default %(default)s)")
    p.add_argument("--json", default=None, metavar="FILE", help="every row in one file")
    args = p.parse_args(argv)
    try:
        if args.warmup < 0:  # else SyncConfig names its own field, --warmup-steps
            raise ValueError(f"--warmup must be at least 0, got {args.warmup}")
        args.emulate_compute_s = parse_flag("--emulate-compute", parse_time, args.emulate_compute)
        args.sync = list(dict.fromkeys(args.sync.split(",")))  # a mode twice: one file name
        args.allreduce = list(dict.fromkeys(args.allreduce.split(",")))
        check_allreduce_used(args.sync, args.allreduce)
        ranks = parse_ranks(args.ranks)
        for model in args.models.split(","):  # every run's settings, checked before any runs
            for sync in args.sync:
                for allreduce in ["backend"] if sync == "ddp" else args.allreduce:
                    SyncConfig(model=model, sync=sync, allreduce=allreduce,
                               steps=args.steps + args.warmup, warmup_steps=args.warmup,
                               batch_size=args.batch_size, num_samples=args.num_samples,
                               emulate_compute_s=args.emulate_compute_s,
                               bucket_mb=args.bucket_mb, seed=args.seed)
        for world_size in ranks:
            if not 1 <= world_size <= MAX_LOCAL_PROCESSES:
                raise ValueError(f"--ranks: each must be from 1 to {MAX_LOCAL_PROCESSES}, "
                                 f"got {world_size}")
            ShardedBatches(args.num_samples, args.batch_size, world_size, 0, args.seed)
        check_synthetic_fits(args.num_samples)  # else found by each rank, in a traceback
        if args.steps < 1 or args.rounds < 1:
            raise ValueError(f"--steps and --rounds must be at least 1, got {args.steps} and "
                             f"{args.rounds}")
        check_output_file("--json", args.json)
    except ValueError as error:
        p.error(str(error))
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, Gloo; "
          f"batch {args.batch_size}/rank, {args.steps} timed steps x {args.rounds} rounds, "
          f"emulated compute {args.emulate_compute_s * 1e3:g} ms")
    print(f"{'model':>9} {'ranks':>5} {'sync':>15} {'samples/s':>10} {'vs ddp':>7} {'range':>10} "
          f"{'it ms':>6} {'cmp ms':>6} {'comm ms':>6} {'idle ms':>6}")
    rows = []
    for model in args.models.split(","):
        for world_size in ranks:
            for row in summarise(run_config(model, world_size, args)):
                print_row(row)
                rows.append(row)
    return write_json_output(p.prog, "--json", args.json,
                             {"machine": platform.node(), "cpus": os.cpu_count(),
                              "torch": torch.__version__, "args": vars(args), "rows": rows})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
