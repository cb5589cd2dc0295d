"""Asynchronous SGD with a parameter server, as SimPy processes.

R workers each loop: compute a gradient on the weights they hold, push it to the server, wait for
the server to apply it, receive fresh weights in the reply, compute again. Nobody waits for
anybody else; the price is staleness.

Model (``docs/async.md`` has the derivations and the rule a real trainer follows):

* **Versions and staleness.** The server's weights carry a version: the number of gradients it has
  applied. Every reply is stamped with the version it was copied at. A gradient computed on
  version v and applied when the server is at version u has staleness u − v: the number of other
  workers' updates applied between this worker's pull (its last reply) and the application of
  its gradient (compute, the push and any wait in the server's queue). Every worker
  starts from version 0 (the initial weights, as in sync SGD) without a pull.
* **Server.** Gradients are served first come, first served, one at a time; applying one takes
  ``service_s`` (by default ``3 · shard bytes / server memory bandwidth``: read the gradient, read
  and write the weights), then the reply leaves.
* **Network.** A push crosses the worker's uplink and the server's inbound NIC; a reply the
  server's outbound NIC and the worker's downlink; each message also pays the latency α once.
  A server NIC carries messages in arrival order, each at the worker's link rate, as many at
  once as its bandwidth allows (``FifoShare``), so simultaneous pushes queue for it (incast).
  With ``notice_queue_s`` = T a push, once it has its place, first waits for the server's notice
  to send (as under Gloo), which leaves behind the bytes queued on the server's outbound link:
  T, or what that link still holds if it is full and that is less; 0 if it has room.
  With ``header_look_s`` = L, once a gradient is in and before it is applied, an idle server
  looks that long for another worker's push header (``real/ps_server.py`` takes the headers
  already there first): it finds one at once where another worker has finished computing and
  not yet been served, and otherwise waits the whole L.
* **Shards** (``servers`` = S, as in Downpour SGD and ps-lite): the parameters are split into S
  equal shards, each on a server with its own NIC; a push or reply is S parallel flows of ⌈n/S⌉
  bytes, each using 1/S of the worker's link. Every shard sees the same flows at the same times,
  so all shards apply the same gradients in the same order and hold the same version: one shard is
  simulated and stands for all S.
* **Bounded staleness** (``max_staleness`` = s): drop and recompute. When a gradient reaches the
  head of the server's queue with staleness greater than s, the server discards it (no service
  time) and replies with its current weights; the worker computes again on them. No applied
  gradient is staler than s; s = 0 applies only gradients computed on the newest weights. Dropped
  gradients and their compute seconds are counted.

``updates`` counts applied gradients summed over all workers; the run ends when the last one has
been applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from .cluster import ClusterConfig
from .fairshare import CappedFairShare
from .presets import BYTES_PER_PARAM
from .fifo_share import FifoShare
from .trace import Trace
from .workload import Workload

DEFAULT_SERVER_MEMORY_BPS = 20e9  # bytes/s a server sustains applying an update (a few DDR channels)
APPLY_BYTES_PER_GRADIENT_BYTE = 3  # read the gradient, read the weights, write the weights


def apply_time_s(shard_bytes: float, memory_Bps: float = DEFAULT_SERVER_MEMORY_BPS) -> float:
    """Seconds a server takes to apply one update to a shard of ``shard_bytes``: it moves
    ``APPLY_BYTES_PER_GRADIENT_BYTE`` bytes per gradient byte at ``memory_Bps``."""
    return APPLY_BYTES_PER_GRADIENT_BYTE * shard_bytes / memory_Bps


# how long real/ps_server.py looks for push headers already arrived before it applies a
# gradient (its push window); here, with timed_rate, so that a model can price the look
# without importing the server (and torch)
HEADER_LOOK_S = 1e-3


def leaves_a_round(warmup_updates: int, workers: int, updates: int) -> bool:
    """Whether ``updates`` applied gradients leave more than a round (one update per worker)
    to time after the first ``warmup_updates``: the rule by which a run's updates per second
    leave out its start-up, in ``real/ps_server.py`` and in the experiments' predictions."""
    return updates > warmup_updates + workers


