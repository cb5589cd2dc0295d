"""Where the model holds, over many stored grids: the rows of every grid, by kind of row.

    python -m experiments.grids experiments/results/full experiments/results/full-*/
    python -m experiments.grids experiments/results/quick-* --json kinds.json

One grid is one draw of a shared machine's noise; this pools the ``fidelity.json`` rows of
several (each folder as ``experiments/run.py --out DIR`` wrote it) and sorts them into kinds:
the all-reduce calls of 1 MB and more (the links set their pace), those under 1 MB by rate and
hosts (the ranks' wake-ups on shared cores set it where the links are fast), and every other
experiment whole. Per kind it prints the rows per grid, the median |error| over all of them, the
range of the grids' worst |error| and how many rows missed the worst-row target (8%): a Markdown
table; then every row that missed in some grid, with the grids it missed in; then every row
whose error keeps one side over five grids or more (a bias of the model, not the noise).
``--row "EXPERIMENT: CONFIG"`` (as the lists name a row) also prints that row's price and
measurement in every grid that holds it. ``--core-speed`` also prints, for every grid that
sampled its cores before its all-reduce stage (``run.json``), their speed then and each kind of
all-reduce row's median error (signed), slowest grid first, and Spearman's rank correlation of
the two over those grids; and for every other experiment its median error against the cores'
speed in units of work a second before its own stage: the correlation over the grids, and the
median error in the slower and the faster half of them. ``--pool 1,3,5`` asks what a point measured on N independent test
beds would give, its price and its measurement each the median over them: it takes the grids in
the order named, in runs of N (a last, shorter run left out; each grid a bed of every point),
prices every row the N grids all hold from their median price and median measurement, and
prints per N the groups, the rows, the median |error|, the rows over the worst-row target and
the groups with none over it. Reads only; ``--json FILE`` writes the same figures (a file
outside the grids' folders: one inside them is refused).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, check_output_files, read_json,
                                       run_command_line, write_json_output)
from experiments.fidelity import WORST_TARGET

LARGE_BYTES = 1_000_000  # an all-reduce call this large or larger is paced by the links
ALL = "every row"
BIAS_MIN = 0.02  # a mean error under this is within the median target: not listed as a bias
BIAS_T = 3.0  # standard errors from zero


class GridError(ValueError):
    """A folder that is not a stored grid, or rows that cannot be sorted."""


def allreduce_kind(row: dict) -> str:
    """The kind of one all-reduce row (``allreduce.json``'s, with ``bytes``, ``hosts``,
    ``bandwidth_bps``)."""
    if row["bytes"] >= LARGE_BYTES:
        return "allreduce, 1 MB and more"
    rate = f"{row['bandwidth_bps'] / 1e6:g} Mbit/s"
    if row["bandwidth_bps"] <= 50e6:
        return f"allreduce under 1 MB, {rate}"
    if row["hosts"] == 2:
        return "allreduce under 1 MB, 2 hosts, 200 and 1000 Mbit/s"
    return f"allreduce under 1 MB, {row['hosts']} hosts, {rate}"


MAX_ERROR = 1e6  # (predicted - measured) / measured: beyond this a row is not a comparison


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_row(row) -> bool:
    """A fidelity row as experiments/run.py writes it, as far as this tool reads one: its
    experiment and config named by strings, an error above -1 (no prediction is negative) and
    at most ``MAX_ERROR``, and the times it was made from, where given, positive."""
    return (isinstance(row, dict) and {"experiment", "config", "error"} <= row.keys()
            and isinstance(row["experiment"], str) and isinstance(row["config"], str)
            and _number(row["error"]) and -1 < row["error"] <= MAX_ERROR
            and all(_number(row[k]) and row[k] > 0
                    for k in ("predicted_s", "measured_s") if k in row))


def grid_rows(folder: Path) -> list[dict]:
    """The fidelity rows of one stored grid, each with its ``kind``."""
    try:
        rows = read_json(folder / "fidelity.json")
    except FileNotFoundError:
        raise GridError(f"{folder}: no fidelity.json (not a folder written by experiments/run.py)")
    except json.JSONDecodeError as error:
        raise GridError(f"{folder}/fidelity.json: not JSON ({error.msg}, line {error.lineno})")
    except (OSError, UnicodeDecodeError) as error:
        raise GridError(f"{folder}/fidelity.json: cannot read it ({error})")
    if not isinstance(rows, list) or not all(is_row(r) for r in rows):
        raise GridError(f"{folder}/fidelity.json: expected a list of rows with experiment, "
                        "config, an error from -1 to 1e6 and positive times")
    allreduce = {}
    if any(r["experiment"] == "allreduce" for r in rows):
        try:
            stored = read_json(folder / "allreduce.json")["rows"]
            allreduce = {r["config"]: allreduce_kind(r) for r in stored}
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise GridError(f"{folder}/allreduce.json: cannot read its rows' sizes and hosts "
                            f"({error})")
    out = []
    for row in rows:
        if row["experiment"] != "allreduce":
            kind = row["experiment"]
        elif row["config"] in allreduce:
            kind = allreduce[row["config"]]
        else:
            raise GridError(f"{folder}: the all-reduce row {row['config']!r} is not in "
                            "allreduce.json")
        out.append({**row, "kind": kind})
    return out


def summarise_kinds(grids: dict[str, list[dict]]) -> list[dict]:
    """Per kind, in the order kinds first appear (then ``ALL``): rows per grid, median |error|
    over every row, the smallest and largest of the grids' worst |error|, and the rows over the
    worst-row target, of how many."""
    kinds = list(dict.fromkeys(r["kind"] for rows in grids.values() for r in rows))
    out = []
    for kind in kinds + [ALL]:
        per_grid = {name: [abs(r["error"]) for r in rows if kind in (ALL, r["kind"])]
                    for name, rows in grids.items()}
        per_grid = {name: errors for name, errors in per_grid.items() if errors}
        errors = [e for grid in per_grid.values() for e in grid]
        worsts = [max(grid) for grid in per_grid.values()]
        out.append({"kind": kind, "grids": len(per_grid), "rows": len(errors),
                    "median_abs_error": statistics.median(errors),
                    "worst_abs_error_min": min(worsts), "worst_abs_error_max": max(worsts),
                    "over_target": sum(e > WORST_TARGET for e in errors)})
    return out


def errors_by_row(grids: dict[str, list[dict]]) -> dict[tuple[str, str], list[float]]:
    """(experiment, config) -> the row's error in every grid that holds it."""
    held: dict[tuple[str, str], list[float]] = {}
    for rows in grids.values():
        for r in rows:
            held.setdefault((r["experiment"], r["config"]), []).append(r["error"])
    return held


