"""The parameter server (rank 0): apply gradients in arrival order, reply with the new weights.

The loop, one message at a time:

1. receive a header from *any* worker (whoever is ready first is served first);
2. check it (``ps_protocol.check_push``: ours, a push, from that rank, on the version that rank
   was sent, its next step, full size), then receive the payload from that rank only;
3. staleness = server version − pushed version (the updates applied between the worker's pull
   and this gradient's application). With ``max_staleness`` s and staleness > s the gradient is
   dropped and the worker is sent the current weights to compute again (``RETRY``): drop and recompute, the
   simulator's rule (``dsgd_sim/parameter_server.py``). Otherwise SGD applies it (learning rate
   divided by 1 + staleness with ``staleness_lr="inverse"``) and the reply carries the new weights
   and version;
4. once the stop condition holds (``updates`` applied or ``time_s`` elapsed) every worker is sent
   ``STOP``.

A worker that dies is noticed when the server next talks to it (its TCP connection is closed):
it is counted in ``workers_lost`` and the others go on. A bad header ends the job: the sender
gets ``ERROR``, the others ``STOP``, and :class:`ProtocolError` carries the one-line reason.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dsgd_sim.trace import Trace

from .comm import CommError
from .flat_params import flatten_parameters
from .models import build_model, grad_bytes
from .ps_protocol import (ERROR, PUSH_TAG, REPLY_DATA_TAG, REPLY_TAG, RETRY, STOP, WEIGHTS, Header,
                          ProtocolError, check_push, empty_header, payload_tag)
from .replica_state import weights_sha256

UPDATE_LOG_LIMIT = 100_000  # updates listed one by one in the summary


class WorkersLost(RuntimeError):
    """No worker is left to serve: all died or none pushed within the timeout."""


@dataclass
class UpdateLog:
    """What the server saw, update by update (``perf_counter`` seconds since ``origin_s``)."""

    origin_s: float
    worker: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    applied_s: list[float] = field(default_factory=list)
    dropped: int = 0
    dropped_compute_s: float = 0.0
    spans: list[tuple] = field(default_factory=list)  # (track, name, start_s, dur_s, cat, args)


def loss_curve(log: UpdateLog) -> list[list]:
    """``[applied_s, loss]`` per applied update (server seconds since the start; the pushing
    worker's batch loss, null when compute is emulated), the first ``UPDATE_LOG_LIMIT``."""
    return [[t, None if math.isnan(x) else x]
            for t, x in zip(log.applied_s[:UPDATE_LOG_LIMIT], log.loss[:UPDATE_LOG_LIMIT])]


class ParameterServer:
    """Holds the weights (rank 0 of ``comm``) and serves the other ranks until the run is over."""

    def __init__(self, config, comm):
        self.config, self.comm = config, comm
        self.model = build_model(config.model, config.seed)
        self.weights, _ = flatten_parameters(self.model)
        self.grad = torch.zeros_like(self.weights)
        self.optimizer = torch.optim.SGD([self.weights], lr=config.lr, momentum=config.momentum)
        self.version = 0
        self.workers = list(range(1, comm.world_size))
        self.alive = set(self.workers)
        self.sent_version = {w: 0 for w in self.workers}
        self.applied = {w: 0 for w in self.workers}
        self.lost: list[int] = []
        self.log = UpdateLog(origin_s=time.perf_counter())
        self.header = empty_header()

    # -- the loop --------------------------------------------------------------------------
    def serve(self, on_update=None) -> None:
        """Serve pushes until the stop condition; then stop every worker still alive."""
        self.log.origin_s = time.perf_counter()
        try:
            while not self.finished():
                source, header = self.next_push()
                self.handle(source, header, on_update)
        except BaseException:
            self.stop_everyone(ERROR)
            raise
        self.stop_everyone(STOP)

    def finished(self) -> bool:
        config = self.config
        if config.updates and self.version >= config.updates:
            return True
        return bool(config.time_s) and self.now() >= config.time_s

    def now(self) -> float:
        return time.perf_counter() - self.log.origin_s

    def next_push(self) -> tuple[int, Header]:
        """The next header from any worker and its sender, checked (``ProtocolError`` if bad)."""
        if not self.alive:
            raise WorkersLost("every worker was lost; nothing left to serve")
        try:
            source = self.comm.recv(self.header, None, PUSH_TAG)
        except CommError as error:
            raise WorkersLost(f"no worker pushed within {self.comm.timeout_s:g} s "
                              f"(live workers: {sorted(self.alive)}): {error}") from error
        header = Header.decode(self.header)
        if source not in self.alive:
            raise ProtocolError(f"rank {source} is not a live worker of this job "
                                f"(workers: {sorted(self.alive)})")
        try:
            check_push(header, source, self.sent_version[source], self.applied[source],
                       self.version, self.weights.numel())
        except ProtocolError:
            self.refuse(source)
            raise
        return source, header

    def handle(self, source: int, header: Header, on_update) -> None:
        """Receive ``source``'s gradient, apply or drop it, and reply."""
        arrived_s = self.now()
        try:
            self.comm.recv(self.grad, source, payload_tag(source))
        except CommError:
            self.lose(source)
            return
        if not bool(torch.isfinite(self.grad).all()):
            self.refuse(source)
            raise ProtocolError(f"rank {source} pushed a gradient with NaN or infinite values "
                                f"(its step {header.step})")
        received_s = self.now()
        staleness = self.version - header.version
        bound = self.config.max_staleness
        if bound is not None and staleness > bound:
            self.log.dropped += 1
            self.log.dropped_compute_s += header.compute_s
            self.reply(source, RETRY)
            return
        self.apply(staleness)
        self.record(source, header, staleness, arrived_s, received_s)
        if on_update is not None:
            on_update(self.version)
        self.reply(source, STOP if self.finished() else WEIGHTS)

    def apply(self, staleness: int) -> None:
        lr = self.config.lr
        if self.config.staleness_lr == "inverse":
            lr /= 1 + staleness
        self.optimizer.param_groups[0]["lr"] = lr
        self.weights.grad = self.grad
        self.optimizer.step()
        self.version += 1

    def record(self, source, header, staleness, arrived_s, received_s) -> None:
        log = self.log
        log.worker.append(source)
        log.step.append(header.step)
        log.staleness.append(staleness)
        log.loss.append(header.loss)
        log.applied_s.append(self.now())
        self.applied[source] += 1
        if len(log.worker) <= self.config.trace_updates and self.config.trace:
            log.spans += [
                (source, "compute", arrived_s - header.compute_s, header.compute_s, "compute",
                 {"step": header.step}),
                (0, "receive", arrived_s, received_s - arrived_s, "communication",
                 {"worker": source}),
                (0, "apply", received_s, log.applied_s[-1] - received_s, "server",
                 {"worker": source, "staleness": staleness, "version": self.version})]

    # -- replies ---------------------------------------------------------------------------
    def reply(self, source: int, kind: int) -> None:
        """Send ``kind`` (with the current weights unless STOP) to ``source``; a dead one is lost."""
        try:
            self.send_reply(source, kind, with_weights=kind != STOP)
        except CommError:
            self.lose(source)
            return
        if kind == STOP:
            self.alive.discard(source)
        else:
            self.sent_version[source] = self.version

    def send_reply(self, dest: int, kind: int, with_weights: bool) -> None:
        length = self.weights.numel() if with_weights else 0
        self.comm.send(Header(kind, 0, self.version, length).encode(), dest, REPLY_TAG)
        if with_weights:
            self.comm.send(self.weights, dest, REPLY_DATA_TAG)

    def refuse(self, worker: int) -> None:
        """Tell ``worker`` that its message was refused; it is then out of the job."""
        self.alive.discard(worker)
        try:
            self.send_reply(worker, ERROR, with_weights=False)
        except CommError:
            pass  # it is gone already; the protocol error is what gets reported

    def lose(self, worker: int) -> None:
        if worker in self.alive:
            self.alive.discard(worker)
            self.lost.append(worker)

    def stop_everyone(self, kind: int = STOP) -> None:
        """Send ``kind`` (STOP, or ERROR when the server fails) to every live worker at once,
        then wait for each send: a dead worker fails fast and is counted as lost."""
        pending = []
        for worker in sorted(self.alive):
            try:
                pending.append((worker, self.comm.isend(
                    Header(kind, 0, self.version, 0).encode(), worker, REPLY_TAG)))
            except CommError:
                self.lose(worker)
        for worker, work in pending:
            try:
                work.wait()
                self.alive.discard(worker)
            except CommError:
                self.lose(worker)

    # -- results ---------------------------------------------------------------------------
    def summary(self) -> dict:
        """The run summary written by ``--json``."""
        log, config = self.log, self.config
        stale = np.asarray(log.staleness, dtype=np.int64)
        n = len(stale)
        last = log.applied_s[-1] if n else 0.0
        skip = len(self.workers) if n > 2 * len(self.workers) else 0  # the first round: start-up
        window_s = last - log.applied_s[skip - 1] if skip else last
        losses = [x for x in log.loss if not math.isnan(x)]
        tail = len(self.workers)
        return {
            "world_size": self.comm.world_size, "workers": len(self.workers),
            "updates": n, "updates_per_s": (n - skip) / window_s if window_s > 0 else None,
            "elapsed_s": last, "stopped_by": "updates" if config.updates and
            n >= config.updates else "time",
            "staleness_mean": float(stale.mean()) if n else None,
            "staleness_p50": float(np.percentile(stale, 50)) if n else None,
            "staleness_p99": float(np.percentile(stale, 99)) if n else None,
            "staleness_max": int(stale.max()) if n else None,
            "staleness_hist": np.bincount(stale).tolist() if n else [],
            "dropped_gradients": log.dropped, "dropped_compute_s": log.dropped_compute_s,
            "wasted_fraction": log.dropped / (n + log.dropped) if n + log.dropped else 0.0,
            "max_staleness": config.max_staleness,
            "staleness_lr": config.staleness_lr,
            "initial_loss": float(np.mean(losses[:tail])) if losses else None,
            "final_loss": float(np.mean(losses[-tail:])) if losses else None,
            "workers_lost": len(self.lost), "lost_ranks": self.lost,
            "updates_per_worker": {str(w): self.applied[w] for w in self.workers},
            "weights_sha256": weights_sha256(self.model),
            "model": config.model, "dataset": config.dataset, "grad_bytes": grad_bytes(self.model),
            "batch_size": config.batch_size, "lr": config.lr, "momentum": config.momentum,
            "seed": config.seed, "backend": config.backend,
            "emulate_compute": config.emulate_spec or None,
            "update_log": [list(t) for t in zip(log.worker, log.step, log.staleness)]
            [:UPDATE_LOG_LIMIT],
            "real_gradients": config.real_gradients,
            "loss_curve": loss_curve(log),
        }

    def write_trace(self, path: str) -> None:
        """Chrome trace from the server's clock: track 0 the server, track r worker r (its
        compute span is placed to end when its push arrived)."""
        trace = Trace(process_name=f"real/async_ps.py x{self.comm.world_size}")
        trace.name_track(0, "parameter server (rank 0)")
        for worker in self.workers:
            trace.name_track(worker, f"worker (rank {worker})")
        for track, name, start_s, dur_s, cat, args in self.log.spans:
            trace.span(track, name, start_s, dur_s, cat, **args)
        trace.write(path)
