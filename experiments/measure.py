"""Runs on the test bed: calibration per rate, and one test bed per experiment point.

Every rank is started directly on its host (``RANK``/``WORLD_SIZE`` from the test bed's
``{rank}``/``{hosts}``, ``MASTER_ADDR``/``MASTER_PORT`` from its environment) rather than through
torchrun: the process group is the same, and start-up on a busy 2-core machine is seconds shorter.
(The torchrun c10d path across hosts is what the test bed's own tests check.)
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from real.testbed import Testbed, TestbedConfig, TestbedError
from real.testbed.calibrate import calibrate

from .configs import AllReduceConfig, SyncRunConfig

REPO = Path(__file__).resolve().parent.parent
CALIBRATION_SIZES = [2_000_000, 16_000_000]


def calibrate_rate(bandwidth_bps: float, quick: bool) -> dict:
    """The calibration record of a 2-host test bed at ``bandwidth_bps`` (network only)."""
    return calibrate(TestbedConfig(hosts=2, bandwidth_bps=bandwidth_bps), CALIBRATION_SIZES,
                     pings=100 if quick else 200, repeats=3)


def _rank_command(script: str, args: list[str]) -> str:
    python = shlex.quote(sys.executable)
    return (f"RANK={{rank}} WORLD_SIZE={{hosts}} {python} {shlex.quote(str(REPO / script))} "
            + " ".join(shlex.quote(a) for a in args))


def _run(config, command: str, json_name: str, timeout_s: float) -> dict:
    with Testbed(TestbedConfig(hosts=config.hosts, bandwidth_bps=config.bandwidth_bps)) as bed:
        result = bed.run(command, timeout_s=timeout_s, echo=False)
    if not result.ok:
        tail = (result.hosts[0].stderr().strip().splitlines() or ["(no output)"])[-1]
        raise TestbedError(f"{config.label}: exit {result.exit_status()}: {tail}")
    return result.hosts[0].json[json_name]


def measure_allreduce(config: AllReduceConfig, timeout_s: float = 900.0) -> list[dict]:
    """``real/allreduce.py`` on ``config.hosts`` hosts: its result rows (median seconds per
    algorithm and size, slowest rank's time)."""
    args = ["--sizes", ",".join(f"{s}B" for s in config.sizes_bytes),
            "--algorithms", ",".join(config.algorithms), "--iters", str(config.iters),
            "--warmup", str(config.warmup), "--timeout", "120s"]
    command = _rank_command("real/allreduce.py", args) + " --json {out}/allreduce.json"
    return _run(config, command, "allreduce.json", timeout_s)["results"]


def measure_sync(config: SyncRunConfig, timeout_s: float = 900.0) -> dict:
    """``real/sync.py`` with one replica per host: rank 0's summary."""
    args = ["--model", config.model, "--steps", str(config.steps), "--warmup-steps",
            str(config.warmup_steps), "--batch-size", str(config.batch_size), "--no-progress",
            "--threads", "1",
            "--emulate-compute", f"{config.emulate_compute_s}s"]
    command = _rank_command("real/sync.py", args) + " --json {out}/sync.json"
    return _run(config, command, "sync.json", timeout_s)