def misses(grids: dict[str, list[dict]]) -> list[dict]:
    """Every row (experiment and config) over the worst-row target in some grid: in how many
    grids it missed, of how many that hold it, and its errors there; most misses first."""
    out = [{"experiment": key[0], "config": key[1], "grids": len(errors),
            "errors": [e for e in errors if abs(e) > WORST_TARGET]}
           for key, errors in errors_by_row(grids).items()]
    out = [m for m in out if m["errors"]]
    return sorted(out, key=lambda m: -len(m["errors"]))


def biases(grids: dict[str, list[dict]], min_grids: int = 5) -> list[dict]:
    """Rows whose error keeps one side over the grids (a bias of the model, where a row that
    misses on both sides is the machine's noise): held by at least ``min_grids`` grids, a mean
    error of at least ``BIAS_MIN`` and at least ``BIAS_T`` standard errors from zero; their mean,
    standard deviation and grids, largest mean first."""
    out = []
    for (experiment, config), errors in errors_by_row(grids).items():
        if len(errors) < min_grids:
            continue
        mean, sd = statistics.mean(errors), statistics.stdev(errors)
        if abs(mean) >= BIAS_MIN and abs(mean) >= BIAS_T * sd / math.sqrt(len(errors)):
            out.append({"experiment": experiment, "config": config, "grids": len(errors),
                        "mean_error": mean, "sd_error": sd})
    return sorted(out, key=lambda b: -abs(b["mean_error"]))


