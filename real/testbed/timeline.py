"""Where a program's wall time goes: nested spans on one track, written as a Chrome trace.

Off until ``start()``: ``span`` then costs a clock read and nothing is kept. Once started, each
``span(name, **args)`` block is one complete event, and blocks inside it nest under it in the
file (Perfetto or chrome://tracing draw them stacked). The test bed records each bed's life,
its making, every command it runs and its unmaking; ``experiments/run.py --trace FILE`` adds its
calibration, experiments and points, so a slow run shows which part was slow.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from dsgd_sim.trace import Trace

_trace: Trace | None = None
_origin_s = 0.0


def start(process_name: str) -> None:
    """Record spans from now on, timed from now."""
    global _trace, _origin_s
    _trace, _origin_s = Trace(process_name=process_name), time.monotonic()
    _trace.name_track(0, "wall clock")


def recording() -> bool:
    return _trace is not None


def stop() -> Trace | None:
    """Stop recording; the spans recorded since ``start`` (None if it was never called)."""
    global _trace
    trace, _trace = _trace, None
    return trace


def add(name: str, started_s: float, ended_s: float, cat: str = "", **args) -> None:
    """Record ``name`` from ``started_s`` to ``ended_s`` (``time.monotonic()`` readings)."""
    if _trace is not None:
        _trace.span(0, name, started_s - _origin_s, ended_s - started_s, cat, **args)


@contextmanager
def span(name: str, cat: str = "", **args):
    """Record the block as ``name`` (with ``args``), however it ends: an error or Ctrl-C inside
    it is marked ``"ended": "by <its type>"``."""
    started = time.monotonic()
    try:
        yield
    except BaseException as error:
        add(name, started, time.monotonic(), cat, **args, ended=f"by {type(error).__name__}")
        raise
    add(name, started, time.monotonic(), cat, **args)
