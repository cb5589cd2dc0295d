"""A fluid resource shared max-min fairly: a NIC carrying several flows, or cores running processes.

``FairShare(env, capacity)`` serves any number of jobs at once. Each job has an amount of work
(bytes, core-seconds) and a rate cap (the sender's own NIC, one core); the capacity is split by
water-filling: every job gets an equal share, and what a capped job cannot use goes to the others.
Whenever a job starts or ends, the remaining work of every job is brought up to date and the next
completion is rescheduled. Transfers that start together and are equally capped therefore all end
at ``max(work/cap, jobs·work/capacity)``: the incast time of a parameter server.
"""

from __future__ import annotations

import math

import simpy


class FairShare:
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
        self._generation += 1
        if not self._jobs:
            return
        delay = min(job[0] / job[2] for job in self._jobs.values())
        wake = self.env.timeout(max(delay, 0.0))
        generation = self._generation
        wake.callbacks.append(lambda _event: self._on_wake(generation))

    def _on_wake(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later start or end
        self._advance()
        # A picosecond of work left, or what the clock can no longer resolve on long runs (a
        # wake-up that cannot move the clock would come back at the same time forever).
        tick_s = max(1e-12, 4 * math.ulp(self.env.now))
        for done, job in list(self._jobs.items()):
            if job[0] / job[2] <= tick_s:
                del self._jobs[done]
                done.succeed()
        self._reschedule()


class CappedFairShare:
    """``FairShare`` with one rate cap for every job (a server NIC whose messages each cross a
    worker's link): ``submit(amount)``, as ``FifoShare`` takes it, served fairly, not in order."""

    def __init__(self, env: simpy.Environment, capacity: float, cap: float):
        if not cap > 0:
            raise ValueError(f"cap must be positive, got {cap!r}")
        self._share, self.cap = FairShare(env, capacity), float(cap)

    def submit(self, amount: float) -> simpy.Event:
        return self._share.submit(amount, self.cap)
