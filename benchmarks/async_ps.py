"""Benchmark: asynchronous parameter-server SGD against synchronous SGD, and the server's ceiling.

1. With emulated compute (``exp:MEAN``: exponential noise, as in Dutta et al. 2018), for P = 2, 4
   and 8 processes on this host: the parameter server's updates/s (1 server + P−1 workers,
   ``real/async_ps.py``) against synchronous SGD's iterations/s × P replicas (P ranks, each sleeps
   one draw, then all-reduces the full gradient). Theory: async (P−1)/mean, sync P/(mean·H_P).
2. The server's own ceiling: updates/s when the workers compute nothing, for the small ``mlp``
   (0.94 MB) and ``mlp-large`` (25 MB), with 3 workers.

    python benchmarks/async_ps.py                       # about 4 minutes
    python benchmarks/async_ps.py --procs 2 4 --time 5s --seed 1 --json bench.json

Medians are not needed here: each figure is a rate over a whole timed window (async: updates
after the first round of pushes; sync: iterations between two barriers after a warm-up).
"""

from __future__ import annotations

import json
import os
import platform
import queue
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import torch
import torch.multiprocessing as mp

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type, check_output_file,
                                       parse_flag, parse_seed, run_command_line, write_json_output)
from dsgd_sim.compute import parse_compute
from dsgd_sim.units import parse_time
from real.comm import init
from real.flat_params import flatten_parameters
from real.local_launch import MAX_LOCAL_PROCESSES, free_port
from real.models import MODELS, build_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNC_WARMUP_ITERATIONS = 3


def harmonic(n: int) -> float:
    return sum(1 / k for k in range(1, n + 1))


class BenchmarkError(RuntimeError):
    """A run that failed or timed nothing: reported in one line, exit status 1."""


