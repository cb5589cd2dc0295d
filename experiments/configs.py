"""Named experiments: each a Python function returning the configurations it measures.

An experiment is a list of *points*; every point is one run on the test bed (one ``Testbed`` of
``hosts`` hosts at ``bandwidth_bps``) that yields one or more measured times, each of which the
model predicts. ``EXPERIMENTS`` maps a name to ``fn(quick: bool) -> Experiment``; the runner
(``experiments/run.py``) runs the ones named on its command line, all of them by default.

Adding an experiment: a config dataclass (what one run is), a function here returning the grid,
a ``measure``/``predict`` pair in ``experiments/run.py`` registered under the same ``kind``.
"""

from __future__ import annotations

import math

from dataclasses import asdict, dataclass, field

MBIT = 1e6
ALLREDUCE_ALGORITHMS = ("ring", "naive", "backend")  # real/allreduce.py's names
LAUNCHERS = ("direct", "torchrun")  # how a sync run's ranks are started (experiments/measure.py)
# how a ring probe's chains of different sizes follow one another (experiments/ring_probe.py),
# the default first; here, not there, so that experiments/run.py names them without torch
PROBE_ORDERS = ("blocks", "interleaved")
PROBE_ORDER_HELP = ("how the ring probe orders its chains of different sizes: blocks (default: "
                    "each size's chains one after another, as the benchmark runs its calls of "
                    "one size) or interleaved (one of each size, then again, so that a burst of "
                    "other load spreads over all of them; the default of every stored grid "
                    "that does not name an order)")


def bed_label(hosts: int, bandwidth_bps: float) -> str:
    """A test bed's name in rows and tables: ``H=4 200Mbps``."""
    return f"H={hosts} {bandwidth_bps / MBIT:g}Mbps"


@dataclass(frozen=True)
class AllReduceConfig:
    """One all-reduce benchmark run: ``hosts`` hosts (one rank each) at ``bandwidth_bps`` per link,
    every algorithm timed at every size (``real/allreduce.py``, median of ``iters``)."""

    hosts: int
    bandwidth_bps: float
    sizes_bytes: tuple[int, ...]
    algorithms: tuple[str, ...] = ALLREDUCE_ALGORITHMS
    iters: int = 5
    warmup: int = 1
    kind: str = field(default="allreduce", init=False)

    def __post_init__(self):
        if self.hosts < 2:
            raise ValueError(f"an all-reduce needs at least 2 hosts, got {self.hosts}")
        if not self.bandwidth_bps > 0:
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth_bps} bit/s")
        bad = [s for s in self.sizes_bytes if s <= 0 or s % (4 * self.hosts)]
        if not self.sizes_bytes or bad:
            raise ValueError(f"sizes must be positive multiples of 4 x hosts bytes, got {self.sizes_bytes}")
        unknown = [a for a in self.algorithms if a not in ALLREDUCE_ALGORITHMS]
        if unknown:
            raise ValueError(f"unknown all-reduce algorithm {unknown[0]!r} "
                             f"(known: {', '.join(ALLREDUCE_ALGORITHMS)})")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError(f"need iters >= 1 and warmup >= 0, got {self.iters}, {self.warmup}")

    @property
    def label(self) -> str:
        return bed_label(self.hosts, self.bandwidth_bps)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SyncRunConfig:
    """One synchronous-SGD run (``real/sync.py``): ``hosts`` replicas, one per host.

    ``emulate_compute_s`` > 0 sleeps instead of computing (an accelerator-like replica whose compute
    takes no CPU); 0 computes for real on the CPU, where the hosts share the machine's cores.
    ``real_gradients``: with emulated compute, compute the real gradients and sleep out the rest
    of the emulated time (``real/sync.py --real-gradients``)."""

    hosts: int
    bandwidth_bps: float
    model: str = "mlp"
    emulate_compute_s: float = 0.0
    steps: int = 30
    warmup_steps: int = 5
    batch_size: int = 32
    launcher: str = "direct"  # "direct": each rank started on its host; "torchrun": c10d rendezvous
    real_gradients: bool = False
    kind: str = field(default="sync", init=False)

    def __post_init__(self):
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"unknown launcher {self.launcher!r} (known: {', '.join(LAUNCHERS)})")
        if self.hosts < 1:
            raise ValueError(f"hosts must be >= 1, got {self.hosts}")
        if not self.bandwidth_bps > 0:
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth_bps} bit/s")
        if self.emulate_compute_s < 0:
            raise ValueError(f"emulated compute must be >= 0 s, got {self.emulate_compute_s}")
        if self.real_gradients and not self.emulate_compute_s > 0:
            raise ValueError("real gradients pad an emulated compute time: give emulate_compute_s")
        if self.steps <= self.warmup_steps:
            raise ValueError(f"steps ({self.steps}) must exceed warmup steps ({self.warmup_steps})")

    @property
    def label(self) -> str:
        compute = f"emulate {self.emulate_compute_s * 1e3:g}ms" if self.emulate_compute_s else "cpu"
        launcher = " torchrun c10d" if self.launcher == "torchrun" else ""
        return f"{bed_label(self.hosts, self.bandwidth_bps)} {self.model} {compute}{launcher}"

    def as_dict(self) -> dict:
        return asdict(self)