def pooled(grids: dict[str, list[dict]], beds: int) -> dict:
    """The grids, in their order, in runs of ``beds`` (a last, shorter run left out), each run
    taken as one grid whose every point was measured on ``beds`` test beds: a row the run's grids
    all hold is priced at the median of their prices and measured at the median of their
    measurements. Per ``beds``: the groups, the rows, the median |error|, the smallest and largest
    worst |error| of a group, the rows over the worst-row target and the groups with none."""
    if not 1 <= beds <= len(grids):
        raise GridError(f"--pool takes 1 to {len(grids)} beds (the grids named), got {beds}")
    names = list(grids)
    worsts, errors = [], []
    for start in range(0, len(names) - beds + 1, beds):
        held: dict[tuple[str, str], dict[str, dict]] = {}  # row -> grid -> the row there
        for name in names[start:start + beds]:
            for r in grids[name]:
                if "predicted_s" in r and "measured_s" in r:
                    held.setdefault((r["experiment"], r["config"]), {})[name] = r
        group = []
        for by_grid in held.values():
            if len(by_grid) == beds:
                measured = statistics.median(r["measured_s"] for r in by_grid.values())
                predicted = statistics.median(r["predicted_s"] for r in by_grid.values())
                group.append(abs(predicted - measured) / measured)
        if group:
            errors += group
            worsts.append(max(group))
    if not errors:
        raise GridError("no row carries its predicted and measured seconds to pool")
    return {"beds": beds, "groups": len(worsts), "rows": len(errors),
            "median_abs_error": statistics.median(errors),
            "worst_abs_error_min": min(worsts), "worst_abs_error_max": max(worsts),
            "over_target": sum(e > WORST_TARGET for e in errors),
            "groups_within_target": sum(w <= WORST_TARGET for w in worsts)}


def pooled_markdown(pools: list[dict]) -> str:
    lines = ["| beds a point | groups | rows | median \\|error\\| | worst \\|error\\| of a group "
             f"| over {WORST_TARGET:.0%} | groups with every row within {WORST_TARGET:.0%} |",
             "|---|---|---|---|---|---|---|"]
    for p in pools:
        lines.append(f"| {p['beds']} | {p['groups']} | {p['rows'] / p['groups']:.0f} a group "
                     f"| {p['median_abs_error']:.1%} "
                     f"| {p['worst_abs_error_min']:.1%} to {p['worst_abs_error_max']:.1%} "
                     f"| {p['over_target']} of {p['rows']} | {p['groups_within_target']} |")
    return "\n".join(lines)


def parse_beds(text: str, most: int) -> list[int]:
    """``--pool``'s comma-separated counts of beds, each a whole number from 1 to ``most`` (the
    grids named)."""
    try:
        beds = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--pool takes whole numbers of beds separated by commas, got {text!r}")
    if any(b < 1 for b in beds):
        raise ValueError(f"--pool takes counts of at least 1 bed, got {text!r}")
    if any(b > most for b in beds):
        raise ValueError(f"--pool takes at most {most} beds (the grids named), got {text!r}")
    return beds


def row_history(grids: dict[str, list[dict]], name: str) -> list[dict]:
    """The row named ``"experiment: config"`` in every grid that holds it, in the grids' order:
    the grid, its error, and the predicted and measured seconds where the row has them."""
    experiment, _, config = name.partition(": ")
    return [{"grid": grid, **{k: r[k] for k in ("predicted_s", "measured_s", "error") if k in r}}
            for grid, rows in grids.items() for r in rows
            if (r["experiment"], r["config"]) == (experiment, config)]


def history_lines(name: str, history: list[dict]) -> list[str]:
    """A row's history as text: the range of its prices and measurements, then a line a grid."""
    def span(key):
        times = [h[key] * 1e3 for h in history if key in h]
        return f"{min(times):.3f}-{max(times):.3f} ms" if times else "not stored"
    lines = [f"{name}, in {len(history)} grids: priced {span('predicted_s')}, "
             f"measured {span('measured_s')}"]
    for h in history:
        times = ", ".join(f"{label} {h[key] * 1e3:.3f} ms" for label, key in
                          (("priced", "predicted_s"), ("measured", "measured_s")) if key in h)
        lines.append(f"- {h['grid']}: " + (f"{times}, " if times else "") + f"{h['error']:+.1%}")
    return lines


