"""Chrome trace files (the JSON "Trace Event Format"), shared by the simulator and the real trainers.

One track per replica (or rank): compute and communication are complete events (``"ph": "X"``)
with start and duration in microseconds. The file opens in Perfetto (ui.perfetto.dev) or
chrome://tracing, so a simulated run and a measured one can be laid side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .argparse_oneline import write_atomically


@dataclass
class Trace:
    """Collects spans in memory and writes them as one Chrome trace JSON file.

    ``process_name`` labels the whole file's process (``"simulated cluster"``, ``"rank 0"``);
    ``max_events`` bounds memory on long runs: spans past it are counted, not kept.
    """

    process_name: str = "dsgd"
    pid: int = 0
    max_events: int = 2_000_000
    events: list[dict] = field(default_factory=list)
    dropped: int = 0

    def name_track(self, track: int, label: str) -> None:
        """Give track ``track`` (a thread id in the file) a readable label such as ``"replica 3"``."""
        self.events.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": track,
                            "args": {"name": label}})

    def span(self, track: int, name: str, start_s: float, dur_s: float, cat: str = "",
             **args) -> None:
        """Record ``name`` on ``track`` from ``start_s`` for ``dur_s`` seconds."""
        if len(self.events) >= self.max_events:
            self.dropped += 1
            return
        event = {"name": name, "cat": cat or name, "ph": "X", "pid": self.pid, "tid": track,
                 "ts": start_s * 1e6, "dur": max(dur_s, 0.0) * 1e6}
        if args:
            event["args"] = args
        self.events.append(event)

    def to_json(self) -> dict:
        meta = {"name": "process_name", "ph": "M", "pid": self.pid,
                "args": {"name": self.process_name}}
        return {"traceEvents": [meta, *self.events], "displayTimeUnit": "ms",
                "otherData": {"dropped_events": self.dropped}}

    def write(self, path: str) -> None:
        """Write the trace to ``path`` (``OSError`` if it cannot be written)."""
        write_atomically(path, lambda handle: json.dump(self.to_json(), handle))
