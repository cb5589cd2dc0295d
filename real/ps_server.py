"""The parameter server (rank 0): apply gradients in arrival order, reply with the new weights.

The receive for every worker's next push header is always posted; ``Communicator.wait_any``
takes whichever header arrives first. How many gradients flow in at once is the push window
(``--push-window K``; the engine sends a gradient only once its receive is posted):

* K = 0 (the default) or K >= the workers: every worker's gradient receive is posted ahead, so
  pushes flow in the moment workers send them, all at once, sharing the server's link as TCP
  shares it. Pushes that start together then end together, and so do the replies: on a link
  that the pushes saturate the workers can fall into lock step, pushes and replies taking
  turns on the link (``docs/async_ps.md``);
* K >= 1: the gradients of the first K headers to arrive are received (their receives posted in
  the headers' order); the other pushes wait for a slot, their headers unread, as the
  simulator's server NIC takes them (``dsgd_sim/fifo_share.py``: in arrival order, as many at
  once as its rate allows). Set K to the server's link rate over a worker's (1 where they are
  equal): the link is then always busy with whole pushes, each at a worker's rate, and replies
  leave while the next push comes.

The loop, one push at a time:

1. take the oldest push whose header has arrived (whoever is ready first is served first; its
   header checked on arrival by ``ps_protocol.check_push``: ours, a push, from that rank, on the
   version that rank was sent, its next step, full size), then wait for that rank's gradient
   (its own tag), taking the headers that arrive meanwhile while the window has room (a header
   is taken only then, and its gradient let in at once); once it is in, the headers already
   there take its slot before it is applied (``take_arrived``), so that the notice letting the
   next gradient in leaves ahead of this push's reply, not behind the reply's bytes in the
   server's outbound queue (on a shaped link that cost every push 15–18 ms);
2. staleness = server version − pushed version (the updates applied between the worker's pull
   and this gradient's application). With ``max_staleness`` s and staleness > s the gradient is
   dropped and the worker is sent the current weights to compute again (``RETRY``): drop and
   recompute, the simulator's rule (``dsgd_sim/parameter_server.py``). Otherwise SGD applies it
   (learning rate divided by 1 + staleness with ``staleness_lr="inverse"``);
3. post the receives for that worker's next push, then send the reply (``WEIGHTS`` or
   ``RETRY`` with a copy of the new weights and their version) without waiting for it to
   leave: the next push is taken while the reply is on its way, as in the simulator;
4. once the stop condition holds (``updates`` applied or ``time_s`` elapsed) every worker is sent
   ``STOP``.

A worker that dies fails its own posted receive (its TCP connection closes, at once), or the
server's next send to it; it is counted in ``workers_lost`` and the others go on. (A single
receive from *any* worker would not do: Gloo matches it to the first worker that announces a
push, and if that worker dies before the push arrives, every later receive from any worker
fails.) A worker that is alive but pushes nothing within the timeout (hung, or computing for
longer) ends the job instead, with :class:`WorkersLost` naming it: a Gloo receive that times out
closes every connection of the process, the healthy workers' too. (MPI receives have no
timeout: there the others go on.) A bad header ends the job: every
worker still alive gets ``ERROR``, and :class:`ProtocolError` carries the one-line reason.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from dsgd_sim.parameter_server import HEADER_LOOK_S, timed_rate
from dsgd_sim.trace import Trace

from .comm import CommError
from .flat_params import flatten_parameters
from .models import build_model, grad_bytes
from .ps_protocol import (ERROR, PUSH_TAG, REPLY_DATA_TAG, REPLY_TAG, RETRY, STOP, WEIGHTS, Header,
                          ProtocolError, check_push, empty_header, payload_tag)
from .replica_state import weights_sha256

UPDATE_LOG_LIMIT = 100_000  # updates listed one by one in the summary


class WorkersLost(RuntimeError):
    """No worker is left to serve (all died), or one pushed nothing within the timeout."""


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
        self.optimizer = torch.optim.SGD([self.weights], lr=config.lr, momentum=config.momentum)
        self.version = 0
        self.workers = list(range(1, comm.world_size))
        self.alive = set(self.workers)
        self.sent_version = {w: 0 for w in self.workers}
        self.applied = {w: 0 for w in self.workers}
        self.lost: list[int] = []
        self.last_loss = "none"  # why the last worker was lost
        self.timed_out: str | None = None  # why the first worker lost to the timeout was lost
        self.headers = {w: empty_header() for w in self.workers}  # each worker's next push:
        self.grads = {w: torch.zeros_like(self.weights) for w in self.workers}  # its gradient
        self.pending: dict[int, object] = {}  # worker -> the posted receive of that header
        self.payloads: dict[int, object] = {}  # worker -> the posted receive of that gradient
        self.arrived: deque[tuple[int, Header]] = deque()  # headers taken, pushes not yet served
        window = config.push_window
        self.window = len(self.workers) if window == 0 else min(window, len(self.workers))
        self.ahead = self.window >= len(self.workers)  # gradient receives posted with headers
        self.reply_headers = {w: empty_header() for w in self.workers}
        self.reply_weights: dict[int, torch.Tensor] = {}  # worker -> the copy sent last
        self.replies: dict[int, list] = {}  # worker -> the sends of its last reply
        self.log = UpdateLog(origin_s=time.perf_counter())

    # -- the loop --------------------------------------------------------------------------
    def serve(self, on_update=None) -> None:
        """Serve pushes until the stop condition; then stop every worker still alive."""
        self.log.origin_s = time.perf_counter()
        try:
            for worker in self.workers:
                self.expect(worker)
            while not self.finished():
                if self.timed_out is not None:
                    raise WorkersLost(self.timed_out)
                if not self.arrived:
                    self.take_header(self.first_header())
                    continue
                self.handle(*self.arrived.popleft(), on_update)
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

    def expect(self, worker: int) -> None:
        """Post the receive for ``worker``'s next push header, and with the window open to
        every worker its gradient's too, so that the push flows the moment it is sent,
        alongside others' (a dead worker is lost)."""
        try:
            self.pending[worker] = self.comm.irecv(self.headers[worker], worker, PUSH_TAG)
            if self.ahead:
                self.payloads[worker] = self.comm.irecv(self.grads[worker], worker,
                                                        payload_tag(worker))
        except CommError as error:
            self.lose(worker, error)

    def first_header(self) -> int:
        """The worker whose push header arrives first (``WorkersLost`` when none is left)."""
        if not self.pending:
            raise WorkersLost(f"every worker was lost; nothing left to serve (the last: "
                              f"{self.last_loss})")
        workers = sorted(self.pending)
        return workers[self.comm.wait_any([self.pending[w] for w in workers])]

    def take_header(self, source: int) -> None:
        """Take ``source``'s arrived header: check it (``ProtocolError`` if bad), queue its push
        and let its gradient in (a header is taken only while the window has room); a worker
        that died instead, or pushed nothing within the timeout, is lost."""
        try:
            self.pending.pop(source).wait()
        except CommError as error:
            self.lose(source, error)
            return
        header = Header.decode(self.headers[source])
        try:
            check_push(header, source, self.sent_version[source], self.applied[source],
                       self.version, self.weights.numel())
        except ProtocolError:
            self.refuse(source)
            raise
        if not self.ahead:
            try:
                self.payloads[source] = self.comm.irecv(self.grads[source], source,
                                                        payload_tag(source))
            except CommError as error:
                self.lose(source, error)
                return
        self.arrived.append((source, header))

    def take_arrived(self) -> None:
        """Take the push headers that have already arrived while the window has room (each
        looked for ``HEADER_LOOK_S``), letting their gradients in before this push's reply:
        the notice that lets a gradient in then leaves ahead of the reply's bytes in the
        server's outbound queue instead of behind them."""
        while not self.ahead and self.pending and len(self.payloads) < self.window:
            workers = sorted(self.pending)
            first = self.comm.wait_any([self.pending[w] for w in workers], within_s=HEADER_LOOK_S)
            if first is None:
                return
            self.take_header(workers[first])

    def receive(self, source: int) -> None:
        """Wait for ``source``'s gradient (``CommError`` if it died), taking the headers that
        arrive meanwhile while the window has room for their gradients."""
        payload = self.payloads[source]
        while True:
            room = not self.ahead and len(self.payloads) < self.window
            others = sorted(self.pending) if room else []
            if not others:
                payload.wait()
                return
            first = self.comm.wait_any([payload] + [self.pending[w] for w in others])
            if first == 0:
                payload.wait()
                return
            self.take_header(others[first - 1])

    def handle(self, source: int, header: Header, on_update) -> None:
        """Receive ``source``'s gradient, apply or drop it, and reply."""
        arrived_s = self.now()
        try:
            self.receive(source)
        except CommError as error:
            self.lose(source, error)
            return
        finally:
            self.payloads.pop(source, None)
        self.take_arrived()
        grad = self.grads[source]
        if not bool(torch.isfinite(grad).all()):
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
        self.apply(grad, staleness)
        self.record(source, header, staleness, arrived_s, received_s)
        if on_update is not None:
            on_update(self.version)
        self.reply(source, STOP if self.finished() else WEIGHTS)

    def apply(self, grad: torch.Tensor, staleness: int) -> None:
        lr = self.config.lr
        if self.config.staleness_lr == "inverse":
            lr /= 1 + staleness
        self.optimizer.param_groups[0]["lr"] = lr
        self.weights.grad = grad
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
        """Answer ``source``'s push without waiting for the answer to leave.

        ``WEIGHTS`` and ``RETRY`` carry a copy of the current weights (the next update may
        change them while the copy is still on its way); the receive for ``source``'s next
        push is posted first, so that push goes out the moment it is ready. ``STOP`` ends it.
        """
        if kind == STOP:
            self.stop(source, STOP)
            return
        self.expect(source)
        if source not in self.alive:
            return
        self.finish_reply(source)  # long done: the worker has received it and pushed since
        header = self.reply_headers[source]
        header.copy_(Header(kind, 0, self.version, self.weights.numel()).encode())
        buffer = self.reply_weights.setdefault(source, torch.empty_like(self.weights))
        buffer.copy_(self.weights)
        try:
            self.replies[source] = [self.comm.isend(header, source, REPLY_TAG),
                                    self.comm.isend(buffer, source, REPLY_DATA_TAG)]
        except CommError as error:
            self.lose(source, error)
            return
        self.sent_version[source] = self.version

    def finish_reply(self, worker: int) -> None:
        """Wait until the last reply to ``worker`` has left (a dead worker is lost)."""
        for work in self.replies.pop(worker, []):
            try:
                work.wait()
            except CommError as error:
                self.lose(worker, error)
                return

    def stop(self, worker: int, kind: int) -> None:
        """Send ``kind`` (``STOP`` or ``ERROR``, no weights) to ``worker``; it is then out."""
        self.finish_reply(worker)
        if worker not in self.alive:
            return
        try:
            self.comm.send(Header(kind, 0, self.version, 0).encode(), worker, REPLY_TAG)
            self.alive.discard(worker)
        except CommError as error:
            self.lose(worker, error)

    def refuse(self, worker: int) -> None:
        """Tell ``worker`` that its message was refused; it is then out of the job."""
        self.finish_reply(worker)
        self.alive.discard(worker)
        self.forget(worker)
        try:
            self.comm.send(Header(ERROR, 0, self.version, 0).encode(), worker, REPLY_TAG)
        except CommError:
            pass  # it is gone already; the protocol error is what gets reported

    def forget(self, worker: int) -> None:
        """Drop ``worker``'s posted receives and its pushes waiting to be served."""
        self.pending.pop(worker, None)
        self.payloads.pop(worker, None)
        self.arrived = deque(push for push in self.arrived if push[0] != worker)

    def lose(self, worker: int, error: CommError) -> None:
        self.forget(worker)
        self.last_loss = f"rank {worker}: {error}"
        if error.timed_out and self.timed_out is None and worker in self.alive:
            self.timed_out = (f"rank {worker} pushed nothing within the "
                              f"{self.config.timeout_s:g} s --timeout (hung, or computing for "
                              f"longer); a receive that times out closes every connection of "
                              f"the process, so the job ends")
        if worker in self.alive:
            self.alive.discard(worker)
            self.lost.append(worker)

    def stop_everyone(self, kind: int = STOP) -> None:
        """Send ``kind`` (STOP, or ERROR when the server fails) to every live worker at once,
        then wait for each send: a dead worker fails fast and is counted as lost."""
        for worker in sorted(self.replies):
            self.finish_reply(worker)
        pending = []
        for worker in sorted(self.alive):
            try:
                pending.append((worker, self.comm.isend(
                    Header(kind, 0, self.version, 0).encode(), worker, REPLY_TAG)))
            except CommError as error:
                self.lose(worker, error)
        for worker, work in pending:
            try:
                work.wait()
                self.alive.discard(worker)
            except CommError as error:
                self.lose(worker, error)

    # -- results ---------------------------------------------------------------------------
    def summary(self) -> dict:
        """The run summary written by ``--json``."""
        log, config = self.log, self.config
        stale = np.asarray(log.staleness, dtype=np.int64)
        n = len(stale)
        last = log.applied_s[-1] if n else 0.0
        skip, start_s, rate = timed_rate(log.applied_s, len(self.workers),
                                         self.config.warmup_updates)
        losses = [x for x in log.loss if not math.isnan(x)]
        tail = len(self.workers)
        return {
            "world_size": self.comm.world_size, "workers": len(self.workers),
            "updates": n, "updates_per_s": rate,
            "warmup_updates": skip, "warmup_s": start_s,
            "elapsed_s": last, "stopped_by": "updates" if config.updates and
            n >= config.updates else "time",
            "staleness_mean": float(stale.mean()) if n else None,
            "staleness_p50": float(np.percentile(stale, 50)) if n else None,
            "staleness_p99": float(np.percentile(stale, 99)) if n else None,
            "staleness_max": int(stale.max()) if n else None,
            "staleness_hist": np.bincount(stale).tolist() if n else [],
            "dropped_gradients": log.dropped, "dropped_compute_s": log.dropped_compute_s,
            "wasted_fraction": log.dropped / (n + log.dropped) if n + log.dropped else 0.0,
            "max_staleness": config.max_staleness, "push_window": self.window,
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
