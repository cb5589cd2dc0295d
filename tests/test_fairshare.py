"""FairShare: a fluid resource split max-min fairly among the jobs it serves."""

import random

import pytest
import simpy

from dsgd_sim.fairshare import CappedFairShare, FairShare

MAX_EVENTS = 100_000  # a run that needs more has stopped moving the clock


def finish_times(capacity, jobs, start_s=0.0):
    """Submit ``(start_s, amount, cap)`` jobs, the clock starting at ``start_s``; when each ends.
    Steps the run with a bound, so that a share that stops the clock fails instead of hanging."""
    env = simpy.Environment(initial_time=start_s)
    share = FairShare(env, capacity)
    ends = [None] * len(jobs)

    def job(i, start, amount, cap):
        yield env.timeout(start)
        yield share.submit(amount, cap)
        ends[i] = env.now

    for i, (start, amount, cap) in enumerate(jobs):
        env.process(job(i, start, amount, cap))
    for _ in range(MAX_EVENTS):
        if env.peek() == float("inf"):
            return ends
        env.step()
    raise AssertionError(f"{MAX_EVENTS} events and the jobs are not done: {ends}")


def test_jobs_that_start_together_share_the_capacity_equally():
    assert finish_times(10.0, [(0, 5.0, 100.0)] * 4) == [pytest.approx(2.0)] * 4


def test_a_capped_job_leaves_its_unused_share_to_the_others():
    # 10 units/s: the capped job runs at 2, the other at 8 until it ends at 1 s, then alone
    ends = finish_times(10.0, [(0, 4.0, 2.0), (0, 8.0, 100.0)])
    assert ends == [pytest.approx(2.0), pytest.approx(1.0)]


def test_incast_ends_at_the_larger_of_the_cap_and_the_shared_capacity():
    jobs = [(0, 1.0, 1.0)] * 8  # the module docstring's max(work/cap, jobs·work/capacity)
    assert finish_times(2.0, jobs) == [pytest.approx(4.0)] * 8
    assert finish_times(100.0, jobs) == [pytest.approx(1.0)] * 8


def test_jobs_end_on_a_clock_too_coarse_for_a_picosecond():
    # at ~1e5 s a float's step is ~1.5e-11 s: a job with under that left must still end
    start_s = 91596.797
    ends = finish_times(3.0, [(0, 1.0, 1.0)] * 16 + [(0.1, 0.3, 1.0)], start_s=start_s)
    assert all(end is not None and end > start_s for end in ends)
    assert max(ends) == pytest.approx(start_s + 16.3 / 3.0, rel=1e-12)  # never idle, all work


# -- CappedFairShare: one cap for every job, ends ordered on a virtual clock ----------------------
def capped_finish_times(capacity, cap, jobs, cancel_at=(), share_class=None):
    """As ``finish_times`` with one ``cap`` for all, ``jobs`` as ``(start_s, amount)``; each
    ``(i, time_s)`` in ``cancel_at`` withdraws job i at that time (its end stays None).
    ``share_class`` None: ``CappedFairShare``; else a FairShare given the cap per job."""
    env = simpy.Environment()
    share = CappedFairShare(env, capacity, cap) if share_class is None else share_class(env,
                                                                                       capacity)
    submit = share.submit if share_class is None else (lambda amount: share.submit(amount, cap))
    ends, events = [None] * len(jobs), {}

    def job(i, start, amount):
        yield env.timeout(start)
        events[i] = submit(amount)
        yield events[i]
        ends[i] = env.now

    def withdraw(i, at):
        yield env.timeout(at)
        share.cancel(events[i])

    procs = [env.process(job(i, *spec)) for i, spec in enumerate(jobs)]
    for i, at in cancel_at:
        env.process(withdraw(i, at))
    env.run(until=env.all_of([p for i, p in enumerate(procs) if i not in dict(cancel_at)]))
    return ends


@pytest.mark.parametrize("capacity, cap", [(3.0, 1.0), (100.0, 1.0), (2.5, 2.0)])
def test_one_cap_for_all_ends_every_job_when_the_general_share_does(capacity, cap):
    rng = random.Random(7)
    jobs = [(rng.uniform(0, 5), rng.uniform(0.1, 3)) for _ in range(60)]
    cancel_at = [(3, jobs[3][0] + 0.05), (40, jobs[40][0] + 0.01)]
    fast = capped_finish_times(capacity, cap, jobs, cancel_at)
    general = capped_finish_times(capacity, cap, jobs, cancel_at, share_class=FairShare)
    assert fast[3] is None and fast[40] is None
    assert fast == [None if g is None else pytest.approx(g, rel=1e-9, abs=1e-12) for g in general]


def test_one_cap_for_all_ends_jobs_on_a_clock_too_coarse_for_a_picosecond():
    env = simpy.Environment(initial_time=91596.797)
    share = CappedFairShare(env, 3.0, 1.0)
    events = [share.submit(1.0) for _ in range(16)]
    for _ in range(MAX_EVENTS):
        if env.peek() == float("inf"):
            break
        env.step()
    assert all(e.triggered for e in events) and share.active == 0
    assert env.now == pytest.approx(91596.797 + 16 / 3.0, rel=1e-12)
