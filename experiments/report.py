"""RESULTS.md and the plots, from the result files alone (so they can be regenerated any time).

``results_markdown(results, fidelity_rows, header)`` takes what the runner wrote: per experiment a
dict with ``name``, ``question``, ``rows`` (each with ``config``, ``predicted_s``, ``measured_s``
and the fields a plot needs), ``plot`` (the PNG's file name or None) and ``notes`` (what was
learned, Markdown paragraphs); and the fidelity rows. ``check_result`` says what in a stored
result file the report cannot be made from, before anything is written.
"""

from __future__ import annotations

from pathlib import Path

from dsgd_sim.argparse_oneline import save_figure
from dsgd_sim.units import format_time

from .fidelity import (MEDIAN_TARGET, WORST_TARGET, by_experiment, finite_number, is_seconds,
                       is_time, summarise)
from .run_header import shown


def check_result(result, name: str) -> None:
    """``ValueError`` saying what in the stored result of experiment ``name`` (its
    ``<name>.json``) the report cannot be made from: it must be an object named ``name`` with
    its question, its points and at least one row, each row with its configuration and a
    positive, finite time predicted and measured (``fidelity.is_time``)."""
    if not isinstance(result, dict):
        raise ValueError(f"not a result file (a JSON object), got {shown(result)}")
    for key in ("name", "question", "points", "rows"):
        if key not in result:
            raise ValueError(f"missing key {key!r}")
    if result["name"] != name:
        raise ValueError(f"it is named {shown(result['name'])}, not {name!r} as its file is")
    if not isinstance(result["question"], str):
        raise ValueError(f"'question' must be a string, got {shown(result['question'])}")
    for key, what in (("points", "point it measured"), ("rows", "comparison")):
        items = result[key]
        if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
            raise ValueError(f"{key!r} must be a non-empty list of objects (a run writes one per "
                             f"{what}), got {shown(items)}")
    for i, row in enumerate(result["rows"]):
        _check_row(row, f"rows[{i}]")
    if result.get("plot") is not None and not isinstance(result["plot"], str):
        raise ValueError(f"'plot' must be a file name, got {shown(result['plot'])}")
    _check_report_extras(result)


def _check_row(row: dict, where: str) -> None:
    """``check_result``'s test of one row."""
    if not isinstance(row.get("config"), str):
        raise ValueError(f"{where}: 'config' must be a string, got {shown(row.get('config'))}")
    for key in ("predicted_s", "measured_s"):
        if key not in row:
            raise ValueError(f"{where} ({row['config']}): missing key {key!r}")
        if not is_time(row[key]):
            raise ValueError(f"{where} ({row['config']}): {key!r} must be a positive, finite "
                             f"number of seconds, got {shown(row[key])}")


def _check_report_extras(result: dict) -> None:
    """``check_result``'s test of what the report shows where a result has it: its command,
    wall time, load average and repeatability."""
    for key in ("command", "load_average"):
        if key in result and not isinstance(result[key], str):
            raise ValueError(f"{key!r} must be a string, got {shown(result[key])}")
    if "wall_s" in result and not is_seconds(result["wall_s"]):
        raise ValueError(f"'wall_s' must be a time in seconds, 0 or more, got "
                         f"{shown(result['wall_s'])}")
    again = result.get("repeatability")
    if again and not (isinstance(again, dict) and finite_number(again.get("rows"))
                      and finite_number(again.get("median_abs_change"))
                      and finite_number(again.get("worst_abs_change"))):
        raise ValueError(f"'repeatability' must be an object of 'rows', 'median_abs_change' and "
                         f"'worst_abs_change', got {shown(again)}")



def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f}%"


def _abs_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def fidelity_table(rows: list[dict]) -> list[str]:
    lines = ["| experiment | rows | median \\|error\\| | worst \\|error\\| | worst row | target met |",
             "|---|---|---|---|---|---|"]
    summaries = dict(by_experiment(rows))
    summaries["all"] = summarise(rows)
    for name, s in summaries.items():
        lines.append(f"| {name} | {s['rows']} | {_abs_pct(s['median_abs_error'])} | "
                     f"{_abs_pct(s['worst_abs_error'])} | {s['worst_config'] or '–'} | "
                     f"{'yes' if s['meets_target'] else 'no'} |")
    return lines


def comparison_table(rows: list[dict]) -> list[str]:
    lines = ["| configuration | predicted | measured | error |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {format_time(r['predicted_s'])} | "
                     f"{format_time(r['measured_s'])} | {_pct(r['error'])} |")
    return lines


