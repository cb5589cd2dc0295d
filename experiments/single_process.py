"""The single-process runs that predictions take beside the test bed, kept with the results.

Some inputs of a prediction are not the network's: the single-process profile of a model (its
gradient sizes, its compute and the rest of its step), a step run alone with emulated compute or
after a pause, a worker's sleep as it wakes late. They are measured on this machine, with no test
bed up, once per run and key (``RUNS.take``), and each experiment's result keeps the ones its
rows were priced from (``single_process``: ``RUNS.used``). ``python experiments/run.py
--repredict`` loads them back (``RUNS.load``), so that a stored run is priced again from the
machine as it was when it ran, and a change of model is not mixed up with a change of machine;
a run stored before they were kept, or a prediction that now asks for a run its result does
not keep, takes that run again here (``RUNS.taken``, reported).
"""

from __future__ import annotations

import math
from typing import Callable

KINDS = ("profile", "emulated_step", "paused_step", "sleeps")
"""What the store keeps: ``sync_model.single_process_profile``, ``sync_model.emulated_step``,
``sync_model.paused_step`` and ``ps_model.emulated_compute``'s sleeps."""


class SingleProcessRuns:
    """Measurements of single-process runs by (kind, key): each taken once, and a record of
    which ones were asked for since ``start``."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, tuple], object] = {}
        self._used: list[tuple[str, tuple]] = []
        self.taken: list[tuple[str, tuple]] = []  # taken on this machine since ``start``

    def take(self, kind: str, key: tuple, measure: Callable[[], object]):
        """The value stored for ``kind`` and ``key``, else ``measure()``'s, kept."""
        if kind not in KINDS:
            raise ValueError(f"unknown single-process run {kind!r} (known: {', '.join(KINDS)})")
        entry = (kind, tuple(key))
        if entry not in self._values:
            self._values[entry] = measure()
            self.taken.append(entry)
        if entry not in self._used:
            self._used.append(entry)
        return self._values[entry]

    def start(self) -> None:
        """Begin a new record of the runs asked for (and of the ones taken here)."""
        self._used, self.taken = [], []

    def used(self) -> list[dict]:
        """The runs asked for since ``start``, as JSON: ``{"kind", "key", "value"}`` each."""
        return [{"kind": kind, "key": list(key), "value": self._values[(kind, key)]}
                for kind, key in self._used]

    def load(self, records) -> int:
        """Keep ``records`` (``used``'s form) as this machine's runs, replacing any of the same
        kind and key; how many. ValueError naming the first bad one."""
        if not isinstance(records, list):
            raise ValueError("single_process: not a list of runs")
        entries = []
        for i, record in enumerate(records):
            if not (isinstance(record, dict) and record.get("kind") in KINDS
                    and isinstance(record.get("key"), list) and "value" in record):
                raise ValueError(f"single_process[{i}]: not a run with a known kind, a key and a "
                                 f"value")
            if not all(isinstance(k, (str, int, float, bool)) and
                       (not isinstance(k, float) or math.isfinite(k)) for k in record["key"]):
                raise ValueError(f"single_process[{i}]: a key of strings and finite numbers only")
            if record["kind"] == "sleeps" and not _seconds(record["value"]):
                raise ValueError(f"single_process[{i}]: sleeps must be a non-empty list of "
                                 f"positive seconds")
            if record["kind"] != "sleeps" and not isinstance(record["value"], dict):
                raise ValueError(f"single_process[{i}]: a run's value must be an object")
            entries.append(((record["kind"], tuple(record["key"])), record["value"]))
        for entry, value in entries:
            self._values[entry] = tuple(value) if entry[0] == "sleeps" else value
        return len(entries)

    def clear(self) -> None:
        """Forget every run (the tests' fresh start)."""
        self._values.clear()
        self.start()


def _seconds(values) -> bool:
    return (isinstance(values, list) and len(values) > 0
            and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) and v > 0 for v in values))


RUNS = SingleProcessRuns()
"""This process's single-process runs (one store for every experiment of a run)."""
