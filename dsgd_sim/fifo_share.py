"""A server NIC that carries messages in arrival order, as many at once as its bandwidth allows.

A parameter server's loop takes messages in the order they come: it receives (and later sends)
whole gradients and weights, each at the rate of the worker's link, and starts the next one as
soon as the NIC has room. ``FifoShare(env, capacity, cap)`` models that: jobs (messages, in bits)
are served in arrival order; each runs at most at ``cap`` (the worker's link); the first
⌊capacity/cap⌋ jobs run at ``cap``, the next one gets what capacity is left, the rest wait.
The NIC is work-conserving: it never idles while a job waits.

Why not ``FairShare`` (max-min fair sharing, the fluid model of TCP flows)? With every job equal
and constant compute, fair sharing makes messages that start together end together: pushes and
replies then travel in bursts, and the server's inbound link idles while its outbound one is busy
and back, so a NIC-bound server reaches only about half of its bandwidth; a server taking messages
in order pipelines them and reaches all of it (``docs/async.md``). Both agree when compute times
are random enough to spread the messages out.

Each start or end costs O(k) for the k ≤ ⌈capacity/cap⌉ + 1 jobs in service.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import simpy

from .fairshare import WakesAtNextEnd


class FifoShare(WakesAtNextEnd):
    """``capacity`` units/s served to jobs in arrival order, each at most ``cap`` units/s."""

    def __init__(self, env: simpy.Environment, capacity: float, cap: float):
        if not (capacity > 0 and cap > 0):
            raise ValueError(f"capacity and cap must be positive, got {capacity!r}, {cap!r}")
        self.env = env
        self.capacity = float(capacity)
        self.cap = float(cap)
        self._jobs: deque[list] = deque()  # [remaining units, rate, event, lead], in arrival order
        self._updated_at = env.now
        self._generation = 0  # bumps on every reschedule, so that superseded wake-ups do nothing

    @property
    def active(self) -> int:
        """Jobs submitted and not yet finished (in service or waiting)."""
        return len(self._jobs)

    def submit(self, amount: float, lead: Callable[[], float] | None = None) -> simpy.Event:
        """Queue a job of ``amount`` units; the returned event fires when it has been served.

        ``lead``: called once, when the job first gets its place in service; the job then holds
        that place for the seconds it returns before its units flow (at ``cap``: the wait of a
        message whose sender must first be told to send)."""
        done = self.env.event()
        if amount <= 0 and lead is None:
            done.succeed()
            return done
        self._advance()
        self._jobs.append([max(float(amount), 0.0), 0.0, done, lead])
        self._reschedule()
        return done

    def queued_s(self) -> float:
        """Seconds a message joining behind every job held now would wait, where those jobs use
        the whole capacity (0 where they leave some unused: nothing queues for it)."""
        self._advance()
        if sum(job[1] for job in self._serving()) < self.capacity * (1 - 1e-9):
            return 0.0
        return sum(job[0] for job in self._jobs) / self.capacity

    def _serving(self):
        """The jobs that receive bandwidth now: a prefix of the queue. What rounding leaves of
        the capacity once whole caps are taken (7 caps of capacity / 7 leave about 1e-6 of
        10 Gbit/s) serves no one: it would give a job its place, and run its lead, too soon."""
        left = self.capacity
        for job in self._jobs:
            if left <= self.capacity * 1e-9:
                break
            yield job
            left -= self.cap

    def _advance(self) -> None:
        elapsed = self.env.now - self._updated_at
        if elapsed > 0:
            for job in self._serving():
                job[0] -= job[1] * elapsed
        self._updated_at = self.env.now

    def _reschedule(self) -> None:
        left, delay = self.capacity, None
        for job in self._serving():
            if job[3] is not None:  # its place in service is new: it waits its lead there first
                job[0] += job[3]() * self.cap
                job[3] = None
            job[1] = min(self.cap, left)
            left -= job[1]
            delay = job[0] / job[1] if delay is None else min(delay, job[0] / job[1])
        self._arm(delay)

    def _on_wake(self) -> None:
        self._advance()
        # A picosecond of service, or what the clock can no longer resolve on long runs.
        tick_s = max(1e-12, 4 * math.ulp(self.env.now))
        finished = [job for job in self._serving() if job[0] <= job[1] * tick_s]
        for job in finished:
            self._jobs.remove(job)
            job[2].succeed()
        self._reschedule()
