"""What a synchronous-SGD run measured: per-step times, the summary (``--json``) and the trace.

Each step is cut at five instants (``time.perf_counter`` seconds)::

    t0 ─ data ─ t1 ─ forward+backward ─ t2 ─ exposed communication ─ t3 ─ optimizer ─ t4

*compute* is t1→t2, *communication* t2→t3: the part of the gradient exchange that backward did
not hide (with ``ddp`` it happens inside backward and cannot be told apart: reported as null),
*idle* the rest of the iteration (data, optimizer step, bookkeeping). Statistics are medians over
the steps after warm-up; ``samples_per_s`` is the global batch times the measured steps over the
wall time between two barriers around them.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import statistics
from dataclasses import dataclass, field

from dsgd_sim.argparse_oneline import finite_json, write_text_atomically
from dsgd_sim.trace import Trace

from .replica_state import gather_bytes


@dataclass
class StepRecorder:
    """Per-step timings of one rank; ``origin_s`` is the clock reading that the trace calls 0."""

    origin_s: float
    comm_measured: bool = True
    keep_spans: bool = False
    iteration_s: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    comm_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    ends_s: list[float] = field(default_factory=list)  # each step's end, seconds since origin_s
    spans: list[tuple[str, str, float, float, int]] = field(default_factory=list)

    def add(self, step: int, marks: list[float], comm_spans, loss: float) -> None:
        t0, t1, t2, t3, t4 = marks
        self.iteration_s.append(t4 - t0)
        self.compute_s.append(t2 - t1)
        self.comm_s.append(t3 - t2)
        self.losses.append(loss)
        self.ends_s.append(t4 - self.origin_s)
        if self.keep_spans:
            self._span("compute", "forward+backward", t1, t2, step)
            for label, start, end in comm_spans:
                self._span("communication", label, start, end, step)
            self._span("update", "optimizer step", t3, t4, step)

    def _span(self, cat: str, name: str, start: float, end: float, step: int) -> None:
        self.spans.append((cat, name, start - self.origin_s, end - start, step))

    def summary(self, warmup_steps: int) -> dict:
        """Medians over the steps after the first ``warmup_steps`` (all steps if too few)."""
        skip = warmup_steps if len(self.iteration_s) > warmup_steps else 0
        iteration, compute = self.iteration_s[skip:], self.compute_s[skip:]
        comm = self.comm_s[skip:]
        idle = [i - c - m for i, c, m in zip(iteration, compute, comm)]
        return {"measured_steps": len(iteration),
                "iteration_time_s": _median(iteration),
                "compute_time_s": _median(compute),
                "comm_time_s": _median(comm) if self.comm_measured else None,
                "idle_time_s": _median(idle)}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def gather_trace(comm, recorder: StepRecorder, title: str) -> Trace | None:
    """Collective: gather every rank's spans into one Chrome trace, a track per rank, for rank 0
    to write (None on the other ranks)."""
    every = gather_bytes(comm, pickle.dumps(recorder.spans))
    if comm.rank != 0:
        return None
    trace = Trace(process_name=title)
    for rank, blob in enumerate(every):
        trace.name_track(rank, f"rank {rank}")
        for cat, name, start_s, dur_s, step in pickle.loads(blob):
            trace.span(rank, name, start_s, dur_s, cat, iteration=step)
    return trace


@contextlib.contextmanager
def output_named(flag: str, path: str):
    """Inside the block an output file is written: an ``OSError`` (a full disk, a folder removed
    during the run) comes out naming the flag and the file, which the bare error does not
    ("[Errno 28] No space left on device")."""
    try:
        yield
    except OSError as error:
        raise OSError(f"{flag} {path}: cannot write it: {error.strerror or error}") from error


def write_json(path: str, summary: dict) -> None:
    """``summary`` as strict JSON: every NaN or infinite float, however deep (a diverged run's
    loss curve), written as null."""
    write_text_atomically(path, json.dumps(finite_json(summary), indent=1, allow_nan=False) + "\n")
