"""How a parameter server's updates were spaced on the test bed: the gaps between its updates.

    python -m experiments.update_gaps experiments/results/full-*
    python -m experiments.update_gaps FOLDERS --row '4 workers 1000Mbps mlp emulate 50ms'

For one row of each stored run's ``async.json`` (folders written by ``experiments/run.py
--out``), the gaps between the server's consecutive updates after the run's warm-up, read from
the clock of each update its run kept (``loss_curve``). A gap longer than ``--bubble`` is a
bubble: a push that waited behind a reply the server had just started (``docs/async.md``, the
notice). Prints one line a run: how many bubbles a round of the workers' pushes, the median of
the other gaps, and the row's price and measurement. With 8 workers at 1000 Mbit/s the
simulator settles either into a round with one bubble or into pushes back to back, and so
does the bed (``experiments/LOG.md``, ``async``). Reads only.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import argparse_type, read_json, run_command_line  # noqa: E402
from dsgd_sim.units import format_time, parse_time  # noqa: E402
from experiments.emulated_steps import folders_parser, parse_folders, report_folders  # noqa: E402
from experiments.stored import check_folder, stored_file  # noqa: E402

ROW = "8 workers 1000Mbps mlp emulate 50ms"
BUBBLE_S = 0.013  # a push that waited a notice queue (about 6 ms) more than a push's 8 ms


def gaps(measured: dict) -> list[float]:
    """Seconds between the server's consecutive updates after the warm-up (``measured``: a
    row's ``measured``, as ``real/async_ps.py --json`` writes it)."""
    clock = [point[0] for point in measured["loss_curve"]]
    timed = clock[measured["warmup_updates"]:]
    if len(timed) < 2:
        raise ValueError(f"{len(timed)} updates after the warm-up: no gap to read")
    return [later - earlier for earlier, later in zip(timed, timed[1:])]


def spacing(row: dict, bubble_s: float) -> dict:
    """A row's bubbles a round (``workers`` pushes) and the median of its other gaps."""
    spaced = gaps(row["measured"])
    bubbles = [g for g in spaced if g > bubble_s]
    rest = [g for g in spaced if g <= bubble_s]
    return {"bubbles_a_round": len(bubbles) / len(spaced) * row["workers"],
            "median_gap_s": statistics.median(rest) if rest else None, "gaps": len(spaced)}


def folder_lines(folder: Path, row_config: str, bubble_s: float) -> list[str]:
    """The line of ``folder``'s ``row_config`` row, or none where its run has no such row;
    ``StoredRunError`` naming the folder or async.json where either is not as experiments/run.py
    writes it."""
    check_folder(folder)
    with stored_file("async.json"):
        rows = [r for r in read_json(folder / "async.json")["rows"]
                if r["config"] == row_config]
        seen_rows = [(row, spacing(row, bubble_s)) for row in rows]
    lines = []
    for row, seen in seen_rows:
        rest = "-" if seen["median_gap_s"] is None else format_time(seen["median_gap_s"])
        lines.append(f"| {folder} | {seen['gaps']} | {seen['bubbles_a_round']:.2f} | {rest} | "
                     f"{row['predicted_s'] * 1e3:.3f} ms | {row['measured_s'] * 1e3:.3f} ms | "
                     f"{row['predicted_s'] / row['measured_s'] - 1:+.1%} |")
    return lines


def main(argv=None) -> int:
    parser = folders_parser("update_gaps", __doc__)
    parser.add_argument("--row", default=ROW,
                        help=f"the async.json row, by its config (default: {ROW!r})")
    parser.add_argument("--bubble", type=argparse_type(parse_time, "time"), default=BUBBLE_S,
                        help="a gap longer than this is a bubble (default: 13ms)")
    args = parse_folders(parser, argv)
    if not args.bubble > 0:
        parser.error(f"--bubble must be a positive time, got {args.bubble!r} s")
    header = ["| run | gaps | bubbles a round | median of the other gaps | priced | measured | error |",
              "|---|---|---|---|---|---|---|"]
    return report_folders("experiments.update_gaps", args.folders,
                          lambda folder: folder_lines(folder, args.row, args.bubble),
                          lambda lines: header + lines, f"async row {args.row!r}")


if __name__ == "__main__":
    sys.exit(run_command_line(main))
