"""Run the all-reduce benchmark for 2 and 4 ranks on both engines and print one Markdown table.

    python benchmarks/allreduce_sweep.py                      # sizes 64KB,1MB,16MB, both engines
    python benchmarks/allreduce_sweep.py --engines torch --ranks 2 --out-dir results/ --json all.json

Each configuration is one run of ``real/allreduce.py`` (torchrun for torch/Gloo, mpiexec for MPI)
that writes ``allreduce_<backend>_p<N>.json`` into ``--out-dir``; the table shows each row's busbw
and its ratio to the backend's own all-reduce measured in the same run. ``--json FILE`` writes
every run's record in one file (``{"runs": [...]}``); ``--seed`` seeds every run's buffers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, check_output_dir,  # noqa: E402
                                       check_output_files, run_command_line, write_json_output)
from dsgd_sim.units import format_bytes, format_rate_Bps, format_time  # noqa: E402
from real.allreduce import parse_args as check_benchmark_flags  # noqa: E402  (one line, exit 2)

MAX_RANKS = 1024  # local processes per run


def run_file_name(engine: str, ranks: int) -> str:
    """The JSON file one run writes into ``--out-dir``."""
    return f"allreduce_{'mpi' if engine == 'mpi' else 'gloo'}_p{ranks}.json"


def command(engine: str, ranks: int, args, out: str) -> list[str]:
    bench = [os.path.join(REPO, "real", "allreduce.py"), "--sizes", args.sizes, "--iters",
             str(args.iters), "--seed", str(args.seed), "--json", out]
    if engine == "mpi":
        return ["mpiexec", "-n", str(ranks), sys.executable, *bench, "--backend", "mpi"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", *bench]


def table(runs: list[dict]) -> str:
    lines = ["| engine | ranks | size | algorithm | time | algbw | busbw | busbw / backend |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        backend = {r["bytes"]: r["busbw_Bps"] for r in run["results"] if r["algorithm"] == "backend"}
        for r in sorted(run["results"], key=lambda r: r["bytes"]):
            reference = backend.get(r["bytes"], 0.0)  # 0 with one rank: nothing crosses a link
            ratio = f"{r['busbw_Bps'] / reference:.2f}" if reference > 0 else "-"
            lines.append(f"| {run['backend']} | {r['world_size']} | {format_bytes(r['bytes'])} | "
                         f"{r['algorithm']} | {format_time(r['time_s'])} | "
                         f"{format_rate_Bps(r['algbw_Bps'])} | {format_rate_Bps(r['busbw_Bps'])} | "
                         f"{ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="torch,mpi", help="comma-separated: torch, mpi")
    parser.add_argument("--ranks", default="2,4", help="comma-separated numbers of ranks")
    parser.add_argument("--sizes", default="64KB,1MB,16MB",
                        help="buffer sizes, comma-separated (default %(default)s)")
    parser.add_argument("--iters", type=int, default=20,
                        help="timed iterations per size (default %(default)s)")
    parser.add_argument("--out-dir", default=".", help="where each run's JSON file goes")
    parser.add_argument("--json", default=None, metavar="FILE", help="every run's record in one file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the buffers' contents")
    args = parser.parse_args(argv)
    engines = list(dict.fromkeys(args.engines.split(",")))  # each named once runs once
    if any(e not in ("torch", "mpi") for e in engines):
        parser.error(f"--engines: expected torch and/or mpi, got {args.engines!r}")
    try:
        ranks = list(dict.fromkeys(int(n) for n in args.ranks.split(",")))
    except ValueError:
        parser.error(f"--ranks: not a list of integers: {args.ranks!r}")
    if not all(1 <= n <= MAX_RANKS for n in ranks):
        parser.error(f"--ranks: each must be from 1 to {MAX_RANKS}, got {args.ranks!r}")
    try:
        check_output_dir("--out-dir", args.out_dir)
    except ValueError as error:
        parser.error(str(error))
    check_benchmark_flags(["--sizes", args.sizes, "--iters", str(args.iters), "--seed",
                          str(args.seed)])
    if "mpi" in engines and shutil.which("mpiexec") is None:
        parser.error("--engines mpi: mpiexec not found (./install.sh mpi installs mpich)")
    outputs = {(engine, n): os.path.join(args.out_dir, run_file_name(engine, n))
               for engine in engines for n in ranks}
    os.makedirs(args.out_dir, exist_ok=True)  # --json may go into it
    try:  # --json on a run's own file would replace what the table is made from
        check_output_files({"--json": args.json},
                           {f"the {engine} run on {n} ranks' file": path
                            for (engine, n), path in outputs.items()})
    except ValueError as error:
        parser.error(str(error))
    runs = []
    for engine in engines:
        for n in ranks:
            out = outputs[engine, n]
            cmd = command(engine, n, args, out)
            print("$", " ".join(cmd), flush=True)
            if subprocess.run(cmd, stdout=sys.stderr).returncode != 0:
                print(f"allreduce_sweep.py: error: the {engine} run on {n} ranks failed (its "
                      f"output is above)", file=sys.stderr)
                return 1
            with open(out) as f:
                runs.append(json.load(f))
    print(table(runs))
    return write_json_output(parser.prog, "--json", args.json, {"runs": runs})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