def async_rate(procs: int, compute: str, seconds: float, model: str, seed: int) -> dict:
    """``real/async_ps.py`` self-launched on ``procs`` processes; its summary.
    :class:`BenchmarkError` when the run fails or its timed window holds no update."""
    with tempfile.TemporaryDirectory() as workdir:
        path = os.path.join(workdir, "summary.json")
        done = subprocess.run([sys.executable, "real/async_ps.py", "--nproc-per-node", str(procs),
                               "--emulate-compute", compute, "--time", f"{seconds}s", "--model",
                               model, "--seed", str(seed), "--no-progress", "--json", path],
                              cwd=REPO,
                              stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            raise BenchmarkError(f"real/async_ps.py on {procs} processes failed with status "
                                 f"{done.returncode} (its output is above)")
        with open(path) as handle:
            summary = json.load(handle)
    if summary["updates_per_s"] is None:  # the window closed before the first timed update
        raise BenchmarkError(f"the async run on {procs} processes timed no update in "
                             f"{seconds:g} s: give a longer --time")
    return summary


def _sync_rank(rank, procs, port, compute, iterations, model, seed, results):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(procs), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    comm = init("torch", "gloo", timeout_s=60, check_sizes=False)
    try:
        _, grads = flatten_parameters(build_model(model, seed))
        draw = parse_compute(compute)
        rng = np.random.default_rng([seed, rank])
        for i in range(SYNC_WARMUP_ITERATIONS + iterations):
            if i == SYNC_WARMUP_ITERATIONS:
                comm.barrier()
                start = time.perf_counter()
            time.sleep(float(draw.sample(rng, 1)[0]))
            comm.all_reduce(grads, op="avg")
        comm.barrier()
        if rank == 0:
            results.put(iterations / (time.perf_counter() - start))
    finally:
        comm.close()


def sync_rate(procs: int, compute: str, iterations: int, model: str, seed: int) -> float:
    """Iterations/s of barrier-synchronous SGD on ``procs`` ranks with the same emulated compute."""
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port("127.0.0.1")
    ranks = [context.Process(target=_sync_rank, args=(r, procs, port, compute, iterations, model,
                                                      seed, results)) for r in range(procs)]
    for p in ranks:
        p.start()
    try:
        return _rank0_result(results, ranks)
    except BenchmarkError:
        for p in ranks:
            p.terminate()
        raise
    finally:
        for p in ranks:
            p.join()


def _rank0_result(results, ranks) -> float:
    """What rank 0 puts in ``results``; :class:`BenchmarkError` as soon as a rank has failed,
    rather than waiting for a result that will not come."""
    while True:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            failed = [p.exitcode for p in ranks if p.exitcode not in (None, 0)]
            if failed:
                raise BenchmarkError(f"a synchronous SGD rank failed with status {failed[0]} "
                                     f"(its output is above)") from None


MAX_WINDOW_S = 3600.0  # one run's timed window; a longer one is a typo


def window_s(text: str) -> float:
    """``--time``: a time with its unit, or a bare number of seconds, from 0 to an hour."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = parse_time(text)
    if not 0 < seconds <= MAX_WINDOW_S:
        raise ValueError(f"the window must be positive and at most {MAX_WINDOW_S:g} s, got {text!r}")
    return seconds


def main(argv=None) -> int:
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4, 8],
                        help="processes a run: 1 server + P-1 workers, or P sync ranks "
                        "(default 2 4 8)")
    parser.add_argument("--compute-mean", default="50ms", help="mean of the exponential compute")
    parser.add_argument("--time", default="10s",
                        help="async timed window per run: a time (10s, 2min) or bare seconds")
    parser.add_argument("--seed", type=argparse_type(parse_seed, "seed"), default=0,
                        help="seed of the models, the data and the compute draws (default 0)")
    parser.add_argument("--model", default="mlp",
                        help="the model whose gradients move (default %(default)s)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="every figure in one file")
    args = parser.parse_args(argv)
    compute = f"exp:{args.compute_mean}"
    try:
        mean_s = parse_flag("--compute-mean", parse_compute, compute).mean_s
        check_output_file("--json", args.json)
    except ValueError as error:
        parser.error(str(error))
    if not all(2 <= p <= MAX_LOCAL_PROCESSES for p in args.procs):
        parser.error(f"--procs: each must be from 2 (a server and a worker) to "
                     f"{MAX_LOCAL_PROCESSES}, got {args.procs}")
    try:
        args.time = window_s(args.time)
    except ValueError as error:
        parser.error(f"--time: {error}")
    if args.model not in MODELS:
        parser.error(f"unknown --model {args.model!r} (choose from {', '.join(MODELS)})")
    try:
        rows, ceiling = measure(args, compute, mean_s)
    except BenchmarkError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    return write_json_output(parser.prog, "--json", args.json,
                             {"compute": compute, "model": args.model, "seed": args.seed,
                              "rows": rows, "ceiling": ceiling})


def measure(args, compute: str, mean_s: float) -> tuple[list[dict], list[dict]]:
    """Print and return the async-against-sync rows and the server's ceiling."""
    rows = []
    print(f"host: {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
          f"compute {compute}, model {args.model}")
    print(f"{'P':>3} {'async upd/s':>12} {'theory':>8} {'stale mean':>10} {'sync it/s':>10} "
          f"{'x P':>8} {'theory':>8} {'async/sync':>10}")
    for procs in args.procs:
        summary = async_rate(procs, compute, args.time, args.model, args.seed)
        iterations = max(10, int(args.time / (mean_s * harmonic(procs))))
        sync = sync_rate(procs, compute, iterations, args.model, args.seed)
        row = {"procs": procs, "async_updates_per_s": summary["updates_per_s"],
               "async_theory": (procs - 1) / mean_s, "staleness_mean": summary["staleness_mean"],
               "sync_iterations_per_s": sync, "sync_samples_rate": sync * procs,
               "sync_theory": procs / (mean_s * harmonic(procs))}
        row["ratio"] = row["async_updates_per_s"] / row["sync_samples_rate"]
        rows.append(row)
        print(f"{procs:>3} {row['async_updates_per_s']:>12.1f} {row['async_theory']:>8.1f} "
              f"{row['staleness_mean']:>10.2f} {sync:>10.2f} {row['sync_samples_rate']:>8.1f} "
              f"{row['sync_theory']:>8.1f} {row['ratio']:>10.2f}", flush=True)
    ceiling = []
    for model in ("mlp", "mlp-large"):
        summary = async_rate(4, "0", args.time, model, args.seed)
        ceiling.append({"model": model, "grad_bytes": summary["grad_bytes"], "workers": 3,
                        "updates_per_s": summary["updates_per_s"]})
        print(f"server ceiling, {model} ({summary['grad_bytes'] / 1e6:.2f} MB), 3 workers, no "
              f"compute: {summary['updates_per_s']:.1f} updates/s", flush=True)
    return rows, ceiling


if __name__ == "__main__":
    sys.exit(run_command_line(main))
