"""How the machine stood before each stage of a run, with no test bed up: how many cores other
processes kept busy (``note_busy_cores``, which first waits a while for them to finish), and how
steadily each core ran a fixed piece of work (``note_core_speed``, ``experiments.core_speed``);
and the report header's sentences on both.
A 2-core machine's measurements share its cores with whatever else runs, and a virtual
machine's cores slow down from work outside it that no busy count shows."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from experiments import core_speed
from real.testbed import timeline


BUSY_CORES_WARNING = 0.5
"""Cores kept busy by other processes, before a stage with no test bed up, past which the run
warns that its measurements will run slow (``busy_cores``)."""


def cpu_jiffies(proc_stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of every core together, from the text of ``/proc/stat``: its
    ``cpu`` line's fields are user, nice, system, idle, iowait, irq, softirq, steal (guest time
    is counted in user already); idle and iowait are not busy."""
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(x) for x in fields[1:9]]
            return sum(ticks) - ticks[3] - ticks[4], sum(ticks)
    raise ValueError("no 'cpu' line in /proc/stat")


def busy_cores(interval_s: float = 1.0) -> float | None:
    """How many cores' worth of time the machine spent busy over ``interval_s`` (None where
    ``/proc/stat`` cannot be read). Taken with no test bed up, it is other processes' work,
    which on a 2-core machine the measurements would share the cores with."""
    try:
        busy0, total0 = cpu_jiffies(Path("/proc/stat").read_text())
        time.sleep(interval_s)
        busy1, total1 = cpu_jiffies(Path("/proc/stat").read_text())
    except (OSError, ValueError):
        return None
    cpus = os.cpu_count() or 1
    return cpus * (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0


QUIET_WAIT_S = 120.0
"""How long a run waits, by default, before each stage for other processes to leave the cores
(``experiments/run.py --wait-quiet``)."""
QUIET_CHECK_S = 10.0  # how often it looks again while it waits


def is_busy(cores: float | None) -> bool:
    return cores is not None and cores >= BUSY_CORES_WARNING


def note_busy_cores(meta: dict, stage: str, wait_s: float = 0.0) -> None:
    """Record in ``meta`` how busy the machine is before ``stage``. Past ``BUSY_CORES_WARNING``
    it waits up to ``wait_s`` for the other processes, looking again every ``QUIET_CHECK_S``
    (the seconds it waited go in ``meta["quiet_waits"]``), and warns if they are still there:
    the stage then runs beside them, slow."""
    cores, waited = busy_cores(), 0.0
    if is_busy(cores) and wait_s > 0:
        print(f"experiments/run.py: before {stage}, other processes keep {cores:.1f} of the "
              f"machine's {os.cpu_count()} cores busy; waiting up to {format_wait(wait_s)} for "
              f"them to finish", file=sys.stderr, flush=True)
        start = time.monotonic()
        while is_busy(cores) and waited < wait_s:
            time.sleep(min(QUIET_CHECK_S, wait_s - waited))
            cores = busy_cores()
            waited = time.monotonic() - start
        meta.setdefault("quiet_waits", {})[stage] = round(waited, 1)
        if not is_busy(cores):
            print(f"experiments/run.py: the machine is quiet after {format_wait(waited)}; "
                  f"starting {stage}", file=sys.stderr, flush=True)
    meta.setdefault("busy_cores", {})[stage] = None if cores is None else round(cores, 2)
    if is_busy(cores):
        print(f"experiments/run.py: warning: before {stage}, other processes kept {cores:.1f} "
              f"of the machine's {os.cpu_count()} cores busy"
              + (f" (after waiting {format_wait(waited)})" if waited else "")
              + "; measurements beside them run slow", file=sys.stderr, flush=True)


def format_wait(seconds: float) -> str:
    """``45 s``, ``2.0 min``: a wait as a person reads it."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


CORE_SPEED_SECONDS = 1.5     # per core, before each stage (``note_core_speed``) ...
CORE_SPEED_WINDOW_S = 0.05   # ... in windows this long
CORE_SPEED_MAX_CORES = 4     # a machine with more is sampled on its first cores only


def note_core_speed(meta: dict, stage: str) -> None:
    """Record in ``meta`` how steadily the machine's cores run before ``stage``, with no test
    bed up (``experiments.core_speed``): per core its slowest tenth of windows and its median
    against its fastest, the share of slow windows, and its median speed in units of work a
    second (which sets one stage's sample beside another's); and how long each core was timed.
    A virtual machine's cores can slow down from work outside it that no busy count shows; the
    small calls on 4 and 8 hosts, set by CPU work and wake-ups, move with them."""
    cores = sorted(os.sched_getaffinity(0))[:CORE_SPEED_MAX_CORES]
    records = core_speed.sample_cores(cores, CORE_SPEED_SECONDS, CORE_SPEED_WINDOW_S)
    meta["core_speed_sampling"] = {"seconds": CORE_SPEED_SECONDS,
                                   "window_s": CORE_SPEED_WINDOW_S}
    meta.setdefault("core_speed", {})[stage] = [
        {"core": r["core"], **{k: round(r[k], 3) for k in ("p10", "median", "slow_share")},
         "median_units_per_s": round(r["median_units_per_s"])}
        for r in records]


def note_machine(meta: dict, stage: str, wait_s: float = 0.0) -> None:
    """``note_busy_cores`` (waiting up to ``wait_s`` for a quiet machine) and
    ``note_core_speed`` before ``stage``; a span of the run's timeline (``--trace``)."""
    with timeline.span(f"the machine before {stage}", "machine"):
        note_busy_cores(meta, stage, wait_s)
        note_core_speed(meta, stage)


def busy_note(meta: dict) -> str:
    """The header's sentences on the stages before which the run waited for other processes to
    leave the cores, and those before which they still kept them busy (``note_busy_cores``);
    empty when there were none."""
    waits = [f"{format_wait(s)} before {stage}" for stage, s in meta.get("quiet_waits", {}).items()]
    busy = [f"{cores:.1f} cores before {stage}"
            for stage, cores in meta.get("busy_cores", {}).items() if is_busy(cores)]
    return ((f" The run waited for other processes to leave the cores: {', '.join(waits)}."
             if waits else "")
            + (f" Other processes kept the machine busy: {', '.join(busy)}; the measurements "
               "beside them ran slow." if busy else ""))


def core_speed_note(meta: dict) -> str:
    """The header's sentence on how steadily the cores ran before the stages
    (``note_core_speed``); empty for a run that did not time them."""
    records = [r for stage in meta.get("core_speed", {}).values() for r in stage]
    if not records:
        return ""
    p10 = [r["p10"] for r in records]
    slow = [r["slow_share"] for r in records]
    speeds = [r["median_units_per_s"] for r in records if "median_units_per_s" in r]
    # how long each core was timed; runs stored before it was kept used today's constants
    sampling = meta.get("core_speed_sampling", {"seconds": CORE_SPEED_SECONDS,
                                                "window_s": CORE_SPEED_WINDOW_S})
    return (f" Before each stage each core ran a fixed piece of work for "
            f"{sampling['seconds']:g} s in {sampling['window_s'] * 1e3:g} ms windows "
            f"(`python -m experiments.core_speed`): its slowest tenth of windows ran at "
            f"{min(p10):.2f}–{max(p10):.2f} of its fastest, and "
            f"{min(slow):.0%}–{max(slow):.0%} of them under {core_speed.SLOW:g} "
            f"(an idle, steady core: about 1.0 and 0%)"
            + (f"; its median speed {min(speeds):,.0f}–{max(speeds):,.0f} units of work a second"
               if speeds else "") + ".")
