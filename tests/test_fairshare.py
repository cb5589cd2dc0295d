"""FairShare: a fluid resource split max-min fairly among the jobs it serves."""

import pytest
import simpy

from dsgd_sim.fairshare import FairShare

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