def timed_rate(applied_s, workers: int, warmup_updates: int | None = None) -> tuple[int, float,
                                                                                    float | None]:
    """Updates per second after the start-up, as a parameter server reports it: ``applied_s``
    are the times the updates were applied (in order), ``warmup_updates`` how many to leave out
    (default the first round, one per worker), or none where that would leave a round or less.
    Returns (updates left out, when the timed ones began, their rate; None without any time)."""
    applied = len(applied_s)
    skip = workers if warmup_updates is None else warmup_updates
    skip = skip if leaves_a_round(skip, workers, applied) else 0
    start_s = float(applied_s[skip - 1]) if skip else 0.0
    timed = [float(t) for t in applied_s[skip:]]
    end_s = _end_of_whole_bursts(timed, start_s)
    counted = sum(1 for t in timed if start_s < t <= end_s)
    window_s = end_s - start_s
    return skip, start_s, counted / window_s if window_s > 0 else None


def _end_of_whole_bursts(timed_s: list[float], start_s: float) -> float:
    """Where the timed window ends: at the last update, unless updates share instants. Workers
    of equal compute whose gradients the server applies in no time arrive in bursts, and a run
    stops at its last update, so the burst at its last instant may be cut short (64 workers, 130
    updates: 2 of a burst of 64), which would halve the rate; then the window ends at the
    instant before the last one, where there is one after ``start_s``."""
    if not timed_s:
        return start_s
    instants = sorted(set(timed_s))
    if len(instants) < len(timed_s) and len(instants) > 1 and instants[-2] > start_s:
        return instants[-2]
    return instants[-1]