def results_markdown(results: list[dict], fidelity_rows: list[dict], header: list[str],
                     folder: str = "results/") -> str:
    """The whole RESULTS.md text; ``folder``: where the result files are, seen from the report."""
    lines = ["# Experiments: predictions against measurements on the test bed", ""]
    lines += header + [""]
    lines += ["## Fidelity", "",
              f"Target: median |error| ≤ {MEDIAN_TARGET:.0%} and worst ≤ {WORST_TARGET:.0%} over every "
              f"row of `{folder}fidelity.json`; error = (predicted − measured) / measured.", ""]
    lines += fidelity_table(fidelity_rows) + [""]
    for result in results:
        rows = [r for r in fidelity_rows if r["experiment"] == result["name"]]
        lines += [f"## {result['name']}", "", result["question"], ""]
        if result.get("command"):
            lines += [f"Measured by `{result['command']}` ({result.get('wall_s', 0) / 60:.1f} min, "
                      f"load average {result.get('load_average', '?')} at the end); the calibrated "
                      f"inputs it was predicted from are in `{folder}{result['name']}.json`.", ""]
        if result.get("plot"):
            lines += [f"![{result['name']}]({folder}{result['plot']})", ""]
        lines += comparison_table(rows) + [""]
        again = result.get("repeatability")
        if again:
            lines += [f"Repeatability: against the previous run of the same configurations, the "
                      f"measured times moved by {_abs_pct(again['median_abs_change'])} (median) and "
                      f"{_abs_pct(again['worst_abs_change'])} (worst) over {again['rows']} rows.", ""]
        for note in result.get("notes", []):
            lines += [note, ""]
    return "\n".join(lines).rstrip() + "\n"


def plot_allreduce(rows: list[dict], path: Path) -> None:
    """Time against size, one panel per (rate, hosts): measured points, predicted lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = sorted({(r["bandwidth_bps"], r["hosts"]) for r in rows})
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
    for ax, (rate, hosts) in zip(axes.flat, panels):
        for algorithm, colour in zip(("ring", "naive", "backend"), ("C0", "C1", "C2")):
            sel = sorted((r for r in rows if (r["bandwidth_bps"], r["hosts"], r["algorithm"])
                          == (rate, hosts, algorithm)), key=lambda r: r["bytes"])
            if not sel:
                continue
            sizes = [r["bytes"] for r in sel]
            ax.plot(sizes, [r["measured_s"] for r in sel], "o", color=colour, label=f"{algorithm} measured")
            ax.plot(sizes, [r["predicted_s"] for r in sel], "-", color=colour, alpha=0.6,
                    label=f"{algorithm} predicted")
        ax.set(xscale="log", yscale="log", xlabel="bytes", ylabel="seconds",
               title=f"{hosts} hosts, {rate / 1e6:g} Mbit/s")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)


def plot_sync(rows: list[dict], path: Path) -> None:
    """Iteration time against replicas: measured points, predicted lines, per compute mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    series = sorted({(r["bandwidth_bps"], r["mode"]) for r in rows})
    for i, (rate, mode) in enumerate(series):
        sel = sorted((r for r in rows if (r["bandwidth_bps"], r["mode"]) == (rate, mode)),
                     key=lambda r: r["hosts"])
        label = f"{mode}, {rate / 1e6:g} Mbit/s"
        ax.plot([r["hosts"] for r in sel], [r["measured_s"] for r in sel], "o", color=f"C{i}",
                label=f"{label} measured")
        ax.plot([r["hosts"] for r in sel], [r["predicted_s"] for r in sel], "-", color=f"C{i}",
                alpha=0.6, label=f"{label} predicted")
    ax.set(xlabel="replicas (hosts)", ylabel="iteration time (s)", title="sync SGD, mlp")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)


def plot_async(rows: list[dict], path: Path) -> None:
    """Seconds per applied update against workers, and mean staleness: measured and predicted."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, rate in enumerate(sorted({r["bandwidth_bps"] for r in rows})):
        sel = sorted((r for r in rows if r["bandwidth_bps"] == rate), key=lambda r: r["workers"])
        workers = [r["workers"] for r in sel]
        label = f"{rate / 1e6:g} Mbit/s"
        left.plot(workers, [r["measured_s"] for r in sel], "o", color=f"C{i}", label=f"{label} measured")
        left.plot(workers, [r["predicted_s"] for r in sel], "-", color=f"C{i}", alpha=0.6,
                  label=f"{label} predicted")
        right.plot(workers, [r["measured_staleness_mean"] for r in sel], "o", color=f"C{i}",
                   label=f"{label} measured")
        right.plot(workers, [r["predicted_staleness_mean"] for r in sel], "-", color=f"C{i}",
                   alpha=0.6, label=f"{label} predicted")
    left.set(xlabel="workers", ylabel="seconds per applied update", title="async PS, mlp")
    right.set(xlabel="workers", ylabel="mean staleness", title="staleness")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
