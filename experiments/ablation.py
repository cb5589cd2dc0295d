"""The all-reduce model with and without the duplex start-up table, on one run's own results.

    python -m experiments.ablation            # reads experiments/results/{calibration,allreduce}.json

Both predictions come from the same run's calibration (network only); only the model differs, so
the comparison says what the start-up table does, row group by row group. Prints one line per
group: rows, median and worst |error| with the table, then without.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.model import NetworkInputs, predict_allreduce_s  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

GROUPS = {
    "all": lambda r: True,
    ">= 1 MB, not 4 hosts at 200 Mbit/s": lambda r: r["bytes"] >= 1_000_000
    and not (r["hosts"] == 4 and r["bandwidth_bps"] == 200e6),
    "< 1 MB": lambda r: r["bytes"] < 1_000_000,
    "4 hosts at 200 Mbit/s": lambda r: r["hosts"] == 4 and r["bandwidth_bps"] == 200e6,
}


def errors(rows: list[dict], nets: dict, with_table: bool) -> list[float]:
    out = []
    for r in rows:
        net = nets[r["bandwidth_bps"]]
        if not with_table:
            net = dataclasses.replace(net, duplex_transfers=())
        predicted = predict_allreduce_s(r["algorithm"], r["hosts"], r["bytes"], net)
        out.append(abs(predicted - r["measured_s"]) / r["measured_s"])
    return out


def ablation(calibration: list[dict], rows: list[dict]) -> dict:
    """Per group: (rows, median, worst) |error| with the start-up table and without it."""
    nets = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c) for c in calibration}
    table = {}
    for name, keep in GROUPS.items():
        chosen = [r for r in rows if keep(r)]
        if chosen:
            table[name] = {label: (len(e), statistics.median(e), max(e))
                           for label, e in (("with", errors(chosen, nets, True)),
                                            ("without", errors(chosen, nets, False)))}
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS), help="folder with calibration.json and allreduce.json")
    args = parser.parse_args(argv)
    folder = Path(args.results)
    try:
        calibration = json.loads((folder / "calibration.json").read_text())
        rows = json.loads((folder / "allreduce.json").read_text())["rows"]
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"cannot read the results in {folder}: {error}")
    for name, result in ablation(calibration, rows).items():
        (n, med, worst), (_, med0, worst0) = result["with"], result["without"]
        print(f"{name}: {n} rows, with the table median {med:.1%} worst {worst:.1%}; "
              f"without median {med0:.1%} worst {worst0:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