SPEED_STAGE = "allreduce"  # the stage whose cores' speed --core-speed sets against the rows


def core_samples(folder: Path) -> dict:
    """A stored grid's samples of its cores, per stage (``run.json``'s ``core_speed``, read once
    for every figure taken from it); empty where the grid kept none."""
    try:
        samples = read_json(folder / "run.json")["core_speed"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return samples if isinstance(samples, dict) else {}


def _stage_mean(samples: dict, stage: str, key: str, valid) -> float | None:
    """The mean over the cores sampled before ``stage`` of their ``key``; None where none was
    sampled or a core's figure is not a number ``valid`` takes."""
    try:
        values = [core[key] for core in samples[stage]]
    except (KeyError, TypeError):
        return None
    if not values or not all(_number(v) and valid(v) for v in values):
        return None
    return statistics.mean(values)


def stage_core_speed(samples: dict, stage: str = SPEED_STAGE) -> float | None:
    """The mean over the cores of each one's median speed (a fraction of its fastest) sampled
    just before ``stage`` (``core_samples``); None where the grid kept none, or not fractions of
    a fastest: not a speed to rank."""
    return _stage_mean(samples, stage, "median", lambda m: 0 < m <= 1)


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, tied values sharing the mean of their places."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on the ranks); None under 3 pairs or where one
    side does not vary."""
    if len(xs) < 3:
        return None
    try:
        return statistics.correlation(_ranks(xs), _ranks(ys))
    except statistics.StatisticsError:  # one side constant
        return None


def speed_leans(grids: dict[str, list[dict]], speeds: dict[str, float | None]) -> dict:
    """Per grid with a speed (slowest first): its cores' speed and each all-reduce kind's
    median error, signed; per kind, Spearman's correlation of the two over those grids."""
    kinds = list(dict.fromkeys(r["kind"] for rows in grids.values() for r in rows
                               if r["experiment"] == "allreduce"))
    per_grid = []
    for name, speed in sorted(((n, s) for n, s in speeds.items() if s is not None),
                              key=lambda item: item[1]):
        errors = {kind: [r["error"] for r in grids[name] if r["kind"] == kind] for kind in kinds}
        per_grid.append({"grid": name, "core_speed": speed,
                         "median_error": {k: statistics.median(e) for k, e in errors.items()
                                          if e}})
    correlation = {}
    for kind in kinds:
        held = [g for g in per_grid if kind in g["median_error"]]
        correlation[kind] = spearman([g["core_speed"] for g in held],
                                     [g["median_error"][kind] for g in held])
    return {"kinds": kinds, "grids": per_grid, "spearman": correlation}


def stage_units_per_s(samples: dict, stage: str) -> float | None:
    """The mean over the cores of each one's median speed in units of work a second, sampled
    just before ``stage`` (``core_samples``; grids since 2e75ca7 keep it); None where the grid
    kept none. Unlike the fraction of a core's fastest (``stage_core_speed``: how steady it ran
    within its sample), this sets one grid's cores beside another's: a slow hour of the machine
    shows in it."""
    return _stage_mean(samples, stage, "median_units_per_s", lambda x: x > 0)


def _median_of(grids: list[dict], key: str) -> float | None:
    return statistics.median(g[key] for g in grids) if grids else None


def experiment_speed_leans(grids: dict[str, list[dict]],
                           speeds: dict[str, dict[str, float | None]]) -> list[dict]:
    """Per experiment but the all-reduce (in the order they first appear), over the grids with a
    speed before its own stage (``speeds[grid][experiment]``, ``stage_units_per_s``): each
    grid's speed and the experiment's median error there (signed), Spearman's correlation of
    the two, and the median of those errors in the slower and in the faster half of the grids
    (the middle grid of an odd count in neither)."""
    names = list(dict.fromkeys(r["experiment"] for rows in grids.values() for r in rows
                               if r["experiment"] != "allreduce"))
    out = []
    for name in names:
        held = []
        for grid, rows in grids.items():
            errors = [r["error"] for r in rows if r["experiment"] == name]
            speed = speeds.get(grid, {}).get(name)
            if errors and speed is not None:
                held.append({"grid": grid, "units_per_s": speed,
                             "median_error": statistics.median(errors)})
        held.sort(key=lambda g: g["units_per_s"])
        half = len(held) // 2
        halves = {"slower_half": held[:half], "faster_half": held[len(held) - half:]}
        out.append({"experiment": name, "grids": held,
                    "spearman": spearman([g["units_per_s"] for g in held],
                                         [g["median_error"] for g in held]),
                    **{which: {key: _median_of(part, key)
                               for key in ("units_per_s", "median_error")}
                       for which, part in halves.items()}})
    return out


def experiment_speed_markdown(leans: list[dict]) -> str:
    held = [e for e in leans if len(e["grids"]) >= 2]
    if not held:
        return ("--core-speed: no two grids sampled their cores' speed in units of work a second "
                "before the same experiment (run.json)")
    lines = ["Each other experiment's median error (signed) against the cores' speed before its "
             "own stage, in units of work a second (the mean over the cores of each one's "
             "median), over the grids that sampled it:", "",
             "| experiment | grids | Spearman | slower half: speed, median error "
             "| faster half: speed, median error |", "|---|---|---|---|---|"]
    for e in held:
        rho = "—" if e["spearman"] is None else f"{e['spearman']:+.2f}"
        halves = [f"{h['units_per_s']:,.0f}, {h['median_error']:+.1%}"
                  for h in (e["slower_half"], e["faster_half"])]
        lines.append(f"| {e['experiment']} | {len(e['grids'])} | {rho} | " + " | ".join(halves)
                     + " |")
    return "\n".join(lines)


def speed_markdown(leans: dict) -> str:
    kinds = leans["kinds"]
    if not kinds or not leans["grids"]:
        return ("--core-speed: " + ("the grids hold no all-reduce rows" if not kinds else
                f"no grid sampled its cores before the {SPEED_STAGE} stage (run.json)"))
    lines = [f"Each all-reduce kind's median error against the cores' speed before the "
             f"{SPEED_STAGE} stage, in the {len(leans['grids'])} grids that sampled it:", "",
             "| grid | cores' speed | " + " | ".join(kinds) + " |",
             "|---|---|" + "---|" * len(kinds)]
    for g in leans["grids"]:
        cells = [f"{g['median_error'][k]:+.1%}" if k in g["median_error"] else "—"
                 for k in kinds]
        lines.append(f"| {g['grid']} | {g['core_speed']:.2f} | " + " | ".join(cells) + " |")
    rhos = [f"{k}: {'—' if r is None else f'{r:+.2f}'}" for k, r in leans["spearman"].items()]
    lines += ["", "Spearman's rank correlation of the speed with the median error: "
              + "; ".join(rhos)]
    return "\n".join(lines)


def markdown(kinds: list[dict]) -> str:
    lines = ["| kind of row | grids | rows a grid | median \\|error\\| "
             f"| worst \\|error\\| of a grid | over {WORST_TARGET:.0%} |", "|---|---|---|---|---|---|"]
    for k in kinds:
        per_grid = k["rows"] / k["grids"]
        lines.append(f"| {k['kind']} | {k['grids']} | {per_grid:.0f} "
                     f"| {k['median_abs_error']:.1%} "
                     f"| {k['worst_abs_error_min']:.1%} to {k['worst_abs_error_max']:.1%} "
                     f"| {k['over_target']} of {k['rows']} |")
    return "\n".join(lines)


def check_folders(parser, folders: list[Path], json_path: str | None,
                  files: tuple[str, ...] = ("fidelity.json", "allreduce.json")) -> None:
    """``parser.error`` for a ``--json`` output that cannot be written, would overwrite one of
    the grids' ``files`` or lies anywhere inside a grid's folder (whatever file it names there,
    the grid is the record of a run: this one only reads it), and for a folder named twice
    (each grid counts once)."""
    try:
        check_output_files({"--json": json_path},
                           {f"the grid {folder}'s {name}": folder / name
                            for folder in folders for name in files})
    except ValueError as error:
        parser.error(str(error))
    if json_path is not None:
        written = Path(os.path.realpath(json_path))  # through a link: the file it replaces
        for folder in folders:
            if folder.resolve() in written.parents:
                parser.error(f"--json {json_path!r} is inside the grid {folder}, which "
                             f"this run reads: write it outside the grids' folders")
    if len({folder.resolve() for folder in folders}) != len(folders):
        parser.error("a folder is named twice: each grid counts once")


def read_grids(folders: list[Path]) -> dict[str, list[dict]]:
    """``grid_rows`` of each folder, by its name; GridError where one is not a grid or none
    holds a row."""
    grids = {str(folder): grid_rows(folder) for folder in folders}
    if not any(grids.values()):
        raise GridError("the folders hold no rows")
    return grids


def parse_args(argv=None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path,
                        help="stored grids (folders written by experiments/run.py --out)")
    parser.add_argument("--row", action="append", default=[], metavar="'EXPERIMENT: CONFIG'",
                        help="also print this row's price and measurement in every grid "
                             "(repeatable; named as the lists name a row)")
    parser.add_argument("--core-speed", action="store_true",
                        help="also set each all-reduce kind's median error against the cores' "
                             "speed before the all-reduce stage, grid by grid, and each other "
                             "experiment's against their speed in units of work a second "
                             "before its own")
    parser.add_argument("--pool", metavar="N[,N...]",
                        help="also price each row from the median over N grids taken as N beds "
                             "of each point (runs of N grids in the order named), e.g. 1,3,5")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        args.pool = parse_beds(args.pool, len(args.folders)) if args.pool is not None else []
    except ValueError as error:
        parser.error(str(error))
    read = ("fidelity.json", "allreduce.json") + (("run.json",) if args.core_speed else ())
    check_folders(parser, args.folders, args.json, read)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        grids = read_grids(args.folders)
    except GridError as error:
        print(f"experiments.grids: {error}", file=sys.stderr)
        return 2
    histories = {name: row_history(grids, name) for name in args.row}
    unheld = [name for name, history in histories.items() if not history]
    if unheld:
        print(f"experiments.grids: no grid holds the row {unheld[0]!r} (name it as "
              "'EXPERIMENT: CONFIG', as the lists below the table do)", file=sys.stderr)
        return 2
    try:
        pools = [pooled(grids, beds) for beds in args.pool]
    except GridError as error:
        print(f"experiments.grids: {error}", file=sys.stderr)
        return 2
    kinds, missed, biased = summarise_kinds(grids), misses(grids), biases(grids)
    print(markdown(kinds))
    print(f"\n{len(missed)} rows over {WORST_TARGET:.0%} in some grid" + (":" if missed else ""))
    for m in missed:
        errors = ", ".join(f"{e:+.1%}" for e in m["errors"])
        print(f"- {m['experiment']}: {m['config']}: {len(m['errors'])} of {m['grids']} grids "
              f"({errors})")
    print(f"\n{len(biased)} rows on one side in 5 or more grids (mean |error| at least "
          f"{BIAS_MIN:.0%}, {BIAS_T:g} standard errors from zero)" + (":" if biased else ""))
    for b in biased:
        print(f"- {b['experiment']}: {b['config']}: mean {b['mean_error']:+.1%}, "
              f"sd {b['sd_error']:.1%} over {b['grids']} grids")
    for name, history in histories.items():
        print("\n" + "\n".join(history_lines(name, history)))
    figures = {"grids": list(grids), "kinds": kinds, "misses": missed, "biases": biased,
               "rows": histories}
    if args.core_speed:
        samples = {str(f): core_samples(f) for f in args.folders}
        leans = speed_leans(grids, {f: stage_core_speed(s) for f, s in samples.items()})
        print("\n" + speed_markdown(leans))
        figures["core_speed"] = leans
        names = {r["experiment"] for rows in grids.values() for r in rows}
        others = experiment_speed_leans(grids, {f: {n: stage_units_per_s(s, n) for n in names}
                                                for f, s in samples.items()})
        print("\n" + experiment_speed_markdown(others))
        figures["core_speed_by_experiment"] = others
    if pools:
        print("\nEach row priced and measured as the median over N grids, taken as N test beds of "
              "every point (runs of N grids in the order named):\n\n" + pooled_markdown(pools))
        figures["pooled"] = pools
    return write_json_output("experiments.grids", "--json", args.json, figures)


if __name__ == "__main__":
    sys.exit(run_command_line(main))
