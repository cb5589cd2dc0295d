"""The parameter-server rows of stored runs priced two ways: without the server's notice (a push
flows as soon as it has its place, the model before the queue probe) and with it (the notice
waits behind what a reply has queued on the server's link, ``AsyncConfig.notice_queue_s``).

    python -m experiments.notice_rows experiments/results/full-* --queue 50Mbps=5.4ms,200Mbps=5.6ms

Every row of each folder's ``async.json``, the PS rows of its ``ps_vs_ring.json`` and the async
half of its ``async_vs_sync.json``, priced from the folder's calibration (``calibration.json``)
as ``run.py --repredict`` prices them. The queue is the calibration's (``queue.behind_bulk_s``);
``--queue`` gives it per rate for runs calibrated before the queue probe, and overrides theirs.
Prints, per kind of row, the mean and worst error both ways and the rows over 8%, then the median
and worst |error| over all of them. The server's apply time and the workers' sleeps come from
the single-process runs kept with each result, as in ``--repredict``; a result stored before
they were kept has them taken on this machine as it is now (``experiments.single_process``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import argparse_type, read_json, run_command_line  # noqa: E402
from dsgd_sim.units import format_bandwidth_bps, parse_bandwidth, parse_time  # noqa: E402
from experiments import async_vs_sync, ps_vs_ring  # noqa: E402
from experiments.emulated_steps import (folders_parser, overall_lines,  # noqa: E402
                                        parse_folders, report_folders)
from experiments.fidelity import WORST_TARGET as TARGET  # noqa: E402
from experiments.model import NetworkInputs  # noqa: E402
from experiments.single_process import RUNS  # noqa: E402
from experiments.stored import stored_calibration, stored_file, stored_result  # noqa: E402

WAYS = ("without the notice", "with it")
MAX_QUEUE_S = 1.0  # a shaper's queue is at most its limit: 100 ms on the test bed


def parse_queues(text: str) -> dict[float, float]:
    """``50Mbps=5.4ms,200Mbps=5.6ms``: the notice queue per link rate (bit/s -> seconds)."""
    queues = {}
    for item in text.split(","):
        rate, sep, wait = item.partition("=")
        if not sep:
            raise ValueError(f"'{item}' is not RATE=TIME (e.g. 200Mbps=5.6ms)")
        seconds = parse_time(wait.strip())
        if not 0 <= seconds <= MAX_QUEUE_S:
            raise ValueError(f"a notice queue must be from 0 to {MAX_QUEUE_S:g} s, got '{wait}'")
        bits_per_s = parse_bandwidth(rate.strip())
        if bits_per_s in queues:
            raise ValueError(f"the rate {rate.strip()!r} is given twice")
        queues[bits_per_s] = seconds
    return queues


def calibrated_rates(folders: list[str]) -> set[float]:
    """The link rates the calibrations in ``folders`` hold (those it can read: the report says
    what is wrong with the others)."""
    rates = set()
    for folder in folders:
        try:
            rates |= {float(r["bandwidth_bps"]) for r in read_json(Path(folder, "calibration.json"))}
        except (OSError, ValueError, TypeError, KeyError):
            pass
    return rates


def repredictors():
    """(experiment, its ``repredict``, which of its rows are parameter-server rows)."""
    from experiments.run import repredict_async
    return (("async", repredict_async, lambda row: True),
            ("ps_vs_ring", ps_vs_ring.repredict, lambda row: row.get("scheme") == "ps"),
            ("async_vs_sync", async_vs_sync.repredict, lambda row: row.get("mode") == "async"))


def errors(folder: Path, queues: dict[float, float]) -> list[tuple[str, float, float]]:
    """(kind of row, error without the notice, error with it) for every parameter-server row of
    the stored run in ``folder``; ``stored.StoredRunError`` naming the file that is not
    as experiments/run.py writes it."""
    calibration = stored_calibration(folder, "calibration.json")
    priced: dict[str, list[float]] = {}
    for way in WAYS:
        nets = {}
        for record in calibration:
            net = NetworkInputs.from_calibration(record)
            queue = queues.get(record["bandwidth_bps"], net.notice_queue_s)
            nets[record["bandwidth_bps"]] = dataclasses.replace(
                net, notice_queue_s=queue if way == WAYS[1] else 0.0)
        for name, repredict, is_ps in repredictors():
            path = folder / f"{name}.json"
            if not path.is_file():
                continue
            result = stored_result(path)
            with stored_file(path.name), contextlib.redirect_stdout(io.StringIO()):
                RUNS.restore(result.get("single_process", []))  # its own single-process runs
                rows = repredict(result, nets)  # (its own progress lines go nowhere)
                for row in filter(is_ps, rows):
                    priced.setdefault(f"{name}: {row['config']}", []).append(
                        row["predicted_s"] / row["measured_s"] - 1.0)
    return [(kind, *both) for kind, both in priced.items()]


def summary_lines(rows: list[tuple[str, float, float]]) -> list[str]:
    """Per kind of row its mean and worst error both ways and the misses; then all of them."""
    kinds: dict[str, list[tuple[float, float]]] = {}
    for kind, *both in rows:
        kinds.setdefault(kind, []).append(tuple(both))
    lines = []
    for kind, pairs in sorted(kinds.items()):
        parts = []
        for i, way in enumerate(WAYS):
            errs = [p[i] for p in pairs]
            parts.append(f"{way} mean {100 * statistics.mean(errs):+.1f}%, worst "
                         f"{100 * max(errs, key=abs):+.1f}%, "
                         f"{sum(abs(e) > TARGET for e in errs)} over {100 * TARGET:g}%")
        lines.append(f"{kind}: {len(pairs)} rows; " + "; ".join(parts))
    return lines + overall_lines(rows, WAYS, TARGET)


def main(argv=None) -> int:
    parser = folders_parser("notice_rows", __doc__)
    parser.add_argument("--queue", type=argparse_type(parse_queues, "queue"), default={},
                        help="the notice queue per rate, e.g. 50Mbps=5.4ms,200Mbps=5.6ms "
                             "(default: each calibration's own)")
    args = parse_folders(parser, argv)
    rates = calibrated_rates(args.folders)
    unused = sorted(set(args.queue) - rates)
    if unused and rates:
        parser.error(f"--queue: no calibration in those folders is at "
                     f"{format_bandwidth_bps(unused[0])} (they have "
                     f"{', '.join(map(format_bandwidth_bps, sorted(rates)))})")
    return report_folders("experiments.notice_rows", args.folders,
                          lambda folder: errors(folder, args.queue), summary_lines,
                          "parameter-server rows")


if __name__ == "__main__":
    sys.exit(run_command_line(main))
