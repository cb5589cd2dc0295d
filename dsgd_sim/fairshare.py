"""A fluid resource shared max-min fairly: a NIC carrying several flows, or cores running processes.

``FairShare(env, capacity)`` serves any number of jobs at once. Each job has an amount of work
(bytes, core-seconds) and a rate cap (the sender's own NIC, one core); the capacity is split by
water-filling: every job gets an equal share, and what a capped job cannot use goes to the others.
Whenever a job starts or ends, the remaining work of every job is brought up to date and the next
completion is rescheduled (``CappedFairShare``, where every job has the same cap, keeps one
virtual clock instead, and a heap of the jobs' ends). Transfers that start together and are
equally capped therefore all end at ``max(work/cap, jobs·work/capacity)``: the incast time of a
parameter server.
"""

from __future__ import annotations

import heapq
import math

import simpy


class WakesAtNextEnd:
    """A share's wake-up at its next job's end: each start or end re-arms it, and a wake-up
    armed before then does nothing."""

    env: simpy.Environment
    _generation: int

    def _arm(self, delay_s: float | None) -> None:
        """Wake ``_on_wake`` after ``delay_s`` (None: no job left), superseding earlier wake-ups."""
        self._generation += 1
        if delay_s is None:
            return
        generation = self._generation
        wake = self.env.timeout(max(delay_s, 0.0))
        wake.callbacks.append(lambda _event: generation == self._generation and self._on_wake())

    def _on_wake(self) -> None:
        raise NotImplementedError


class FairShare(WakesAtNextEnd):
    """Max-min fair fluid sharing of ``capacity`` units per second among concurrent jobs."""

    def __init__(self, env: simpy.Environment, capacity: float):
        if not capacity > 0:
            raise ValueError(f"capacity must be positive, got {capacity!r}")
        self.env = env
        self.capacity = capacity
        self._jobs: dict[simpy.Event, list[float]] = {}  # event -> [remaining, cap, rate]
        self._updated_at = env.now
        self._generation = 0

    @property
    def active(self) -> int:
        """Number of jobs in service."""
        return len(self._jobs)

    def submit(self, amount: float, cap: float) -> simpy.Event:
        """Start a job of ``amount`` units served at most ``cap`` units/s; the event fires at its end."""
        done = self.env.event()
        if amount <= 0:
            done.succeed()
            return done
        self._advance()
        self._jobs[done] = [float(amount), float(cap), 0.0]
        self._reschedule()
        return done

    def cancel(self, done: simpy.Event) -> None:
        """Withdraw an unfinished job (its event never fires); the others speed up."""
        if done in self._jobs:
            self._advance()
            del self._jobs[done]
            self._reschedule()

    def _advance(self) -> None:
        elapsed = self.env.now - self._updated_at
        if elapsed > 0:
            for job in self._jobs.values():
                job[0] -= job[2] * elapsed
        self._updated_at = self.env.now

    def _assign_rates(self) -> None:
        jobs = sorted(self._jobs.values(), key=lambda job: job[1])
        left = self.capacity
        for i, job in enumerate(jobs):
            job[2] = min(job[1], left / (len(jobs) - i))
            left -= job[2]

    def _reschedule(self) -> None:
        self._assign_rates()
        self._arm(min((job[0] / job[2] for job in self._jobs.values()), default=None))

    def _on_wake(self) -> None:
        self._advance()
        # A picosecond of work left, or what the clock can no longer resolve on long runs (a
        # wake-up that cannot move the clock would come back at the same time forever).
        tick_s = max(1e-12, 4 * math.ulp(self.env.now))
        for done, job in list(self._jobs.items()):
            if job[0] / job[2] <= tick_s:
                del self._jobs[done]
                done.succeed()
        self._reschedule()


class CappedFairShare(WakesAtNextEnd):
    """``FairShare`` with one rate cap for every job: cores shared by processes (each at most one
    core), a server NIC whose messages each cross a worker's link. ``submit(amount)``, as
    ``FifoShare`` takes it; ``cancel(event)`` as ``FairShare``'s.

    With one cap, every job in service runs at the same rate, min(cap, capacity / jobs), so one
    virtual clock (the work any job in service has received since the share was last empty)
    orders their ends: a job submitted when that clock reads V ends when it reads V + amount.
    A heap of those ends makes each start, end or cancel O(log jobs) where ``FairShare`` is
    O(jobs): thousands of replicas sharing a few cores stay quick.
    """

    def __init__(self, env: simpy.Environment, capacity: float, cap: float):
        if not (capacity > 0 and cap > 0):
            raise ValueError(f"capacity and cap must be positive, got {capacity!r}, {cap!r}")
        self.env = env
        self.capacity, self.cap = float(capacity), float(cap)
        self._ends: list[tuple[float, int, simpy.Event]] = []  # heap: (virtual end, order, event)
        self._live: set[simpy.Event] = set()  # jobs in service (cancelled ones stay in the heap)
        self._virtual = 0.0
        self._updated_at = env.now
        self._generation = 0
        self._order = 0

    @property
    def active(self) -> int:
        """Number of jobs in service."""
        return len(self._live)

    def submit(self, amount: float) -> simpy.Event:
        """Start a job of ``amount`` units; the event fires at its end."""
        done = self.env.event()
        if amount <= 0:
            done.succeed()
            return done
        self._advance()
        heapq.heappush(self._ends, (self._virtual + float(amount), self._order, done))
        self._order += 1
        self._live.add(done)
        self._reschedule()
        return done

    def cancel(self, done: simpy.Event) -> None:
        """Withdraw an unfinished job (its event never fires); the others speed up."""
        if done in self._live:
            self._advance()
            self._live.discard(done)
            self._reschedule()

    def _rate(self) -> float:
        return min(self.cap, self.capacity / len(self._live))

    def _advance(self) -> None:
        if self._live:
            self._virtual += self._rate() * (self.env.now - self._updated_at)
        else:  # empty: start the virtual clock again, where a float resolves it finest
            self._virtual, self._ends = 0.0, []
        self._updated_at = self.env.now

    def _head(self) -> tuple[float, int, simpy.Event] | None:
        """The next job to end, cancelled ones dropped."""
        while self._ends and self._ends[0][2] not in self._live:
            heapq.heappop(self._ends)
        return self._ends[0] if self._ends else None

    def _reschedule(self) -> None:
        head = self._head()
        self._arm(None if head is None else (head[0] - self._virtual) / self._rate())

    def _on_wake(self) -> None:
        self._advance()
        # As FairShare's: a picosecond of work left, or what the clock can no longer resolve on
        # long runs. (The virtual clock needs no margin of its own: a wake-up further off than
        # that advances it by most of the way, so at least one of its steps, every time.)
        left = self._rate() * max(1e-12, 4 * math.ulp(self.env.now))
        ended = []
        while (head := self._head()) is not None and head[0] - self._virtual <= left:
            heapq.heappop(self._ends)
            self._live.discard(head[2])
            ended.append(head[2])
        for done in ended:
            done.succeed()
        self._reschedule()
