"""The modelled cluster: R replicas on a non-blocking switch, an optional parameter server, cores.

Every replica has a full-duplex NIC of ``bandwidth_bps`` (each direction) and every message pays
``latency_s`` once. The switch is non-blocking: links only contend at their end points, so a
collective whose rounds pair each sender with a distinct receiver runs contention-free, while
pushes to one parameter server share that server's NIC (incast). Stragglers compute
``straggler_factor`` times slower; with ``cores`` set, the R replica processes share that many
CPU cores of one host (the test bed on one machine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .collectives import RoundCosts


@dataclass(frozen=True)
class ClusterConfig:
    """Network and host parameters of a simulated cluster (SI units: bits/s, seconds)."""

    replicas: int
    bandwidth_bps: float = 10e9
    latency_s: float = 10e-6
    ps_bandwidth_bps: float | None = None  # None: the same as a worker's NIC
    straggler_fraction: float = 0.0
    straggler_factor: float = 1.0
    cores: int | None = None  # None: one core (or accelerator) per replica
    # measured all-reduce rounds (collectives.RoundCosts); None: alpha-beta from the two above
    round_costs: RoundCosts | None = None

    def __post_init__(self):
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) \
                or self.replicas < 1:
            raise ValueError(f"replicas must be an integer >= 1, got {self.replicas!r}")
        for name in ("bandwidth_bps", "ps_bandwidth_bps"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive finite rate, got {value!r}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"latency must be >= 0 seconds, got {self.latency_s!r}")
        if not 0.0 <= self.straggler_fraction <= 1.0:
            raise ValueError(f"straggler fraction must be in [0, 1], got {self.straggler_fraction!r}")
        if not (math.isfinite(self.straggler_factor) and self.straggler_factor >= 1.0):
            raise ValueError(f"straggler factor must be >= 1, got {self.straggler_factor!r}")
        if self.cores is not None and (not isinstance(self.cores, int) or self.cores < 1):
            raise ValueError(f"cores must be an integer >= 1, got {self.cores!r}")

    @property
    def server_bandwidth_bps(self) -> float:
        return self.ps_bandwidth_bps or self.bandwidth_bps

    def slowdowns(self, seed: int) -> np.ndarray:
        """Compute-time multiplier of each replica: ``straggler_factor`` for a seeded random
        ``round(straggler_fraction · R)`` of them, 1 for the rest."""
        factors = np.ones(self.replicas)
        count = int(round(self.straggler_fraction * self.replicas))
        if count:
            chosen = np.random.default_rng([seed, 1]).choice(self.replicas, count, replace=False)
            factors[chosen] = self.straggler_factor
        return factors

    def with_replicas(self, replicas: int) -> "ClusterConfig":
        from dataclasses import replace
        return replace(self, replicas=replicas)
