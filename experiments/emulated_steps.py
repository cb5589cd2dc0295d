"""The emulated sync steps of stored runs priced two ways: from the single-process emulated step
(``sync_model.emulated_step``, the model the experiments use) and as the model priced them before
it, at the nominal emulated compute and the real-compute profile's rest of the step.

    python -m experiments.emulated_steps experiments/results/full-*

Every emulated row of each folder's ``sync.json`` and of the sync half of its
``async_vs_sync.json``, priced from the rounds stored with it and the folder's calibration
(``run.json``), as ``run.py --repredict`` prices it. Prints, per kind of row, the mean error
both ways, then the median and worst |error| over all of them. The single-process runs (the
profile and the emulated step) are the ones kept with each result, as in ``--repredict``; a
result stored before they were kept has them taken on this machine as it is now, once: they move
with its state (``docs/experiments.md``), so run this on a quiet machine.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import OneLineArgumentParser, run_command_line  # noqa: E402
from experiments.async_vs_sync import AsyncVsSyncConfig  # noqa: E402
from experiments.configs import SyncRunConfig  # noqa: E402
from experiments.grids import check_folders  # noqa: E402
from experiments.model import NetworkInputs  # noqa: E402
from experiments import sync_model  # noqa: E402
from experiments.single_process import RUNS  # noqa: E402
from experiments.stored import (READ_ERRORS, StoredRunError, stored_calibration,  # noqa: E402
                                stored_file, stored_result)

WAYS = ("nominal", "own run")  # the step before sync_model.emulated_step, and with it


def stored_rows(folder: Path) -> list[tuple[str, SyncRunConfig, dict, list, str]]:
    """(kind of row, its run's config, the stored row, the single-process runs kept with its
    result, its file's name) for every emulated sync row of a stored run: the ``sync``
    experiment's and the sync half of ``async_vs_sync``'s."""
    out = []
    sync = folder / "sync.json"
    if sync.is_file():
        result = stored_result(sync, one_row_a_point=True)
        with stored_file(sync.name):
            for point, row in zip(result["points"], result["rows"]):
                config = SyncRunConfig(**{k: v for k, v in point.items() if k != "kind"})
                if config.emulate_compute_s > 0:
                    out.append((f"sync {config.label}", config, row,
                                result.get("single_process", []), sync.name))
    versus = folder / "async_vs_sync.json"
    if versus.is_file():
        result = stored_result(versus)
        with stored_file(versus.name):
            rows = {row["config"]: row for row in result["rows"]}
            for point in result["points"]:
                config = AsyncVsSyncConfig(**{k: v for k, v in point.items() if k != "kind"})
                name = f"sync per step {config.label}"
                if name not in rows:
                    raise ValueError(f"no row {name!r}, though it has the point")
                out.append((f"async_vs_sync {name}", config.sync_run, rows[name],
                            result.get("single_process", []), versus.name))
    return out


def errors(folder: Path) -> list[tuple[str, float, float]]:
    """(kind of row, error priced at the nominal step, error priced from the step's own run) for
    every emulated sync row of the stored run in ``folder``; StoredRunError naming the file
    that is not as experiments/run.py writes it."""
    nets = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c)
            for c in stored_calibration(folder)}
    out = []
    for kind, config, row, kept, name in stored_rows(folder):
        with stored_file(name):
            if config.bandwidth_bps not in nets:
                raise ValueError(f"{kind} is at {config.bandwidth_bps / 1e6:g} Mbit/s, a rate "
                                 "run.json has no calibration at")
            RUNS.restore(kept)  # its result's own runs; what they lack, this machine's (once)
            net = nets[config.bandwidth_bps].with_rounds(config.hosts, row.get("rounds"))
            reference = sync_model.single_process_profile(config)
            nominal = {"compute_time_s": config.emulate_compute_s,
                       "idle_time_s": reference["summary"].get("idle_time_s") or 0.0}
            priced = [sync_model.predict_sync_s(config, net, reference, step=step)
                      for step in (nominal, None)]
        out.append((kind, *(p / row["measured_s"] - 1.0 for p in priced)))
    return out


def summary_lines(rows: list[tuple[str, float, float]]) -> list[str]:
    """Per kind of row its mean error both ways; then the median and worst |error| of all."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    for kind, *both in rows:
        kinds.setdefault(kind, []).append(tuple(both))
    lines = [f"{kind}: {len(v)} rows, mean error " + ", ".join(
        f"{way} {100 * statistics.mean(e[i] for e in v):+.1f}%" for i, way in enumerate(WAYS))
        for kind, v in kinds.items()]
    return lines + overall_lines(rows, WAYS)


def overall_lines(rows: list[tuple], ways: tuple[str, ...], over: float | None = None) -> list[str]:
    """Per way of pricing (``rows``' columns after the first), the median and worst |error| of
    all rows, and how many are over ``over`` where given."""
    lines = []
    for i, way in enumerate(ways):
        size = [abs(r[1 + i]) for r in rows]
        misses = "" if over is None else \
            f", {sum(s > over for s in size)} over {100 * over:g}%"
        lines.append(f"{way}: {len(size)} rows, median |error| {100 * statistics.median(size):.2f}%,"
                     f" worst {100 * max(size):.1f}%{misses}")
    return lines


def folders_parser(module: str, doc: str) -> OneLineArgumentParser:
    """The command line of a tool over stored runs: ``python -m experiments.<module> FOLDER...``."""
    parser = OneLineArgumentParser(prog=f"python -m experiments.{module}",
                                   description=doc.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="stored runs (folders of experiments/run.py)")
    return parser


def parse_folders(parser: OneLineArgumentParser, argv=None):
    """``parser``'s arguments (``folders_parser``'s); a usage error for a folder named twice, as
    ``experiments.grids`` gives (each run's rows count once)."""
    args = parser.parse_args(argv)
    check_folders(parser, [Path(folder) for folder in args.folders], None, ())
    return args


def main(argv=None) -> int:
    args = parse_folders(folders_parser("emulated_steps", __doc__), argv)
    return report_folders("experiments.emulated_steps", args.folders, errors, summary_lines,
                          "emulated sync rows")


def report_folders(tool: str, folders: list[str], errors_of, summary_of, what: str) -> int:
    """Print ``summary_of`` the rows ``errors_of`` finds in each of ``folders``: 0; a folder it
    cannot read, or none holding ``what``, is one line on stderr from ``tool``: 2."""
    rows = []
    for folder in map(Path, folders):
        try:
            rows += errors_of(folder)
        except StoredRunError as error:  # it names the file and says what is wrong
            print(f"{tool}: {folder}: {error}", file=sys.stderr)
            return 2
        except READ_ERRORS as error:  # a file not as run.py writes it
            print(f"{tool}: {folder}: {type(error).__name__}: {error}", file=sys.stderr)
            return 2
    if not rows:
        print(f"{tool}: no {what} in those folders", file=sys.stderr)
        return 2
    print("\n".join(summary_of(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(run_command_line(main))