@dataclass(frozen=True)
class AsyncConfig:
    """One asynchronous parameter-server simulation (SI units: seconds, bytes, bytes/s)."""

    cluster: ClusterConfig  # cluster.replicas counts workers; the servers are extra
    workload: Workload
    updates: int = 1000  # gradients applied by the server, summed over workers
    seed: int = 0
    servers: int = 1  # parameter shards, each on its own server and NIC
    max_staleness: int | None = None  # None: unbounded
    service_time_s: float | None = None  # None: derived from the shard size and memory bandwidth
    server_memory_Bps: float = DEFAULT_SERVER_MEMORY_BPS
    # a server loop that receives one whole push before it takes the next (``real/ps_server.py``):
    # its inbound NIC then carries one push at a time, at most at a worker's rate, however fast
    # the NIC itself; replies still leave while the next push arrives
    one_push_at_a_time: bool = False
    # the server's NICs share their rate max-min fairly among the messages in flight, as TCP
    # flows of equal windows do, instead of in arrival order (``FifoShare``): messages that start
    # together end together (``dsgd_sim/fifo_share.py`` says what that costs)
    fair_server_nic: bool = False
    # seconds a small message from the server waits behind a long one it is sending (the queue a
    # TCP flow keeps in the server's link): the notice that lets a push in (the sender sends a
    # gradient only once its receive is posted) waits that long, or until the server's outbound
    # NIC has sent what it holds if that is sooner, holding the push's place on the inbound NIC
    notice_queue_s: float = 0.0
    # seconds an idle server looks for another worker's push header after a gradient is in and
    # before it applies it (``HEADER_LOOK_S`` for the real server), wasted when none is there
    header_look_s: float = 0.0

    def __post_init__(self):
        if isinstance(self.updates, bool) or not isinstance(self.updates, int) or self.updates < 1:
            raise ValueError(f"updates must be an integer >= 1, got {self.updates!r}")
        if isinstance(self.servers, bool) or not isinstance(self.servers, int) or self.servers < 1:
            raise ValueError(f"servers must be an integer >= 1, got {self.servers!r}")
        if self.servers > max(1, self.params):
            raise ValueError(f"{self.servers} servers for {self.params} parameters: every server "
                             f"needs at least one parameter")
        if self.max_staleness is not None and (isinstance(self.max_staleness, bool) or not
                                               isinstance(self.max_staleness, int)
                                               or self.max_staleness < 0):
            raise ValueError(f"max staleness must be an integer >= 0, got {self.max_staleness!r}")
        if self.service_time_s is not None and not (math.isfinite(self.service_time_s)
                                                    and self.service_time_s >= 0):
            raise ValueError(f"server service time must be >= 0 seconds, got {self.service_time_s!r}")
        if not (math.isfinite(self.notice_queue_s) and self.notice_queue_s >= 0):
            raise ValueError(f"notice queue must be >= 0 seconds, got {self.notice_queue_s!r}")
        if not (math.isfinite(self.header_look_s) and self.header_look_s >= 0):
            raise ValueError(f"header look must be >= 0 seconds, got {self.header_look_s!r}")
        if self.notice_queue_s and self.fair_server_nic:
            raise ValueError("a notice queue needs the in-order server NIC (a fair NIC has every "
                             "gradient's receive posted ahead, so no push waits for a notice)")
        if not (math.isfinite(self.server_memory_Bps) and self.server_memory_Bps > 0):
            raise ValueError(f"server memory bandwidth must be positive, got "
                             f"{self.server_memory_Bps!r}")

    @property
    def params(self) -> int:
        """Parameters in the model (fp32 gradients)."""
        return self.workload.grad_bytes // BYTES_PER_PARAM

    @property
    def shard_bytes(self) -> int:
        """Bytes of the largest shard: what one server receives per push and sends per reply."""
        return -(-self.workload.grad_bytes // self.servers)

    @property
    def service_s(self) -> float:
        """Seconds the server (each shard's server) spends applying one gradient."""
        if self.service_time_s is not None:
            return self.service_time_s
        return apply_time_s(self.shard_bytes, self.server_memory_Bps)

    def transfer_alone_s(self) -> float:
        """Seconds of one push (or reply) with no other flow on the server's NIC, latency included."""
        if self.shard_bytes == 0:
            return self.cluster.latency_s
        rate_bps = min(self.cluster.bandwidth_bps / self.servers, self.cluster.server_bandwidth_bps)
        return self.cluster.latency_s + 8.0 * self.shard_bytes / rate_bps

    def single_worker_update_s(self, compute_s: float | None = None) -> float:
        """Seconds per update with one worker at normal speed (no contention, no straggler): the
        baseline of speedup. ``compute_s``: a gradient's compute (the mean of a run's own draws,
        ``AsyncResult.drawn_s``); else the expected one."""
        compute_s = self.workload.compute.mean_s if compute_s is None else compute_s
        return compute_s + 2 * self.transfer_alone_s() + self.service_s


@dataclass
class AsyncResult:
    """What a run measured: every applied update in order, and the time spent per gradient."""

    config: AsyncConfig
    update_end_s: np.ndarray  # when each applied update was done (its reply leaves), in order
    staleness: np.ndarray  # staleness of each applied update (int)
    worker: np.ndarray  # which worker computed each applied update
    dropped: int  # gradients discarded for exceeding max_staleness
    dropped_compute_s: float  # compute seconds spent on them
    cycle_s: dict[str, float] = field(default_factory=dict)  # mean seconds per gradient, by phase
    # each served gradient's compute draw at normal speed, applied or dropped (one worker alone
    # drops none: a staleness bound drops the long draws, and the applied ones alone are short),
    # and how many updates had been applied when it was served
    drawn_s: np.ndarray | None = None
    drawn_after: np.ndarray | None = None

    @property
    def makespan_s(self) -> float:
        return float(self.update_end_s[-1])

    @property
    def updates_per_s(self) -> float:
        return len(self.update_end_s) / self.makespan_s if self.makespan_s > 0 else math.inf


class _Totals:
    """Running sums of per-gradient phase times (seconds) and counts."""

    def __init__(self):
        self.compute = self.push = self.queue = self.apply = self.reply = 0.0
        self.gradients = self.replies = 0

    def means(self) -> dict[str, float]:
        per = max(self.gradients, 1)
        return {"compute": self.compute / per, "push": self.push / per, "queue": self.queue / per,
                "apply": self.apply / per, "reply": self.reply / max(self.replies, 1)}


class AsyncSimulation:
    """Builds the SimPy model of ``config``; ``run()`` returns an ``AsyncResult``."""

    DRAWS_PER_REFILL = 8192

    def __init__(self, config: AsyncConfig, trace: Trace | None = None,
                 on_update: Callable[[int], None] | None = None, trace_updates: int = 200):
        self.config = config
        cluster = config.cluster
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(config.seed)
        self.slowdown = cluster.slowdowns(config.seed).tolist()
        self.workers = cluster.replicas
        self.bits = 8.0 * config.shard_bytes
        cap = cluster.bandwidth_bps / config.servers
        inbound_bps = min(cluster.server_bandwidth_bps, cap) if config.one_push_at_a_time \
            else cluster.server_bandwidth_bps
        nic = CappedFairShare if config.fair_server_nic else FifoShare
        self.inbound = nic(self.env, inbound_bps, cap)
        self.outbound = nic(self.env, cluster.server_bandwidth_bps, cap)
        cores = cluster.cores
        self.cores = CappedFairShare(self.env, cores, 1.0) if cores and cores < self.workers \
            else None
        self.latency_s, self.service_s = cluster.latency_s, config.service_s
        self.notice_s = config.notice_queue_s
        self.look_s = config.header_look_s
        self.computed = 0  # workers whose gradient is computed and not yet served (header sent)
        self.trace, self.trace_updates = trace, trace_updates
        self.on_update = on_update
        self.draws: list[float] = []
        self.free_at = 0.0  # when the server finishes the gradients queued so far
        self.accepted = 0  # gradients accepted so far = the version the next one will meet
        self.ends: list[float] = []
        self.stale: list[int] = []
        self.who: list[int] = []
        self.drawn: list[float] = []  # each served gradient's compute draw, at normal speed
        self.drawn_after: list[int] = []  # ... and the updates applied before it was served
        self.dropped, self.dropped_compute_s = 0, 0.0
        self.totals = _Totals()
        self.finished = self.env.event()

    def _draw(self) -> float:
        """The next compute time drawn, at normal speed."""
        if not self.draws:
            sample = self.config.workload.compute.sample(self.rng, self.DRAWS_PER_REFILL)
            self.draws = sample.tolist()[::-1]
        return self.draws.pop()

    def _notice(self) -> float:
        """How long the notice that lets a push in waits behind the server's outbound bytes."""
        return min(self.notice_s, self.outbound.queued_s())

    def _compute(self, seconds: float, delay_s: float):
        """Wait ``delay_s`` (the reply's latency), then compute for ``seconds`` of one core."""
        if self.cores is None:
            yield self.env.timeout(delay_s + seconds)
            return
        if delay_s:
            yield self.env.timeout(delay_s)
        yield self.cores.submit(seconds)

    def _worker(self, worker: int):
        """Loop: compute, push, wait for the server, take the reply; until the workload is done."""
        env, version, delay_s = self.env, 0, 0.0
        while True:
            drawn = self._draw()
            compute_s = drawn * self.slowdown[worker]
            compute_start = env.now + delay_s
            yield from self._compute(compute_s, delay_s)
            computed = env.now
            self.computed += 1
            if self.bits:
                # only the in-order NIC takes a notice (a fair one refuses a notice queue)
                yield self.inbound.submit(self.bits, self._notice) if self.notice_s \
                    else self.inbound.submit(self.bits)
            self.computed -= 1
            if self.accepted >= self.config.updates:
                return  # the workload is done; this gradient is not needed
            arrival = env.now + self.latency_s
            busy_s = computed - compute_start
            self.drawn.append(drawn)
            self.drawn_after.append(self.accepted)
            staleness, head, end, version, last = self._serve(worker, version, arrival, busy_s)
            self._account(busy_s, computed, arrival, head, end)
            if self.trace is not None and len(self.ends) <= self.trace_updates:
                self._trace_cycle(worker, compute_start, computed, arrival, head, end, staleness)
            yield env.timeout(end - env.now)
            if last:
                self.finished.succeed()
                return
            reply_start = env.now
            if self.bits:
                yield self.outbound.submit(self.bits)
            self.totals.reply += env.now - reply_start + self.latency_s
            self.totals.replies += 1
            if self.trace is not None and len(self.ends) <= self.trace_updates:
                self.trace.span(worker + 1, "reply", reply_start,
                                env.now + self.latency_s - reply_start, "communication")
            delay_s = self.latency_s

    def _serve(self, worker: int, version: int, arrival: float, compute_s: float):
        """The server's decision for a gradient computed on ``version`` arriving at ``arrival``.

        The queue is first come, first served and service times are known, so when the gradient
        reaches the head of the queue (``head``), the version it meets is the number of gradients
        accepted before it. Returns (staleness or None if dropped, head, end, reply version,
        whether this was the workload's last update).
        """
        head = max(arrival, self.free_at)
        met = self.accepted
        staleness = met - version
        bound = self.config.max_staleness
        if bound is not None and staleness > bound:
            self.free_at = head
            self.dropped += 1
            self.dropped_compute_s += compute_s
            return None, head, head, met, False
        # an idle server looks for another worker's header first (a lone worker has none to look
        # for); one is there if another worker has computed
        looked_s = self.look_s if (self.workers > 1 and head == arrival
                                   and not self.computed) else 0.0
        end = head + looked_s + self.service_s
        self.free_at = end
        self.accepted += 1
        self.ends.append(end)
        self.stale.append(staleness)
        self.who.append(worker)
        if self.on_update is not None:
            self.on_update(self.accepted)
        return staleness, head, end, met + 1, self.accepted == self.config.updates

    def _account(self, compute_s: float, computed: float, arrival: float, head: float,
                 end: float) -> None:
        totals = self.totals
        totals.gradients += 1
        totals.compute += compute_s
        totals.push += arrival - computed
        totals.queue += head - arrival
        totals.apply += end - head

    def _trace_cycle(self, worker, compute_start, computed, arrival, head, end, staleness):
        """Tracks are numbered as the ranks of a real job: the server 0, worker w on w + 1."""
        trace, track = self.trace, worker + 1
        trace.span(track, "compute", compute_start, computed - compute_start, "compute")
        trace.span(track, "push", computed, arrival - computed, "communication")
        trace.span(track, "wait for server", arrival, end - arrival, "idle")
        name = "apply" if staleness is not None else "drop (too stale)"
        trace.span(0, name, head, end - head, "server", worker=worker, staleness=staleness)

    def run(self) -> AsyncResult:
        """Run until ``updates`` gradients have been applied."""
        if self.trace is not None:
            self.trace.name_track(0, "parameter server (rank 0)")
            for worker in range(self.workers):
                self.trace.name_track(worker + 1, f"worker {worker} (rank {worker + 1})")
        for worker in range(self.workers):
            self.env.process(self._worker(worker))
        self.env.run(until=self.finished)
        return AsyncResult(self.config, np.asarray(self.ends),
                           np.asarray(self.stale, dtype=np.int64),
                           np.asarray(self.who, dtype=np.int64), self.dropped,
                           self.dropped_compute_s, self.totals.means(),
                           np.asarray(self.drawn), np.asarray(self.drawn_after, dtype=np.int64))
