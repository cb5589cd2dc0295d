"""Simulator speed: simulated updates per second of asynchronous SGD with a parameter server.

    python benchmarks/sim_async.py [--repeats 3] [--seed 0] [--json FILE]

Measures, pinned to one CPU core, medians of ``--repeats`` runs, in CPU seconds (the fairer
figure on a shared machine) and wall seconds:
  * 1000 workers x 100,000 updates (target: at most 30 s) on three networks: ResNet-50 gradients
    through one 10 Gbit/s server NIC (NIC-bound, the default cluster); free communication with
    exponential compute (the renewal case); 1 Gbit/s workers into a 100 Gbit/s server (a hundred
    flows in the NIC at once, the costliest case for the NIC model);
  * the default command ``python -m dsgd_sim --replicas 16 --bandwidth 10Gbps`` (sync and async
    side by side), start-up included (target: at most 1 s).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time

from sim_sync import parse_args, pin_to_one_core, time_default_command, write_json  # here

from dsgd_sim import ClusterConfig, from_preset
from dsgd_sim.argparse_oneline import run_command_line
from dsgd_sim.compute import Exponential
from dsgd_sim.parameter_server import AsyncConfig, AsyncSimulation

WORKERS, UPDATES = 1000, 100_000
CASES = {
    "resnet50_10Gbps_nic_bound": (ClusterConfig(WORKERS), from_preset("resnet50")),
    "free_comm_exp80ms": (ClusterConfig(WORKERS, latency_s=0.0),
                          from_preset("resnet50").with_grad_bytes(0)
                          .with_compute(Exponential(0.08))),
    "1Gbps_workers_100Gbps_server": (ClusterConfig(WORKERS, 1e9, 10e-6, 100e9),
                                     from_preset("resnet50")),
}


def time_run(cluster: ClusterConfig, workload, seed: int) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, simulated updates per second) of one run."""
    config = AsyncConfig(cluster, workload, UPDATES, seed=seed)
    start, start_cpu = time.perf_counter(), time.process_time()
    result = AsyncSimulation(config).run()
    return time.perf_counter() - start, time.process_time() - start_cpu, result.updates_per_s


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    pin_to_one_core()
    result = {"machine": f"{platform.processor() or platform.machine()}, "
                         f"Python {platform.python_version()}", "seed": args.seed}
    for name, (cluster, workload) in CASES.items():
        runs = [time_run(cluster, workload, args.seed) for _ in range(args.repeats)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        result[f"{name}_s"], result[f"{name}_cpu_s"] = wall, cpu
        print(f"{WORKERS} workers x {UPDATES:,} updates, {name}: {wall:.2f} s wall, {cpu:.2f} s "
              f"CPU, median ({UPDATES / cpu:,.0f} simulated updates per CPU-second; target <= 30 s)")
    default = [time_default_command(args.seed) for _ in range(max(args.repeats, 5))]
    result["default_command_s"] = statistics.median(w for w, _ in default)
    result["default_command_cpu_s"] = statistics.median(c for _, c in default)
    print(f"default command (sync + async), start-up included: {result['default_command_s']:.2f} s "
          f"wall, {result['default_command_cpu_s']:.2f} s CPU, median (target <= 1 s)")
    write_json(args.json, result)


if __name__ == "__main__":
    sys.exit(run_command_line(main))
