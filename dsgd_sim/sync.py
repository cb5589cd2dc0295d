"""Synchronous data-parallel SGD as SimPy processes.

Each replica is a process that, every iteration, computes (forward, then backward bucket by
bucket), hands its gradient buckets to the communication stream, and waits until the update is
done. Communication is one stream per iteration, as in DDP, Horovod and NCCL: buckets are
all-reduced one after another, each as soon as every replica has it ready (with ``overlap``,
during the backward pass; without, after it). The parameter-server variant (``algorithm="ps"``)
instead pushes each replica's gradient to a server through the server's shared NIC; once the
gradients it needs are in, the server applies their average (``ps_apply_s``, the async server's
time for one update: summing the pushes as their bytes stream in hides behind the NIC), and the
replicas pull the new weights back.

K-sync (``k_sync=K``): the update proceeds with the first K gradients; the replicas still
computing are interrupted and contribute nothing that iteration (backup workers, as analysed by
Dutta et al., AISTATS 2018), and with the parameter server so are the pushes still in flight (the
server has what it needs and stops taking them). Every replica still takes part in the
all-reduce, or pulls the new weights.

Time accounting, per replica and iteration: ``compute`` (forward + backward, slowed by core
sharing if any), ``exposed comm`` (communication in progress after the replica's own compute
ended), and ``idle`` (the rest: waiting for other replicas, or for a parameter server's apply).
The three add up to the iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import math
import numbers

import numpy as np
import simpy

from .cluster import ClusterConfig
from .collectives import ALGORITHM_NAMES, PARAMETER_SERVER, allreduce_time_s
from .fairshare import CappedFairShare
from .trace import Trace
from .workload import Workload


@dataclass(frozen=True)
class SyncConfig:
    """One synchronous-SGD simulation: cluster, workload and how gradients are combined."""

    cluster: ClusterConfig
    workload: Workload
    algorithm: str = "ring"
    iterations: int = 100
    seed: int = 0
    k_sync: int | None = None  # None: wait for all R gradients
    bucket_bytes: int | None = None  # None: one bucket holding the whole gradient
    overlap: bool = False
    # the parameter server's time to apply an update once the gradients it needs are in (the
    # replicas wait for it before they pull): 0 prices the network alone, as alpha-beta does
    ps_apply_s: float = 0.0

    def __post_init__(self):
        replicas = self.cluster.replicas
        if self.algorithm not in ALGORITHM_NAMES:
            raise ValueError(f"unknown algorithm {self.algorithm!r} "
                             f"(known: {', '.join(ALGORITHM_NAMES)})")
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) \
                or self.iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {self.iterations!r}")
        if self.k_sync is not None and not 1 <= self.k_sync <= replicas:
            raise ValueError(f"k-sync K={self.k_sync} must be between 1 and the {replicas} replicas")
        if self.bucket_bytes is not None and self.bucket_bytes <= 0:
            raise ValueError(f"bucket size must be positive, got {self.bucket_bytes!r} bytes")
        if self.overlap and self.k_sync is not None and self.k_sync < replicas:
            raise ValueError("--overlap cannot be combined with --k-sync below the replica count")
        if self.algorithm == PARAMETER_SERVER and (self.overlap or self.bucket_bytes):
            raise ValueError("bucketing and overlap apply to all-reduce algorithms, not 'ps'")
        if isinstance(self.ps_apply_s, bool) or not isinstance(self.ps_apply_s, numbers.Real) \
                or not (math.isfinite(self.ps_apply_s) and self.ps_apply_s >= 0):
            raise ValueError(f"server apply time must be >= 0 seconds, got {self.ps_apply_s!r}")
        if self.ps_apply_s and self.algorithm != PARAMETER_SERVER:
            raise ValueError(f"a server apply time applies to the parameter server ('ps'), not "
                             f"{self.algorithm!r}: an all-reduce has no server")

    @property
    def gradients_used(self) -> int:
        """Gradients averaged into each update (K for K-sync, else R)."""
        return self.k_sync or self.cluster.replicas


@dataclass(frozen=True)
class Bucket:
    grad_bytes: int
    backward_share: float  # fraction of the step's compute spent producing this bucket


def make_buckets(workload: Workload, bucket_bytes: int | None) -> list[Bucket]:
    """Group layers into buckets in backward (reverse) order, closing one when it reaches the cap."""
    if bucket_bytes is None:
        return [Bucket(workload.grad_bytes, workload.backward_share)]
    buckets, size, share = [], 0, 0.0
    for layer in reversed(workload.layers):
        size, share = size + layer.grad_bytes, share + layer.backward_share
        if size >= bucket_bytes:
            buckets.append(Bucket(size, share))
            size, share = 0, 0.0
    if size or share or not buckets:
        buckets.append(Bucket(size, share))
    return buckets


class _Iteration:
    """Shared state of one iteration: compute draws, arrivals, communication spans."""

    def __init__(self, env: simpy.Environment, index: int, compute_s: np.ndarray, n_buckets: int,
                 needed: int):
        self.index = index
        self.start_s = env.now
        self.compute_s = compute_s.tolist()
        self.ready_s = [math.nan] * len(compute_s)  # when each replica's compute ended
        self.arrived = [0] * n_buckets
        self.needed = needed
        self.bucket_ready = [env.event() for _ in range(n_buckets)]
        self.done = env.event()
        self.comm_spans: list[tuple[float, float]] = []  # shared (all-reduce) communication
        self.own_comm_s = np.zeros(len(compute_s))  # per-replica communication (ps pushes)
        self.own_spans: list[tuple[int, float, float]] = []  # (replica, start, end) of each push
        self.pushing: set[int] = set()  # replicas whose ps push is in flight
        self.apply_spans: list[tuple[float, float]] = []  # the ps server's apply (idle time)
        self.end_s = np.nan


@dataclass
class SyncResult:
    """Per-iteration measurements of a simulated run (seconds; means over replicas)."""

    config: SyncConfig
    iteration_s: np.ndarray
    compute_s: np.ndarray
    exposed_comm_s: np.ndarray
    idle_s: np.ndarray
    comm_s: np.ndarray
    drawn_compute_s: float = math.nan
    """Mean of every compute time the run drew, at normal speed (before any straggler's slowdown
    or core sharing): what one replica alone would have computed with the same draws."""


class SyncSimulation:
    """Builds the SimPy model of ``config`` and runs it; ``run()`` returns a ``SyncResult``."""

    def __init__(self, config: SyncConfig, trace: Trace | None = None,
                 on_iteration: Callable[[], None] | None = None, trace_iterations: int = 50):
        self.config = config
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(config.seed)
        self.replicas = config.cluster.replicas
        self.slowdown = config.cluster.slowdowns(config.seed)
        self.buckets = make_buckets(config.workload, config.bucket_bytes)
        self.forward_share = max(0.0, 1.0 - config.workload.backward_share)
        cores = config.cluster.cores
        self.cores = CappedFairShare(self.env, cores, 1.0) if cores and cores < self.replicas \
            else None
        self.trace, self.trace_iterations = trace, trace_iterations
        self.on_iteration = on_iteration
        self.iterations: list[_Iteration] = []
        self.drawn_s, self.drawn_count = 0.0, 0  # every compute draw at normal speed, summed
        self.procs: list[simpy.Process] = []
        self.comm = (_ParameterServer(self) if config.algorithm == PARAMETER_SERVER
                     else _AllReduceStream(self))
        # No core sharing, no overlap, no per-replica transfers: run in closed form (_run_plain).
        self.plain = self.cores is None and not config.overlap and \
            isinstance(self.comm, _AllReduceStream)

    # -- replicas -----------------------------------------------------------------------------
    def iteration(self, index: int) -> _Iteration:
        """The state of iteration ``index``, created (and its compute drawn) on first use."""
        if index == len(self.iterations):
            self.env.process(self.comm.run(self._new_iteration(index)))
        return self.iterations[index]

    def _new_iteration(self, index: int) -> _Iteration:
        drawn = self.config.workload.compute.sample(self.rng, self.replicas)
        self.drawn_s += float(drawn.sum())
        self.drawn_count += len(drawn)
        draws = drawn * self.slowdown
        needed = self.config.gradients_used if self.replicas > 1 else 1
        it = _Iteration(self.env, index, draws, len(self.buckets), needed)
        self.iterations.append(it)
        return it

    def _replica(self, rank: int):
        for index in range(self.config.iterations):
            it = self.iteration(index)
            try:
                yield from self._compute(rank, it)
            except simpy.Interrupt:  # K-sync: enough gradients arrived without this one
                if math.isnan(it.ready_s[rank]):  # stopped computing, not pushing
                    it.ready_s[rank] = self.env.now
            yield it.done

    def _compute(self, rank: int, it: _Iteration):
        total = it.compute_s[rank]
        if self.config.overlap:
            yield from self._work(total * self.forward_share)
            for b, bucket in enumerate(self.buckets):
                yield from self._work(total * bucket.backward_share)
                if b == len(self.buckets) - 1:
                    it.ready_s[rank] = self.env.now
                yield from self.comm.arrive(rank, it, b)
        else:
            yield from self._work(total)
            it.ready_s[rank] = self.env.now
            for b in range(len(self.buckets)):
                yield from self.comm.arrive(rank, it, b)

    def _work(self, seconds: float):
        """Compute for ``seconds`` of one core's time (longer when replicas share fewer cores)."""
        if self.cores is None:
            yield self.env.timeout(seconds)
            return
        job = self.cores.submit(seconds)
        try:
            yield job
        except simpy.Interrupt:
            self.cores.cancel(job)
            raise

    def count_arrival(self, it: _Iteration, bucket: int) -> None:
        """Register one replica's bucket; fire the bucket when enough replicas have it."""
        it.arrived[bucket] += 1
        if it.arrived[bucket] == it.needed:
            it.bucket_ready[bucket].succeed()
            if it.needed < self.replicas and bucket == 0:  # once, not once per bucket
                self._cancel_stragglers(it)

    def _cancel_stragglers(self, it: _Iteration) -> None:
        for rank, proc in enumerate(self.procs):
            if (math.isnan(it.ready_s[rank]) or rank in it.pushing) and proc.is_alive:
                proc.interrupt("k-sync")

    # -- bookkeeping --------------------------------------------------------------------------
    def finish(self, it: _Iteration) -> None:
        """Close iteration ``it`` at the current time and record its spans."""
        self._close(it, self.env.now)
        it.done.succeed()

    def _close(self, it: _Iteration, end_s: float) -> None:
        it.end_s = end_s
        if self.trace is not None and it.index < self.trace_iterations:
            self._trace(it)
        if self.on_iteration:
            self.on_iteration()

    def _exposed(self, it: _Iteration) -> np.ndarray:
        exposed = it.own_comm_s.copy()
        ready = np.asarray(it.ready_s)
        for start, end in it.comm_spans:
            exposed += np.clip(end - np.maximum(start, ready), 0.0, None)
        return exposed

    def _trace(self, it: _Iteration) -> None:
        # a parameter server's shared phase is the pull: each replica's push is its own
        shared = "pull" if self.config.algorithm == PARAMETER_SERVER else self.config.algorithm
        for rank in range(self.replicas):
            self.trace.span(rank, "compute", it.start_s, it.ready_s[rank] - it.start_s, "compute",
                            iteration=it.index)
            for start, end in it.comm_spans:
                self.trace.span(rank, shared, start, end - start, "communication",
                                iteration=it.index)
        for rank, start, end in it.own_spans:  # a parameter server's pushes, each replica's own
            self.trace.span(rank, "push", start, end - start, "communication", iteration=it.index)
        for start, end in it.apply_spans:  # every replica waits for the server's apply
            for rank in range(self.replicas):
                self.trace.span(rank, "server applies", start, end - start, "idle",
                                iteration=it.index)

    def run(self) -> SyncResult:
        if self.trace is not None:
            for rank in range(self.replicas):
                self.trace.name_track(rank, f"replica {rank}")
        if self.plain:
            self._run_plain()
        else:
            self.procs = [self.env.process(self._replica(r)) for r in range(self.replicas)]
            self.env.run()
        return self._result()

    def _run_plain(self) -> None:
        """The plain case (no core sharing, no overlap, an all-reduce) in closed form, with the
        same draws and the same arithmetic as the processes would make: every replica computes,
        the K-th gradient to arrive (the last, without K-sync) starts the buckets' all-reduces,
        one after another, and the iteration ends with the last. Replicas still computing then
        stop. A replica per SimPy process costs a few microseconds an iteration, which a sweep up
        to 65,536 replicas turned into minutes."""
        start = 0.0
        for index in range(self.config.iterations):
            it = self._new_iteration(index)
            it.start_s = start
            ready = start + np.asarray(it.compute_s)
            kth = float(np.partition(ready, it.needed - 1)[it.needed - 1])
            it.ready_s = np.minimum(ready, kth).tolist()
            now = kth
            for seconds in self.comm.bucket_time_s:
                if seconds > 0:
                    it.comm_spans.append((now, now + seconds))
                    now += seconds
            self._close(it, now)
            start = now

    def _result(self) -> SyncResult:
        its = self.iterations
        iteration = np.array([it.end_s - it.start_s for it in its])
        compute = np.array([np.mean(it.ready_s) - it.start_s for it in its])
        exposed = np.array([np.mean(self._exposed(it)) for it in its])
        comm = np.array([sum(e - s for s, e in it.comm_spans) + np.mean(it.own_comm_s)
                         for it in its])
        return SyncResult(self.config, iteration, compute, exposed, iteration - compute - exposed,
                          comm, self.drawn_s / max(1, self.drawn_count))


