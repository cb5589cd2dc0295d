"""Synchronous SGD engine: order statistics, K-sync, speedup rule, buckets, stragglers, cores."""

import numpy as np
import pytest

from dsgd_sim import ClusterConfig, SyncConfig, SyncSimulation, from_preset
from dsgd_sim.collectives import allreduce_time_s
from dsgd_sim.compute import Constant, Exponential
from dsgd_sim.report import baseline_iteration_s, summarize
from dsgd_sim.sync import make_buckets
from dsgd_sim.trace import Trace

MU = 0.08


def harmonic(n):
    return sum(1.0 / i for i in range(1, n + 1))


def free_comm_config(replicas, iterations, k_sync=None, seed=1):
    workload = from_preset("resnet50").with_grad_bytes(0).with_compute(Exponential(MU))
    return SyncConfig(ClusterConfig(replicas), workload, "ring", iterations, seed, k_sync)


@pytest.mark.parametrize("replicas", [1, 2, 4, 8, 16])
def test_exponential_compute_gives_mu_times_harmonic_number(replicas):
    result = SyncSimulation(free_comm_config(replicas, 4000)).run()
    assert result.iteration_s.mean() == pytest.approx(MU * harmonic(replicas), rel=0.02)


@pytest.mark.parametrize("replicas, k", [(4, 1), (4, 2), (8, 4), (16, 12), (16, 16)])
def test_k_sync_gives_mu_times_harmonic_difference(replicas, k):
    result = SyncSimulation(free_comm_config(replicas, 4000, k_sync=k)).run()
    expected = MU * (harmonic(replicas) - harmonic(replicas - k))
    assert result.iteration_s.mean() == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("replicas", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("ratio", [0.3, 0.9, 1.5, 2.9, 3.2, 6.5, 7.2, 14.0, 16.0])
def test_speedup_exceeds_one_exactly_when_sync_over_compute_is_below_r_minus_1(replicas, ratio):
    compute_s = 0.1
    bandwidth = 10e9
    # Choose the gradient so that the ring all-reduce takes ratio * compute.
    unit = allreduce_time_s("ring", replicas, 1_000_000, 0.0, bandwidth)
    grad_bytes = int(round(1_000_000 * ratio * compute_s / unit))
    workload = from_preset("resnet50").with_grad_bytes(grad_bytes).with_compute(Constant(compute_s))
    config = SyncConfig(ClusterConfig(replicas, bandwidth, 0.0), workload, "ring", 3)
    summary = summarize(SyncSimulation(config).run(), baseline_iteration_s(config))
    t_sync = allreduce_time_s("ring", replicas, grad_bytes, 0.0, bandwidth)
    assert (summary["speedup"] > 1) == (t_sync / compute_s < replicas - 1)
    assert summary["speedup"] == pytest.approx(replicas * compute_s / (compute_s + t_sync))


def test_time_split_adds_up_to_the_iteration():
    workload = from_preset("resnet50").with_compute(Exponential(MU))
    config = SyncConfig(ClusterConfig(8, 10e9, 10e-6), workload, "ring", 200, seed=3)
    result = SyncSimulation(config).run()
    total = result.compute_s + result.exposed_comm_s + result.idle_s
    assert total == pytest.approx(result.iteration_s, rel=1e-9)
    assert (result.idle_s >= -1e-12).all() and (result.exposed_comm_s > 0).all()


def test_k_sync_parameter_server_stops_taking_pushes_once_it_has_k():
    """With K of R gradients the server moves on; pushes still in flight are dropped, not left
    running into the pull (which counted their time twice: negative idle)."""
    workload = from_preset("resnet50").with_grad_bytes(10_000_000).with_compute(Exponential(MU))
    config = SyncConfig(ClusterConfig(8, 1e9, 10e-6), workload, "ps", 50, seed=0, k_sync=2)
    result = SyncSimulation(config).run()
    total = result.compute_s + result.exposed_comm_s + result.idle_s
    assert total == pytest.approx(result.iteration_s, rel=1e-9)
    assert (result.idle_s >= -1e-12).all()
    # Eight pulls of 10 MB share the server's 1 Gbit/s NIC: 640 ms after the pushes. Waiting for
    # every gradient also waits for every push to cross that NIC (another 640 ms).
    everyone = SyncSimulation(SyncConfig(ClusterConfig(8, 1e9, 10e-6), workload, "ps", 50,
                                         seed=0)).run()
    assert 0.64 < result.iteration_s.mean() < everyone.iteration_s.mean()
    assert everyone.iteration_s.mean() > 1.28


@pytest.mark.parametrize("replicas, k_sync", [(1, None), (7, None), (7, 2), (16, 1)])
@pytest.mark.parametrize("compute", [Exponential(MU), Constant(0.05)])
@pytest.mark.parametrize("bucket_bytes", [None, 25_000_000])
def test_the_closed_form_run_is_the_processes_run_exactly(replicas, k_sync, compute, bucket_bytes):
    """The plain case runs without SimPy processes; run with them, every figure is the same
    (ties included: constant compute, K-sync with several buckets)."""
    workload = from_preset("resnet50").with_compute(compute)
    cluster = ClusterConfig(replicas, 10e9, 10e-6, None, 0.25, 3.0)
    config = SyncConfig(cluster, workload, "ring", 30, 5, k_sync, bucket_bytes)
    closed = SyncSimulation(config)
    assert closed.plain
    processes = SyncSimulation(config)
    processes.plain = False
    a, b = closed.run(), processes.run()
    for field in ("iteration_s", "compute_s", "exposed_comm_s", "idle_s", "comm_s"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


def test_k_sync_with_several_buckets_interrupts_each_straggler_once():
    workload = from_preset("resnet50").with_compute(Exponential(MU))
    config = SyncConfig(ClusterConfig(7, 10e9, 10e-6, cores=2), workload, "ring", 20, 1, 2,
                        25_000_000)
    result = SyncSimulation(config).run()  # cores: the processes run it
    assert (result.idle_s >= -1e-12).all() and len(result.iteration_s) == 20


def test_buckets_follow_backward_order_and_cover_the_gradient():
    workload = from_preset("resnet50")
    buckets = make_buckets(workload, 25_000_000)
    assert sum(b.grad_bytes for b in buckets) == workload.grad_bytes
    assert sum(b.backward_share for b in buckets) == pytest.approx(workload.backward_share)
    assert all(b.grad_bytes >= 25_000_000 for b in buckets[:-1])
    assert len(buckets) == 102_228_128 // 25_000_000
    # Backward runs from the output: the last layers (few FLOPs, many parameters) fill the first
    # bucket quickly; the compute-heavy early convolutions make the last bucket slow to fill.
    assert buckets[0].backward_share < buckets[-1].backward_share


def test_overlap_hides_communication_behind_backward():
    workload = from_preset("resnet50")
    cluster = ClusterConfig(16, 25e9, 10e-6)
    plain = SyncSimulation(SyncConfig(cluster, workload, "ring", 5, bucket_bytes=25_000_000)).run()
    overlapped = SyncSimulation(SyncConfig(cluster, workload, "ring", 5, bucket_bytes=25_000_000,
                                           overlap=True)).run()
    assert overlapped.comm_s.mean() == pytest.approx(plain.comm_s.mean())
    assert overlapped.iteration_s.mean() < plain.iteration_s.mean()
    assert overlapped.exposed_comm_s.mean() < plain.exposed_comm_s.mean()
    # Communication cannot end before the last bucket is produced and reduced.
    compute = workload.compute.mean_s
    last_bucket = make_buckets(workload, 25_000_000)[-1]
    tail = allreduce_time_s("ring", 16, last_bucket.grad_bytes, 10e-6, 25e9)
    assert overlapped.iteration_s.mean() >= compute + tail - 1e-12


def test_one_straggler_sets_the_pace():
    workload = from_preset("resnet50").with_grad_bytes(0).with_compute(Constant(0.1))
    cluster = ClusterConfig(8, straggler_fraction=0.125, straggler_factor=3.0)
    result = SyncSimulation(SyncConfig(cluster, workload, "ring", 4)).run()
    assert result.iteration_s == pytest.approx([0.3] * 4)
    assert result.idle_s.mean() == pytest.approx((7 * 0.2) / 8)


def test_without_a_run_the_one_replica_baseline_is_the_expected_compute():
    for seed in range(5):
        assert baseline_iteration_s(free_comm_config(2, 3, seed=seed)) == MU


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_the_one_replica_baseline_uses_the_runs_own_draws(replicas):
    # against the expected compute, 100 exponential draws once gave one replica a speedup of
    # 0.85x, and a few draws can give more than linear; with the run's own draws one replica is
    # exactly 1x and free communication never beats linear (a max is never below a mean)
    for seed in range(5):
        config = free_comm_config(replicas, 3, seed=seed)
        result = SyncSimulation(config).run()
        speedup = summarize(result, baseline_iteration_s(config, result))["speedup"]
        if replicas == 1:
            assert speedup == pytest.approx(1.0)
        else:
            assert 1.0 <= speedup <= replicas + 1e-9


@pytest.mark.parametrize("fraction", [0.125, 0.5, 0.6, 1.0])
def test_the_one_replica_baseline_is_never_a_straggler(fraction):
    # round(fraction x 1) makes the lone replica a straggler from half up; the baseline of
    # speedup is one replica at normal speed, whatever the fraction
    workload = from_preset("resnet50").with_grad_bytes(0).with_compute(Constant(0.1))
    cluster = ClusterConfig(8, straggler_fraction=fraction, straggler_factor=3.0)
    assert baseline_iteration_s(SyncConfig(cluster, workload, "ring", 4)) == pytest.approx(0.1)


@pytest.mark.parametrize("replicas, cores", [(4, 2), (8, 2), (6, 4), (3, 3)])
def test_replicas_sharing_cores_compute_slower(replicas, cores):
    workload = from_preset("resnet50").with_grad_bytes(0).with_compute(Constant(0.1))
    cluster = ClusterConfig(replicas, cores=cores)
    result = SyncSimulation(SyncConfig(cluster, workload, "ring", 3)).run()
    assert result.iteration_s.mean() == pytest.approx(0.1 * max(1.0, replicas / cores))


def test_a_parameter_servers_trace_shows_each_replicas_push_then_the_pull():
    # the push was counted in the replicas' communication but left out of the trace and the
    # timeline: each replica sat idle from its compute's end to the pull
    workload = from_preset("resnet50")
    trace = Trace()
    SyncSimulation(SyncConfig(ClusterConfig(2), workload, "ps", 2), trace=trace).run()
    spans = [e for e in trace.events if e["ph"] == "X"]
    for rank in (0, 1):
        own = sorted((e for e in spans if e["tid"] == rank), key=lambda e: e["ts"])
        assert [e["name"] for e in own] == ["compute", "push", "pull"] * 2
        for before, after in zip(own, own[1:]):  # back to back: no gap, no overlap
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"])


def test_a_parameter_servers_apply_holds_every_replica_between_push_and_pull():
    """Once the gradients are in, the server applies their average; the replicas wait for it
    (idle: neither computing nor communicating), then pull. The iteration is the network-only
    one plus the apply, exactly; one replica alone has no server and no apply."""
    workload = from_preset("resnet50").with_compute(Constant(0.05))
    cluster = ClusterConfig(4, 10e9, 10e-6)
    free = SyncSimulation(SyncConfig(cluster, workload, "ps", 5)).run()
    trace = Trace()
    applied = SyncSimulation(SyncConfig(cluster, workload, "ps", 5, ps_apply_s=0.015),
                             trace=trace).run()
    assert applied.iteration_s == pytest.approx(free.iteration_s + 0.015, rel=1e-12)
    assert applied.idle_s == pytest.approx(free.idle_s + 0.015, abs=1e-12)
    assert applied.comm_s == pytest.approx(free.comm_s, rel=1e-12)
    assert applied.exposed_comm_s == pytest.approx(free.exposed_comm_s, rel=1e-12)
    own = sorted((e for e in trace.events if e["ph"] == "X" and e["tid"] == 0),
                 key=lambda e: e["ts"])
    assert [e["name"] for e in own] == ["compute", "push", "server applies", "pull"] * 5
    alone = SyncConfig(cluster.with_replicas(1), workload, "ps", 5, ps_apply_s=0.015)
    assert SyncSimulation(alone).run().iteration_s == pytest.approx(0.05)


@pytest.mark.parametrize("algorithm, apply_s, named", [
    ("ps", -0.001, "must be >= 0 seconds"), ("ps", float("nan"), "must be >= 0 seconds"),
    ("ps", True, "must be >= 0 seconds"),  # a flag, not 1 s
    ("ring", 0.01, "an all-reduce has no server"),
])
def test_a_server_apply_time_is_checked(algorithm, apply_s, named):
    with pytest.raises(ValueError, match=named):
        SyncConfig(ClusterConfig(4), from_preset("resnet50"), algorithm, 2, ps_apply_s=apply_s)
    # numpy's numbers are real numbers too
    assert SyncConfig(ClusterConfig(4), from_preset("resnet50"), "ps", 2,
                      ps_apply_s=np.float32(0.01)).ps_apply_s == np.float32(0.01)


def test_same_seed_same_run_and_other_seed_other_run():
    runs = [SyncSimulation(free_comm_config(4, 50, seed=s)).run().iteration_s for s in (7, 7, 8)]
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_trace_has_one_track_per_replica_with_compute_and_communication():
    workload = from_preset("resnet50")
    trace = Trace()
    SyncSimulation(SyncConfig(ClusterConfig(4), workload, "ring", 3), trace=trace).run()
    spans = [e for e in trace.events if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1, 2, 3}
    assert len([e for e in spans if e["cat"] == "compute"]) == 12
    ring = [e for e in spans if e["cat"] == "communication"]
    assert len(ring) == 12
    # the ring's closed form on 4 replicas: 6 steps of 10 us and 2(p - 1)/p of the bytes at 10 Gbps
    expected_us = (6 * 10e-6 + 1.5 * 8 * workload.grad_bytes / 10e9) * 1e6
    assert ring[0]["dur"] == pytest.approx(expected_us)
