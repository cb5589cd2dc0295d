"""How far the measurements move by themselves: the floor under any prediction of stored grids.

    python -m experiments.floor experiments/results/full experiments/results/full-2b6e8f2 \
        experiments/results/full-310bdec experiments/results/full-a9c7f80
    python -m experiments.floor experiments/results/quick-* --json floor.json

A row misses the worst-row target (8%) when its prediction and its measurement lie more than
8% apart. This tool asks how often the measurements would miss it against themselves, over the
same stored grids (folders written by ``experiments/run.py --out``), in two ways:

- **The other grids' median.** Each row's measurement is set against the median of the same
  row's measurements in the other grids (rows held by fewer than ``MIN_OTHERS`` other grids are
  left out): what a prediction that reads only the row's configuration, and knows the row's
  usual time, would do. It counts each kind's rows over 8%.
- **One side of the bracket.** An all-reduce point is predicted from ring probes launched on
  its own test bed just before and just after its rows (``experiments.measure.bracket``: the
  median over both). Priced by today's model from the probe before alone and from the probe
  after alone, the same bed, minutes apart, it counts each kind's rows that either price misses
  by 8%, and the rows whose two prices lie more than 8% of the measurement apart.

Beside them, each kind's rows over 8% as the grids' ``fidelity.json`` holds them (the model
with both halves). A kind whose measurements miss against themselves as often as the model
misses them is at the machine's floor: no model of the row's configuration can hold it to 8%
in every grid. Prints a Markdown table by kind of row, one by grid, and in how many grids every
row held the target each way. Reads only; each grid's ``run.json`` gives the calibration its
halves are priced from.
"""

from __future__ import annotations

import copy
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, read_json, run_command_line,
                                       write_json_output)
from experiments import allreduce
from experiments.fidelity import WORST_TARGET
from experiments.grids import ALL, GridError, check_folders, read_grids
from experiments.model import NetworkInputs
from experiments.probe_tables import DRIVERS
from experiments.stored import StoredRunError, stored_calibration

MIN_OTHERS = 3  # a row's median over fewer other grids is not a floor
SIDES = ("before", "after")


