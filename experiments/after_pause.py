"""How a replica's step runs after a pause: one process of ``real/sync.py``, run alone with
``--emulate-comm`` at each of several waits, its compute and the rest of its step.

    python -m experiments.after_pause --model mlp --pauses 0,39ms,156ms --repeats 2

The sync model (``experiments.sync_model``) prices a replica's compute and the rest of its step
(data, optimizer) from one process run alone, its steps back to back. On the test bed a step's
CPU work follows the gradient's all-reduce, tens of milliseconds in which the replica waits on
its links. Where caches and the processor's state go cold in such a wait, the same work takes
longer after it. This runs the single-process step after each wait in ``--pauses`` (the waits
taken in turn, ``--repeats`` times, so that a drift of the machine's state falls on all of them)
and prints, per wait, the median over its runs of ``compute_time_s`` and ``idle_time_s`` (each
run's median over its steps after the warm-up) and their ratio to the shortest wait's.
``--json FILE`` writes every run's figures.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type, check_output_file,
                                       parse_seed, run_command_line, write_json_output)
from dsgd_sim.compute import MAX_TIME_S
from dsgd_sim.units import format_time, parse_time
from experiments.configs import SyncRunConfig
from experiments.sync_model import RUN_TIMEOUT_S, run_alone
from real.models import MODELS

MAX_REPEATS = 100
MAX_STEPS = 10_000


def parse_pauses(text: str) -> list[float]:
    """``0,39ms,156ms`` -> seconds, each once, in the order given."""
    pauses = []
    for item in text.split(","):
        item = item.strip()
        seconds = parse_time(item)
        if seconds > MAX_TIME_S:
            raise ValueError(f"pause {item} is more than {MAX_TIME_S:g} s")
        if seconds in pauses:
            raise ValueError(f"pause {item} given twice")
        pauses.append(seconds)
    return pauses


def measure(pauses: list[float], repeats: int, model: str = "mlp", batch_size: int = 32,
            steps: int = 40, warmup_steps: int = 5, run=None, seed: int = 0) -> list[dict]:
    """Per pause, each run's ``compute_time_s`` and ``idle_time_s`` (``run``: one process of
    ``real/sync.py`` alone with ``--emulate-comm`` at that pause), the pauses taken in turn."""
    run = run or run_alone
    config = SyncRunConfig(hosts=1, bandwidth_bps=1.0, model=model, batch_size=batch_size,
                           steps=steps, warmup_steps=warmup_steps)
    runs: dict[float, list[dict]] = {p: [] for p in pauses}
    for _ in range(repeats):
        for pause in pauses:
            summary = run(config, steps, warmup_steps, "--emulate-comm", f"{pause}s", "--seed",
                          str(seed))[0]
            runs[pause].append({"compute_s": summary["compute_time_s"],
                                "rest_s": summary["idle_time_s"]})
    return [{"pause_s": p, "runs": runs[p],
             "compute_s": statistics.median(r["compute_s"] for r in runs[p]),
             "rest_s": statistics.median(r["rest_s"] for r in runs[p])} for p in pauses]


def table_lines(rows: list[dict]) -> list[str]:
    """One line per pause: the medians and their ratio to the shortest pause's."""
    base = min(rows, key=lambda r: r["pause_s"])
    return [f"after {format_time(r['pause_s']):>9}: compute {format_time(r['compute_s'])} "
            f"({r['compute_s'] / base['compute_s']:.2f}x), rest of the step "
            f"{format_time(r['rest_s'])} ({r['rest_s'] / base['rest_s']:.2f}x)" for r in rows]


def main(argv=None) -> int:
    parser = OneLineArgumentParser(prog="python -m experiments.after_pause",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", help="real/sync.py's model (default mlp)")
    parser.add_argument("--batch-size", type=int, default=32, help="per step (default 32)")
    parser.add_argument("--pauses", type=argparse_type(parse_pauses, "pauses"),
                        default=[0.0, 0.039, 0.156],
                        help="waits after each step's exchange, e.g. 0,39ms,156ms (the default)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per pause (default 2)")
    parser.add_argument("--steps", type=int, default=40, help="steps a run (default 40)")
    parser.add_argument("--warmup-steps", type=int, default=5, help="not timed (default 5)")
    parser.add_argument("--seed", type=argparse_type(parse_seed, "seed"), default=0,
                        help="real/sync.py's seed (default 0)")
    parser.add_argument("--json", help="write every run's figures here")
    args = parser.parse_args(argv)
    if not 1 <= args.repeats <= MAX_REPEATS:
        parser.error(f"--repeats must be 1 to {MAX_REPEATS}, got {args.repeats}")
    if not 0 <= args.warmup_steps < args.steps <= MAX_STEPS:
        parser.error(f"need 0 <= --warmup-steps < --steps <= {MAX_STEPS}, got "
                     f"{args.warmup_steps} and {args.steps}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    longest_s = args.steps * max(args.pauses)
    if longest_s > RUN_TIMEOUT_S / 2:  # the rest of a run (start-up, compute) needs the other half
        parser.error(f"--steps × the longest pause is {format_time(longest_s)}, more than the "
                     f"{format_time(RUN_TIMEOUT_S / 2)} a run may wait")
    if args.model not in MODELS:
        parser.error(f"unknown --model {args.model!r} (choose from {', '.join(MODELS)})")
    try:
        check_output_file("--json", args.json)
    except ValueError as error:
        parser.error(str(error))
    try:
        rows = measure(args.pauses, args.repeats, args.model, args.batch_size, args.steps,
                       args.warmup_steps, seed=args.seed)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as error:
        # a run of real/sync.py that failed or wrote no summary: its own last line, if any
        stderr = getattr(error, "stderr", b"") or b""
        last = stderr.decode(errors="replace").strip().splitlines()[-1:] or [
            f"{type(error).__name__}: {error}"]
        print(f"experiments.after_pause: a single-process run failed: {last[0]}",
              file=sys.stderr)
        return 1
    print("\n".join(table_lines(rows)))
    return write_json_output("experiments.after_pause", "--json", args.json,
                             {"model": args.model, "batch_size": args.batch_size,
                              "steps": args.steps, "warmup_steps": args.warmup_steps,
                              "repeats": args.repeats, "seed": args.seed, "pauses": rows})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
