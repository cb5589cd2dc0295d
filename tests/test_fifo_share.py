"""FifoShare: a NIC serving messages in arrival order, each at most at the sender's link rate."""

import pytest
import simpy

from dsgd_sim.fifo_share import FifoShare


def finish_times(capacity, cap, jobs):
    """Submit ``(start_s, amount)`` jobs; return when each one ends."""
    env = simpy.Environment()
    nic = FifoShare(env, capacity, cap)
    ends = [None] * len(jobs)

    def job(i, start, amount):
        yield env.timeout(start)
        yield nic.submit(amount)
        ends[i] = env.now

    for i, (start, amount) in enumerate(jobs):
        env.process(job(i, start, amount))
    env.run()
    return ends


def test_one_job_runs_at_the_smaller_of_cap_and_capacity():
    assert finish_times(10.0, 4.0, [(0, 8.0)]) == [pytest.approx(2.0)]
    assert finish_times(4.0, 10.0, [(0, 8.0)]) == [pytest.approx(2.0)]


def test_jobs_that_arrive_together_are_served_one_after_another_at_full_rate():
    assert finish_times(5.0, 5.0, [(0, 10.0)] * 4) == pytest.approx([2.0, 4.0, 6.0, 8.0])


def test_slow_senders_share_a_fat_nic_until_it_is_full():
    # Capacity for 2.5 capped jobs: two at the cap, the third at half of it, the fourth waits.
    ends = finish_times(10.0, 4.0, [(0, 8.0)] * 4)
    assert ends[:2] == pytest.approx([2.0, 2.0])
    # Job 3: 2 s at rate 2 (4 units), then the last 4 units at 4.  Job 4 waits 2 s, then runs at 4.
    assert ends[2:] == pytest.approx([3.0, 4.0])


def test_the_nic_never_idles_while_work_waits():
    jobs = [(0.0, 3.0), (0.5, 1.0), (0.7, 2.0), (9.0, 1.0)]
    ends = finish_times(2.0, 2.0, jobs)
    assert ends == pytest.approx([1.5, 2.0, 3.0, 9.5])


def test_zero_work_is_done_at_once():
    assert finish_times(1.0, 1.0, [(0.25, 0.0)]) == [0.25]


def test_a_lead_holds_the_jobs_place_before_its_units_flow():
    # One slot: the job's lead (asked when it reaches the slot, not when it was queued) delays
    # its end and the next job's start by as much.
    env = simpy.Environment()
    nic = FifoShare(env, 2.0, 2.0)
    asked, ends = [], {}

    def job(name, start, amount, lead_s=None):
        yield env.timeout(start)
        lead = None if lead_s is None else (lambda: asked.append((name, env.now)) or lead_s)
        yield nic.submit(amount, lead)
        ends[name] = env.now

    env.process(job("first", 0.0, 4.0))
    env.process(job("second", 0.5, 2.0, lead_s=0.25))
    env.process(job("third", 0.6, 2.0))
    env.run()
    assert asked == [("second", pytest.approx(2.0))]
    assert ends == pytest.approx({"first": 2.0, "second": 3.25, "third": 4.25})


def test_a_capacity_of_whole_caps_gives_no_job_a_place_on_its_rounding_remainder():
    # 7 shards' caps fill a 10 Gbit/s NIC; 7 × (1e10 / 7) leaves ~1e-6 of it, which gave an
    # eighth job its place at 1e-6 bit/s and asked its lead at 0 instead of when a slot freed
    env = simpy.Environment()
    nic = FifoShare(env, 1e10, 1e10 / 7)
    asked = []

    def job(i):
        yield nic.submit(1e10 / 7, lambda: asked.append((i, env.now)) or 0.0)

    for i in range(8):
        env.process(job(i))
    env.run()
    assert [i for i, _ in asked] == list(range(8))
    assert [at for _, at in asked] == pytest.approx([0.0] * 7 + [1.0])


def test_queued_time_counts_only_where_the_jobs_fill_the_capacity():
    env = simpy.Environment()
    nic = FifoShare(env, 4.0, 2.0)  # two jobs at their cap fill it
    seen = []

    def probe():
        nic.submit(4.0)
        yield env.timeout(0.5)
        seen.append(nic.queued_s())  # one job at 2 of 4: nothing would queue behind it
        nic.submit(4.0)
        yield env.timeout(0.5)
        seen.append(nic.queued_s())  # full: 2 + 3 units left at 4 units/s

    env.process(probe())
    env.run()
    assert seen == pytest.approx([0.0, 1.25])