def warmup_updates(workers: int, updates: int) -> int:
    """Updates a test-bed run leaves out of its timing, the real server's ``--warmup-updates``
    and the simulator's alike: the whole rounds (one update per worker) in the first quarter of
    the run, at least the first round. Workers that start together stay in step for several
    rounds on the bed (TCP shares the server's link among their pushes) before they settle into
    the order the simulator's server NIC gives them from the first round on; the rows compare
    that steady state. Whole rounds, because where the server's link is fast the updates come
    in bursts of one per worker, and a window cut inside a burst misses part of a round's time."""
    return workers * max(1, updates // (4 * workers))


def rows_named(stored_rows: list[dict], configs: list[str]) -> list[dict]:
    """The stored rows whose ``config`` is each of ``configs``, in that order; ValueError naming
    the first that the stored run lacks."""
    by_config = {row["config"]: row for row in stored_rows}
    missing = [config for config in configs if config not in by_config]
    if missing:
        raise ValueError(f"the stored run has no row {missing[0]!r}")
    return [by_config[config] for config in configs]


def replay_stored(result: dict, points: tuple, stored_of, rows_fn, net_by_rate: dict,
                  **options) -> list[dict]:
    """A stored run's rows made again (``run.py --repredict``): ``rows_fn(experiment,
    net_by_rate, measure_fn=..., **options)`` with each point's measurement taken from the stored
    rows by ``stored_of(point, rows)`` instead of the test bed. ValueError naming a rate of the
    points that ``net_by_rate`` has no calibration for, or what ``stored_of`` finds missing."""
    missing = sorted({p.bandwidth_bps for p in points} - set(net_by_rate))
    if missing:
        raise ValueError(f"no calibration at {missing[0] / 1e6:g} Mbit/s")
    stored = {point.label: stored_of(point, result["rows"]) for point in points}
    experiment = Experiment(result["name"], result["question"], points)
    return rows_fn(experiment, net_by_rate, measure_fn=lambda point: stored[point.label],
                   **options)


def push_window(server_factor: float = 1.0) -> int:
    """The real server's ``--push-window`` on a test bed whose server link is ``server_factor``
    times a worker's: as many gradients at once as its link carries at a worker's rate, in
    arrival order, as the simulator's server NIC takes them (``dsgd_sim/fifo_share.py``).
    With every gradient let in at once instead, pushes that start together share the link and
    end together, and the workers can fall into lock step (``experiments/notes.py``, async)."""
    return max(1, math.ceil(server_factor))


@dataclass(frozen=True)
class AsyncRunConfig:
    """One asynchronous parameter-server run (``real/async_ps.py``): host 0 is the server, every
    other host one worker; compute is emulated (sleep) so that the network and the server decide."""

    hosts: int
    bandwidth_bps: float
    model: str = "mlp"
    emulate_compute_s: float = 0.05
    updates: int = 100
    batch_size: int = 32
    kind: str = field(default="async", init=False)

    def __post_init__(self):
        if self.hosts < 2:
            raise ValueError(f"a parameter server needs at least 2 hosts (server + worker), got {self.hosts}")
        if not self.bandwidth_bps > 0:
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth_bps} bit/s")
        if not self.emulate_compute_s > 0:
            raise ValueError(f"emulated compute must be > 0 s, got {self.emulate_compute_s}")
        if self.updates < 4 * self.hosts:
            raise ValueError(f"updates ({self.updates}) must be at least 4 per host")

    @property
    def workers(self) -> int:
        return self.hosts - 1

    @property
    def label(self) -> str:
        return (f"{self.workers} workers {self.bandwidth_bps / MBIT:g}Mbps {self.model} "
                f"emulate {self.emulate_compute_s * 1e3:g}ms")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Experiment:
    """A named list of runs, with a sentence saying what it asks."""

    name: str
    question: str
    points: tuple

    @property
    def bandwidths_bps(self) -> list[float]:
        return sorted({p.bandwidth_bps for p in self.points})


