"""Simulator speed: simulated iterations per second of synchronous SGD.

    python benchmarks/sim_sync.py [--repeats 3] [--seed 0] [--json FILE]

Measures (pinned to one CPU core, medians of several runs):
  * 1024 replicas x 1000 iterations of ring sync SGD (target: at most 10 s), in closed form
    (the plain case) and with a SimPy process per replica (as ``--cores``, ``--overlap`` and
    the ps algorithm run);
  * 8192 replicas sharing 16 cores x 10 iterations (every compute step a job of the shared
    cores; target: at most 10 s);
  * the default command ``python -m dsgd_sim --replicas 16 --bandwidth 10Gbps``, start-up
    included (target: at most 1 s).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time

from dsgd_sim import ClusterConfig, SyncConfig, SyncSimulation, from_preset
from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type, check_output_file,
                                       parse_seed, run_command_line, write_json_output)


MAX_REPEATS = 1000  # each repeat runs the whole benchmark: more is a typo


def parse_args(description: str, argv=None):
    """``--repeats``, ``--seed`` and ``--json`` of the simulator benchmarks; a bad one is one
    line, exit 2."""
    parser = OneLineArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each timed case, the median reported (the default "
                        "command at least 5) (default %(default)s)")
    parser.add_argument("--seed", type=argparse_type(parse_seed, "seed"), default=0,
                        help="the simulations' seed (default 0)")
    parser.add_argument("--json", metavar="FILE", help="every figure in one file")
    args = parser.parse_args(argv)
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must be from 1 to {MAX_REPEATS}, got {args.repeats}")
    try:
        check_output_file("--json", args.json)
    except ValueError as error:
        parser.error(str(error))
    return args


def write_json(path: str | None, result: dict) -> None:
    """Write ``result`` to ``path`` (None: not asked for); a file that cannot be written after
    all is one line and exit status 1: the figures are printed above."""
    if write_json_output(os.path.basename(sys.argv[0]), "--json", path, result, indent=2):
        raise SystemExit(1)


def pin_to_one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def time_large_run(replicas: int, iterations: int, processes: bool = False,
                   cores: int | None = None, seed: int = 0) -> tuple[float, float]:
    """(wall seconds, CPU seconds): on a busy machine the CPU time is the fairer figure.
    ``processes``: run the plain case with its SimPy processes, not in closed form; ``cores``:
    the replicas share that many cores."""
    config = SyncConfig(ClusterConfig(replicas, cores=cores), from_preset("resnet50"), "ring",
                        iterations, seed)
    simulation = SyncSimulation(config)
    if processes:
        simulation.plain = False
    start, start_cpu = time.perf_counter(), time.process_time()
    simulation.run()
    return time.perf_counter() - start, time.process_time() - start_cpu


def time_default_command(seed: int = 0) -> tuple[float, float]:
    """(wall, CPU of the child) seconds of the default command, start-up included."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dsgd_sim", "--replicas", "16", "--bandwidth", "10Gbps",
                    "--seed", str(seed)],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user - before.children_user) + \
        (after.children_system - before.children_system)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    pin_to_one_core()
    large = [time_large_run(1024, 1000, seed=args.seed) for _ in range(args.repeats)]
    slow = [time_large_run(1024, 1000, processes=True, seed=args.seed) for _ in range(args.repeats)]
    shared = [time_large_run(8192, 10, cores=16, seed=args.seed) for _ in range(args.repeats)]
    default = [time_default_command(args.seed) for _ in range(max(args.repeats, 5))]
    wall, cpu = statistics.median(w for w, _ in large), statistics.median(c for _, c in large)
    p_wall, p_cpu = statistics.median(w for w, _ in slow), statistics.median(c for _, c in slow)
    result = {
        "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
        "seed": args.seed,
        "ring_1024x1000_s": wall,
        "ring_1024x1000_cpu_s": cpu,
        "ring_1024x1000_iterations_per_s": 1000 / wall,
        "ring_1024x1000_processes_s": p_wall,
        "ring_1024x1000_processes_cpu_s": p_cpu,
        "ring_8192x10_16_cores_s": statistics.median(w for w, _ in shared),
        "ring_8192x10_16_cores_cpu_s": statistics.median(c for _, c in shared),
        "default_command_s": statistics.median(w for w, _ in default),
    }
    print(f"1024 replicas x 1000 iterations (ring): {wall:.2f} s wall, {cpu:.2f} s CPU, median "
          f"({1000 / cpu:.0f} simulated iterations per CPU-second; target <= 10 s)")
    print(f"the same, a SimPy process per replica: {p_wall:.2f} s wall, {p_cpu:.2f} s CPU, median "
          f"(target <= 10 s)")
    print(f"8192 replicas on 16 cores x 10 iterations: {result['ring_8192x10_16_cores_s']:.2f} s "
          f"wall, {result['ring_8192x10_16_cores_cpu_s']:.2f} s CPU, median (target <= 10 s)")
    print(f"default command, start-up included:   {result['default_command_s']:.2f} s median "
          f"(target <= 1 s)")
    write_json(args.json, result)


if __name__ == "__main__":
    sys.exit(run_command_line(main))
