"""The single-process runs that predictions take beside the test bed, kept with the results.

Some inputs of a prediction are not the network's: the single-process profile of a model (its
gradient sizes, its compute and the rest of its step), a step run alone with emulated compute or
after a pause, a worker's sleep as it wakes late. They are measured on this machine, with no test
bed up, once per run and key (``RUNS.take``), and each experiment's result keeps the ones its
rows were priced from (``single_process``: ``RUNS.used``). ``python experiments/run.py
--repredict`` loads them back (``RUNS.restore``), so that a stored run is priced again from the
machine as it was when it ran, and a change of model is not mixed up with a change of machine;
a run stored before they were kept, or a prediction that now asks for a run its result does
not keep, has that run from this machine (taken once: ``RUNS.taken``, reported and kept with
the result from then on).
"""

from __future__ import annotations

import math
from typing import Callable

from real.testbed import timeline

KINDS = ("profile", "emulated_step", "paused_step", "sleeps")
"""What the store keeps: ``sync_model.single_process_profile``, ``sync_model.emulated_step``,
``sync_model.paused_step`` and ``ps_model.emulated_compute``'s sleeps."""


class SingleProcessRuns:
    """Measurements of single-process runs by (kind, key): those taken on this machine, each
    once, and those loaded from a stored result, which come first; and a record of which ones
    were asked for since ``start``."""

    def __init__(self) -> None:
        self._here: dict[tuple[str, tuple], object] = {}    # taken in this process
        self._loaded: dict[tuple[str, tuple], object] = {}  # a stored result's (``restore``)
        self._used: list[tuple[str, tuple]] = []
        self.taken: list[tuple[str, tuple]] = []  # asked for since ``start``, not loaded

    def take(self, kind: str, key: tuple, measure: Callable[[], object]):
        """The value loaded for ``kind`` and ``key``, else the one taken here, else
        ``measure()``'s, kept."""
        if kind not in KINDS:
            raise ValueError(f"unknown single-process run {kind!r} (known: {', '.join(KINDS)})")
        entry = (kind, tuple(key))
        if entry not in self._used:
            self._used.append(entry)
        if entry in self._loaded:
            return self._loaded[entry]
        if entry not in self._here:
            with timeline.span(f"single-process {kind}", "single process", key=list(key)):
                self._here[entry] = measure()
        if entry not in self.taken:
            self.taken.append(entry)
        return self._here[entry]

    def start(self) -> None:
        """Begin a new record of the runs asked for (and of the ones taken here)."""
        self._used, self.taken = [], []

    def used(self) -> list[dict]:
        """The runs asked for since ``start``, as JSON: ``{"kind", "key", "value"}`` each."""
        records = []
        for kind, key in self._used:
            values = self._loaded if (kind, key) in self._loaded else self._here
            records.append({"kind": kind, "key": list(key), "value": values[(kind, key)]})
        return records

    def restore(self, records) -> int:
        """``records`` (``used``'s form) alone as the loaded runs, which come before any taken
        here, and a new record (``start``): a stored result priced again from its own runs,
        none of another's; what it lacks comes from this machine (``taken``). How many;
        ValueError naming the first bad one, and then nothing is forgotten."""
        entries = _entries(records)  # checked before anything is forgotten
        self._loaded = dict(entries)
        self.start()
        return len(entries)

    def kept_with(self, records: list, taken_by: str) -> list[dict]:
        """What a result priced again keeps: its ``records`` as they were (a run its prices no
        longer ask for stays: the machine as it was is not taken again), then each run asked
        for since ``start`` that they lack, marked ``taken_by``."""
        held = {(r["kind"], tuple(r["key"])) for r in records}
        return list(records) + [{**r, "taken_by": taken_by} for r in self.used()
                                if (r["kind"], tuple(r["key"])) not in held]

    def clear(self) -> None:
        """Forget every run (the tests' fresh start)."""
        self._here.clear()
        self._loaded.clear()
        self.start()


def _entries(records) -> list[tuple[tuple[str, tuple], object]]:
    """``records`` (``SingleProcessRuns.used``'s form) as (kind, key) and value each, checked:
    ValueError naming the first bad one."""
    if not isinstance(records, list):
        raise ValueError("single_process: not a list of runs")
    entries = []
    for i, record in enumerate(records):
        where = f"single_process[{i}]"
        if not (isinstance(record, dict) and {"kind", "key", "value"} <= record.keys()):
            raise ValueError(f"{where}: not a run (an object with a kind, a key and a value)")
        if record["kind"] not in KINDS:
            raise ValueError(f"{where}: unknown kind {record['kind']!r} (known: "
                             f"{', '.join(KINDS)})")
        key = record["key"]
        if not isinstance(key, list) or not all(
                isinstance(k, (str, int, float, bool)) and
                (not isinstance(k, float) or math.isfinite(k)) for k in key):
            raise ValueError(f"{where}: the key must be a list of strings and finite numbers")
        if record["kind"] == "sleeps" and not _seconds(record["value"]):
            raise ValueError(f"{where}: sleeps must be a non-empty list of positive seconds")
        if record["kind"] != "sleeps" and not isinstance(record["value"], dict):
            raise ValueError(f"{where}: a run's value must be an object")
        value = tuple(record["value"]) if record["kind"] == "sleeps" else record["value"]
        entries.append(((record["kind"], tuple(key)), value))
    return entries


def _seconds(values) -> bool:
    return (isinstance(values, list) and len(values) > 0
            and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) and v > 0 for v in values))


RUNS = SingleProcessRuns()
"""This process's single-process runs (one store for every experiment of a run)."""