def allreduce_vs_size(quick: bool = False) -> Experiment:
    """All-reduce time against message size: hand-written ring, naive ring and Gloo's own (a
    ring too), H in {2, 4, 8} hosts at {50, 200, 1000} Mbit/s (quick: H in {2, 4} at 200
    Mbit/s with three sizes and 2 hosts at 50 with two; 4 hosts at 50 Mbit/s, whose 4 MB calls
    and probe rounds take about two minutes, would take the quick run past its ten, and 2 hosts'
    4 MB at 50 Mbit/s, 40 s of calls and rounds, near it on a slow machine)."""
    if quick:
        beds = [(50, 2), (200, 2), (200, 4)]
        sizes = (64_000, 1_000_000, 4_000_000)
    else:
        beds = [(rate, h) for rate in (50, 200, 1000) for h in (2, 4, 8)]
        sizes = (64_000, 256_000, 1_000_000, 4_000_000, 16_000_000)
    points = []
    for rate, h in beds:
        # at 50 Mbit/s a 16 MB naive ring on 8 hosts takes 20 s an iteration: cap the size
        cap = 4_000_000 if rate == 50 and h == 8 else 1_000_000 if rate == 50 and quick else None
        points.append(AllReduceConfig(h, rate * MBIT, tuple(s for s in sizes if not cap or s <= cap),
                                      iters=9))  # median of 9: runs repeat to ~9% per row with 5
    return Experiment("allreduce", "How long does an all-reduce take against message size, hosts "
                      "and link rate, for ring, naive ring and Gloo's own?", tuple(points))


def sync_vs_replicas(quick: bool = False) -> Experiment:
    """Sync SGD iteration time against replicas (mlp, about 0.8 MB of gradients), with emulated
    compute (sleep: no CPU taken) and with real CPU compute (replicas share the machine's cores).
    Quick: 200 Mbit/s, real compute on 2 and 4 hosts, emulated on 4 (the multinode experiment
    runs emulated on 4 too; each point costs its test bed and two round probes, half a minute)."""
    hosts = (2, 4) if quick else (2, 4, 8)  # one replica: the single-process profile run
    rates = (200,) if quick else (50, 200)
    points = []
    for rate in rates:
        for h in hosts:
            if not quick or h == max(hosts):
                points.append(SyncRunConfig(h, rate * MBIT, emulate_compute_s=0.05,
                                            steps=25 if quick else 40))
            points.append(SyncRunConfig(h, rate * MBIT, steps=25 if quick else 40))
    return Experiment("sync", "Sync SGD iteration time against replicas, emulated (accelerator-"
                      "like) and real CPU compute.", tuple(points))


def async_parameter_server(quick: bool = False) -> Experiment:
    """Async SGD through a parameter server: time per applied update against workers (compare
    the sync experiment's emulated rows: the same model, compute and rate)."""
    hosts = (3, 5) if quick else (3, 5, 9)
    # 1000 Mbit/s since the notice (the server's receive posted behind a reply's queue) was
    # modelled: there it is a tenth of an 8-worker update, where 50 and 200 Mbit/s hide it
    rates = (200,) if quick else (50, 200, 1000)
    points = tuple(AsyncRunConfig(h, rate * MBIT, updates=(40 if quick else 50) * (h - 1))
                   for rate in rates for h in hosts)
    return Experiment("async", "Async SGD with a parameter server: seconds per applied update "
                      "against workers (the server's link is shared by every push and reply).",
                      points)


def multinode_torchrun(quick: bool = False) -> Experiment:
    """The multi-node path: one torchrun agent per host, joined by c10d rendezvous (host 0's
    address as the endpoint), 4 hosts running sync SGD; its iteration time is predicted as any
    sync run's. The same in quick and full runs (well under a minute)."""
    point = SyncRunConfig(4, 200 * MBIT, emulate_compute_s=0.05, steps=20, launcher="torchrun")
    return Experiment("multinode", "Does a 4-host sync run through torchrun's c10d rendezvous "
                      "complete on the test bed, as fast as ranks started directly?", (point,))


def ps_vs_ring(quick: bool = False) -> Experiment:
    """Parameter server against ring all-reduce (``experiments/ps_vs_ring.py``, which imports
    this module's types: imported when called)."""
    from .ps_vs_ring import ps_vs_ring as grid
    return grid(quick)


def async_vs_sync(quick: bool = False) -> Experiment:
    """Async against sync SGD (``experiments/async_vs_sync.py``, imported when called)."""
    from .async_vs_sync import async_vs_sync as grid
    return grid(quick)


EXPERIMENTS = {
    "allreduce": allreduce_vs_size,
    "sync": sync_vs_replicas,
    "multinode": multinode_torchrun,
    "async": async_parameter_server,
    "ps_vs_ring": ps_vs_ring,
    "async_vs_sync": async_vs_sync,
}


def select(names: list[str], quick: bool) -> list[Experiment]:
    """The experiments called ``names`` (all when empty); ValueError naming an unknown one."""
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"unknown experiment {unknown[0]!r} (known: {', '.join(EXPERIMENTS)})")
    return [EXPERIMENTS[n](quick) for n in (names or list(EXPERIMENTS))]
