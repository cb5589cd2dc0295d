"""Prediction against measurement: one row per comparison, and the summary the target is set on.

A row is ``{"experiment", "config", "predicted_s", "measured_s", "error"}`` with
``error = (predicted - measured) / measured``: positive when the model is slow, negative when fast.
The target (issue 7): median |error| <= 3% and worst <= 8% over every row.
"""

from __future__ import annotations

import math
import statistics

MEDIAN_TARGET = 0.03
WORST_TARGET = 0.08


def finite_number(value) -> bool:
    """Whether ``value`` is a finite number, not a bool (a stored file is JSON, whose numbers
    Python reads as NaN and Infinity too)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_time(value) -> bool:
    """Whether ``value`` is a time a comparison can be made of: a finite number of seconds over
    0."""
    return finite_number(value) and value > 0


def is_seconds(value) -> bool:
    """Whether ``value`` is a duration that may be nothing: a finite number of seconds, 0 or
    more."""
    return finite_number(value) and value >= 0


def fidelity_row(experiment: str, config: str, predicted_s: float, measured_s: float) -> dict:
    """One comparison; ValueError when the prediction or the measurement is not a positive,
    finite time (``is_time``)."""
    for what, seconds in (("predicted", predicted_s), ("measured", measured_s)):
        if not is_time(seconds):
            raise ValueError(f"{experiment} {config}: {what} time must be a positive, finite "
                             f"number of seconds, got {seconds!r}")
    return {"experiment": experiment, "config": config, "predicted_s": predicted_s,
            "measured_s": measured_s, "error": (predicted_s - measured_s) / measured_s}


def summarise(rows: list[dict]) -> dict:
    """Median and worst |error| over ``rows`` (all rows, or those of one experiment), and
    whether they meet the target."""
    if not rows:
        return {"rows": 0, "median_abs_error": None, "worst_abs_error": None, "worst_config": None,
                "meets_target": False}
    errors = [abs(r["error"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error"]))
    median = statistics.median(errors)
    return {"rows": len(rows), "median_abs_error": median, "worst_abs_error": abs(worst["error"]),
            "worst_config": f"{worst['experiment']}: {worst['config']}",
            "meets_target": median <= MEDIAN_TARGET and abs(worst["error"]) <= WORST_TARGET}


def by_experiment(rows: list[dict]) -> dict[str, dict]:
    """``summarise`` per experiment, in the order experiments first appear."""
    names = list(dict.fromkeys(r["experiment"] for r in rows))
    return {name: summarise([r for r in rows if r["experiment"] == name]) for name in names}
