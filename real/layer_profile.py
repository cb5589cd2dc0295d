"""Per-layer backward times and gradient sizes, measured for the simulator (``--profile-out``).

A post-accumulate-grad hook on every parameter stamps the moment its gradient is ready. A
parameter's backward time is the gap since the previous parameter became ready (the first in
backward order counts from the start of backward, so the loss's backward is charged to it); the
gaps add up to the whole backward pass. The profile lists parameters ("layers", named as in
``state_dict``) in forward order with the median over the measured steps, plus every step's
forward+backward seconds.
"""

from __future__ import annotations

import json
import statistics
import time

from torch import nn

from dsgd_sim.argparse_oneline import write_atomically

PROFILE_FORMAT = "dsgd-profile/1"


class LayerTimer:
    """Collects per-parameter backward times; call ``backward_started()`` just before backward."""

    def __init__(self, model: nn.Module):
        self.layers = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.ready_s: dict[int, float] = {}
        self.samples: list[list[float]] = []
        self.compute_s: list[float] = []
        self.start_s = 0.0
        self.handles = [p.register_post_accumulate_grad_hook(self._stamp) for _, p in self.layers]

    def _stamp(self, param) -> None:
        self.ready_s[id(param)] = time.perf_counter()

    def backward_started(self) -> None:
        self.ready_s.clear()
        self.start_s = time.perf_counter()

    def step_done(self, compute_s: float) -> None:
        """Turn this step's stamps into per-parameter backward seconds (call after backward)."""
        ready = [self.ready_s[id(p)] for _, p in self.layers]
        order = sorted(range(len(ready)), key=ready.__getitem__)
        durations, previous = [0.0] * len(ready), self.start_s
        for index in order:
            durations[index] = ready[index] - previous
            previous = ready[index]
        self.samples.append(durations)
        self.compute_s.append(compute_s)

    def profile(self, model_name: str, batch_size: int, world_size: int) -> dict:
        layers = [{"name": name, "grad_bytes": p.numel() * p.element_size(),
                   "backward_s": statistics.median(s[i] for s in self.samples)}
                  for i, (name, p) in enumerate(self.layers)]
        return {"format": PROFILE_FORMAT, "model": model_name, "batch_size": batch_size,
                "world_size": world_size, "layers": layers, "compute_s": self.compute_s,
                "source": "real/sync.py"}

    def write(self, path: str, model_name: str, batch_size: int, world_size: int) -> None:
        write_atomically(path, lambda handle: json.dump(
            self.profile(model_name, batch_size, world_size), handle, indent=1))

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