class _AllReduceStream:
    """One communication stream: bucket all-reduces, one at a time, in backward order."""

    def __init__(self, sim: SyncSimulation):
        self.sim = sim
        cluster = sim.config.cluster
        p = cluster.replicas
        self.bucket_time_s = [allreduce_time_s(sim.config.algorithm, p, b.grad_bytes,
                                               cluster.latency_s, cluster.bandwidth_bps,
                                               cluster.round_costs)
                              for b in sim.buckets]

    def arrive(self, rank: int, it: _Iteration, bucket: int):
        self.sim.count_arrival(it, bucket)
        return
        yield  # a generator that needs no simulated time

    def run(self, it: _Iteration):
        env = self.sim.env
        for bucket, seconds in enumerate(self.bucket_time_s):
            yield it.bucket_ready[bucket]
            if seconds > 0:
                start = env.now
                yield env.timeout(seconds)
                it.comm_spans.append((start, env.now))
        self.sim.finish(it)


class _ParameterServer:
    """Sync parameter server: every push crosses the server's shared NIC (incast), the server
    waits for the gradients it needs and applies their average (``SyncConfig.ps_apply_s``), then
    every replica pulls the new weights through it."""

    def __init__(self, sim: SyncSimulation):
        self.sim = sim
        cluster = sim.config.cluster
        self.grad_bits = 8.0 * sim.config.workload.grad_bytes
        # every push and pull crosses one worker's link: one cap for all
        nic_bps, link_bps = cluster.server_bandwidth_bps, cluster.bandwidth_bps
        self.inbound = CappedFairShare(sim.env, nic_bps, link_bps)
        self.outbound = CappedFairShare(sim.env, nic_bps, link_bps)
        self.latency_s = cluster.latency_s
        self.active = sim.replicas > 1 and self.grad_bits > 0

    def arrive(self, rank: int, it: _Iteration, bucket: int):
        if self.active:
            start = self.sim.env.now
            push = self.inbound.submit(self.grad_bits)
            it.pushing.add(rank)
            try:  # K-sync: the server stops taking pushes once it has K gradients
                yield push
                yield self.sim.env.timeout(self.latency_s)
            except simpy.Interrupt:
                self.inbound.cancel(push)
                raise
            finally:
                it.pushing.discard(rank)
                it.own_comm_s[rank] += self.sim.env.now - start
                it.own_spans.append((rank, start, self.sim.env.now))
        self.sim.count_arrival(it, bucket)

    def run(self, it: _Iteration):
        env = self.sim.env
        yield it.bucket_ready[0]
        if self.active:
            if self.sim.config.ps_apply_s > 0:
                start = env.now
                yield env.timeout(self.sim.config.ps_apply_s)
                it.apply_spans.append((start, env.now))
            start = env.now
            pulls = [self.outbound.submit(self.grad_bits)
                     for _ in range(self.sim.replicas)]
            yield env.all_of(pulls)
            yield env.timeout(self.latency_s)
            it.comm_spans.append((start, env.now))
        self.sim.finish(it)