def one_side(table: dict, side: str) -> dict:
    """A point's bracketed round table (``measure.bracket``'s) as if only the probe ``side``
    ("before" or "after" its rows) had run: that probe's rows, the other's dropped (the model
    reads a table that keeps both as a bracket). Both probes ran one command, so the stream gaps
    they timed together are the first half (before) and the second half (after); so too each
    size's, where the table does not say how many are the first probe's (``before_gaps``),
    except a stream of whole calls (``ring_probe.py --gap-calls whole``), whose probes each made
    as many as fit in their time: without that count (the full and quick grids stored at
    a66db0b) each side keeps both probes' gaps."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    if side not in table:
        raise ValueError("the round table keeps no probe halves (not a bracketed table)")
    out = {k: copy.deepcopy(v) for k, v in table.items()
           if k not in SIDES and not k.endswith(tuple(f"_{s}" for s in SIDES))}
    out["results"] = copy.deepcopy(table[side])
    for driver in DRIVERS:
        if f"{driver}_{side}" in table:
            out[f"{driver}_results"] = copy.deepcopy(table[f"{driver}_{side}"])
    if table.get("stream_gap_s"):
        out["stream_gap_s"] = _half(table["stream_gap_s"], side)
    if table.get("sized_stream_gaps"):
        out["sized_stream_gaps"] = [{**g, "gaps_s": _sized_half(g, side)}
                                    for g in table["sized_stream_gaps"]]
    return out


def _sized_half(sized: dict, side: str) -> list[float]:
    """One probe's gaps of a bracketed table's sized stream (``one_side``)."""
    gaps = sized["gaps_s"]
    if "before_gaps" in sized:
        split = sized["before_gaps"]
        if not 0 < split < len(gaps):
            raise ValueError(f"{split} of {len(gaps)} stream gaps cannot be the first probe's")
        return gaps[:split] if side == "before" else gaps[split:]
    if sized.get("calls") == "whole":
        return list(gaps)
    return _half(gaps, side)


def _half(gaps: list[float], side: str) -> list[float]:
    if len(gaps) % 2:
        raise ValueError(f"{len(gaps)} stream gaps cannot be two probes' equal halves")
    half = len(gaps) // 2
    return gaps[:half] if side == "before" else gaps[half:]


def side_prices(result: dict, net_by_rate: dict) -> dict[str, dict[str, float]]:
    """A stored ``allreduce.json``'s rows priced from each probe half alone: config -> {side:
    predicted seconds}."""
    if not isinstance(result.get("rounds"), dict):
        raise ValueError("its rounds are not a table per test bed")
    out: dict[str, dict[str, float]] = {}
    for side in SIDES:
        halved = {**result, "rounds": {label: one_side(table, side)
                                       for label, table in result["rounds"].items()}}
        for row in allreduce.repredict(halved, net_by_rate):
            out.setdefault(row["config"], {})[side] = row["predicted_s"]
    return out


def grid_calibration(folder: Path) -> dict:
    """The calibrated inputs by rate of one stored grid, from its ``run.json``: GridError naming
    the file where it is missing, or its calibration is not as experiments/run.py writes it
    (``stored.stored_calibration``)."""
    if not (folder / "run.json").exists():
        raise GridError(f"{folder}: no run.json (the halves are priced from the grid's own "
                        "calibration)")
    try:
        records = stored_calibration(folder)
    except StoredRunError as error:
        raise GridError(f"{folder}: {error}") from None
    try:
        return {c["bandwidth_bps"]: NetworkInputs.from_calibration(c) for c in records}
    except (KeyError, TypeError, IndexError) as error:  # a table the model cannot read
        raise GridError(f"{folder}: run.json: a calibration record not as experiments/run.py "
                        f"writes it ({type(error).__name__}: {error})") from None


def grid_side_prices(folder: Path) -> dict[str, dict[str, float]]:
    """``side_prices`` of one stored grid, from its ``run.json`` calibration; {} where the grid
    has no all-reduce rows."""
    path = folder / "allreduce.json"
    if not path.exists():
        return {}
    net_by_rate = grid_calibration(folder)
    try:
        return side_prices(read_json(path), net_by_rate)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GridError(f"{folder}: cannot price its all-reduce rows from one probe half "
                        f"({error})")


def others_median_errors(grids: dict[str, list[dict]]) -> dict[tuple[str, str, str], float]:
    """(grid, experiment, config) -> the error of the median of the row's measurements in the
    other grids against its measurement in this one, for rows that at least ``MIN_OTHERS``
    other grids hold."""
    measured: dict[tuple[str, str], dict[str, float]] = {}
    for name, rows in grids.items():
        for r in rows:
            if "measured_s" in r:
                measured.setdefault((r["experiment"], r["config"]), {})[name] = r["measured_s"]
    out = {}
    for (experiment, config), by_grid in measured.items():
        for name, mine in by_grid.items():
            others = [m for grid, m in by_grid.items() if grid != name]
            if len(others) >= MIN_OTHERS:
                out[(name, experiment, config)] = (statistics.median(others) - mine) / mine
    return out


def row_misses(grids: dict[str, list[dict]], sides: dict[str, dict[str, dict[str, float]]]
               ) -> list[dict]:
    """One record a row of every grid: its ``grid`` and ``kind``, and whether it misses the
    worst-row target as priced (``model``), against the other grids' median (``others``; None
    where too few other grids hold it), from each probe half alone (``before``, ``after``) and
    with the halves' prices more than the target apart (``apart``; those three None but for
    all-reduce rows priced by ``sides``)."""
    floor = others_median_errors(grids)
    out = []
    for name, rows in grids.items():
        for r in rows:
            others = floor.get((name, r["experiment"], r["config"]))
            record = {"grid": name, "kind": r["kind"], "model": abs(r["error"]) > WORST_TARGET,
                      "others": None if others is None else abs(others) > WORST_TARGET,
                      "before": None, "after": None, "apart": None}
            priced = (sides.get(name, {}).get(r["config"]) if r["experiment"] == "allreduce"
                      else None)
            if priced is not None and "measured_s" in r:  # a row without one: no sides
                m = r["measured_s"]
                record.update({s: abs(priced[s] - m) / m > WORST_TARGET for s in SIDES})
                record["apart"] = abs(priced["before"] - priced["after"]) / m > WORST_TARGET
            out.append(record)
    return out


def tally(records: list[dict]) -> dict:
    """How many of ``records`` (``row_misses``') miss each way: ``rows``, ``model_over``;
    ``others_over`` of ``others_rows``; ``before_over``, ``after_over``, ``either_over`` (one
    of the two) and ``apart_over``, of ``side_rows``."""
    held = [r for r in records if r["others"] is not None]
    sided = [r for r in records if r["apart"] is not None]
    return {"rows": len(records), "model_over": sum(r["model"] for r in records),
            "others_rows": len(held), "others_over": sum(r["others"] for r in held),
            "side_rows": len(sided), "before_over": sum(r["before"] for r in sided),
            "after_over": sum(r["after"] for r in sided),
            "either_over": sum(r["before"] or r["after"] for r in sided),
            "apart_over": sum(r["apart"] for r in sided)}


def summarise(grids: dict[str, list[dict]], sides: dict[str, dict[str, dict[str, float]]]
              ) -> tuple[list[dict], list[dict]]:
    """``tally`` per kind (in the order kinds first appear, then ``ALL``) and per grid."""
    records = row_misses(grids, sides)
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    by_kind = [{"kind": kind, **tally([r for r in records if r["kind"] == kind])}
               for kind in kinds] + [{"kind": ALL, **tally(records)}]
    by_grid = [{"grid": name, **tally([r for r in records if r["grid"] == name])}
               for name in grids]
    return by_kind, by_grid


def markdown(tallies: list[dict], first: str = "kind") -> str:
    """``summarise``'s tallies as a Markdown table, one line each, named by ``first``."""
    target = f"{WORST_TARGET:.0%}"
    heading = "kind of row" if first == "kind" else first
    lines = [f"| {heading} | rows | priced, over {target} | the other grids' median, over "
             f"{target} | the probe before alone, over {target} | the probe after alone, over "
             f"{target} | either half | the halves' prices over {target} apart |",
             "|---|---|---|---|---|---|---|---|"]

    def of(count, rows):
        return f"{count} of {rows}" if rows else "—"

    for t in tallies:
        lines.append(f"| {t[first]} | {t['rows']} | {t['model_over']} "
                     f"| {of(t['others_over'], t['others_rows'])} "
                     f"| {of(t['before_over'], t['side_rows'])} "
                     f"| {of(t['after_over'], t['side_rows'])} "
                     f"| {of(t['either_over'], t['side_rows'])} "
                     f"| {of(t['apart_over'], t['side_rows'])} |")
    return "\n".join(lines)


def held_line(by_grid: list[dict]) -> str:
    """In how many grids every row held the target as priced, and against the other grids'
    median (rows that too few other grids hold count as held)."""
    priced = sum(g["model_over"] == 0 for g in by_grid)
    others = sum(g["others_over"] == 0 for g in by_grid)
    return (f"Grids with every row within {WORST_TARGET:.0%}: {priced} of {len(by_grid)} as "
            f"priced, {others} of {len(by_grid)} against the other grids' median.")


def parse_args(argv=None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path,
                        help="stored grids (folders written by experiments/run.py --out)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    check_folders(parser, args.folders, args.json,
                  ("fidelity.json", "allreduce.json", "run.json"))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        grids = read_grids(args.folders)
        sides = {str(folder): grid_side_prices(folder) for folder in args.folders}
    except GridError as error:
        print(f"experiments.floor: {error}", file=sys.stderr)
        return 2
    by_kind, by_grid = summarise(grids, sides)
    print(markdown(by_kind))
    print()
    print(markdown(by_grid, first="grid"))
    print()
    print(held_line(by_grid))
    return write_json_output("experiments.floor", "--json", args.json,
                             {"grids": list(grids), "min_others": MIN_OTHERS, "kinds": by_kind,
                              "by_grid": by_grid})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
