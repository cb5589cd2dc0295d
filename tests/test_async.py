"""Asynchronous parameter-server engine: renewal rate, geometric staleness, NIC and server bounds,
bounded staleness, shards, traces, and the command line in async mode."""

import json
import math

import numpy as np
import pytest

from dsgd_sim import ClusterConfig, from_preset
from dsgd_sim.cli import main
from dsgd_sim.compute import Constant, Exponential
from dsgd_sim.parameter_server import AsyncConfig, AsyncSimulation, timed_rate
from dsgd_sim.trace import Trace

MU = 0.08


def free_comm(replicas, updates, seed=1, **options):
    workload = from_preset("resnet50").with_grad_bytes(0).with_compute(Exponential(MU))
    return AsyncConfig(ClusterConfig(replicas, latency_s=0.0), workload, updates, seed, **options)


def steady_rate(result):
    """Updates per second over the second half of the run (start-up transient left out)."""
    ends = result.update_end_s
    half = len(ends) // 2
    return (len(ends) - half) / (ends[-1] - ends[half - 1])


@pytest.mark.parametrize("replicas", [2, 4, 8, 16, 32])
def test_exponential_compute_gives_r_over_mu_updates_per_s(replicas):
    result = AsyncSimulation(free_comm(replicas, 20_000)).run()
    assert result.updates_per_s == pytest.approx(replicas / MU, rel=0.03)


@pytest.mark.parametrize("replicas", [2, 4, 8, 16, 32])
def test_exponential_compute_gives_mean_staleness_r_minus_1(replicas):
    result = AsyncSimulation(free_comm(replicas, 20_000, seed=2)).run()
    assert result.staleness.mean() == pytest.approx(replicas - 1, rel=0.03)


@pytest.mark.parametrize("replicas", [4, 16])
def test_staleness_is_geometric_as_memorylessness_predicts(replicas):
    # Others update at (R-1)/mu while this worker computes an Exp(mu): P(s = k) = p (1-p)^k, p = 1/R.
    result = AsyncSimulation(free_comm(replicas, 40_000, seed=3)).run()
    counts = np.bincount(result.staleness)
    p = 1.0 / replicas
    for k in range(4):
        assert counts[k] / counts.sum() == pytest.approx(p * (1 - p) ** k, abs=0.01)


NIC_CASES = [  # replicas, servers, worker bps, server bps, compute s
    (8, 1, 10e9, 10e9, 0.01), (32, 1, 10e9, 10e9, 0.05), (16, 4, 10e9, 10e9, 0.01),
    (64, 1, 1e9, 10e9, 0.01), (16, 1, 10e9, 40e9, 0.0), (24, 3, 25e9, 10e9, 0.02),
]


@pytest.mark.parametrize("replicas, servers, worker_bps, server_bps, compute_s", NIC_CASES)
def test_server_nic_bound_gives_bandwidth_over_bytes_per_update(replicas, servers, worker_bps,
                                                               server_bps, compute_s):
    grad_bytes = 10_000_000
    workload = from_preset("resnet50").with_grad_bytes(grad_bytes).with_compute(Constant(compute_s))
    cluster = ClusterConfig(replicas, worker_bps, 0.0, server_bps)
    config = AsyncConfig(cluster, workload, 3000, servers=servers, service_time_s=0.0)
    result = AsyncSimulation(config).run()
    # Each update moves grad_bytes / servers through every server NIC, in each direction.
    bound = server_bps / 8 / (grad_bytes / servers)
    assert steady_rate(result) == pytest.approx(bound, rel=1e-6)
    assert result.updates_per_s == pytest.approx(bound, rel=0.01)


def test_server_apply_time_bounds_updates_per_s():
    config = free_comm(16, 2000, service_time_s=0.02)
    assert steady_rate(AsyncSimulation(config).run()) == pytest.approx(1 / 0.02, rel=1e-6)


def test_default_service_time_reads_and_writes_three_shard_sizes_at_memory_bandwidth():
    config = AsyncConfig(ClusterConfig(4), from_preset("resnet50").with_grad_bytes(10_000_000),
                         servers=4, server_memory_Bps=10e9)
    assert config.shard_bytes == 2_500_000
    assert config.service_s == pytest.approx(3 * 2_500_000 / 10e9)


def test_one_worker_has_no_staleness_and_pays_compute_push_apply_reply():
    compute, grad_bytes, alpha, bandwidth, service = 0.05, 4_000_000, 1e-4, 10e9, 0.003
    workload = from_preset("resnet50").with_grad_bytes(grad_bytes).with_compute(Constant(compute))
    config = AsyncConfig(ClusterConfig(1, bandwidth, alpha), workload, 20, service_time_s=service)
    result = AsyncSimulation(config).run()
    cycle = compute + 2 * (alpha + 8 * grad_bytes / bandwidth) + service
    assert not result.staleness.any()
    # Update k is applied after k+1 computes and pushes and k replies.
    expected = [(k + 1) * cycle - (alpha + 8 * grad_bytes / bandwidth) for k in range(20)]
    assert result.update_end_s == pytest.approx(expected, rel=1e-9)
    assert config.single_worker_update_s() == pytest.approx(cycle)
    # the baseline is that worker at normal speed, even where stragglers are most of the cluster
    slowed = ClusterConfig(16, bandwidth, alpha, straggler_fraction=0.6, straggler_factor=10.0)
    assert AsyncConfig(slowed, workload, 20, service_time_s=service).single_worker_update_s() \
        == pytest.approx(cycle)


@pytest.mark.parametrize("seed", range(4))
def test_one_worker_of_random_compute_has_a_speedup_of_exactly_one(seed):
    # against the expected compute, a run's own 100 exponential draws once gave one worker 0.946x
    from dsgd_sim.report import summarize_async
    workload = from_preset("resnet50").with_grad_bytes(1_000_000).with_compute(Exponential(0.08))
    config = AsyncConfig(ClusterConfig(1, 10e9, 1e-4), workload, 100, seed=seed,
                         service_time_s=0.003)
    summary = summarize_async(AsyncSimulation(config).run())
    assert summary["speedup"] == pytest.approx(1.0)
    assert summary["single_worker_update_time_s"] != pytest.approx(
        config.single_worker_update_s(), rel=1e-6)  # the draws, not the expectation


@pytest.mark.parametrize("bound", [2, 8])
def test_a_staleness_bound_leaves_the_speedups_baseline_at_one_workers_whole_compute(bound):
    # the baseline took the applied updates' draws alone, which the bound leaves short (it
    # drops the long ones): 16 workers with free communication at bound 2 came out 1.57x where
    # their rate over one worker's mean compute is 6.1x
    from dsgd_sim.report import summarize_async
    result = AsyncSimulation(free_comm(16, 4000, max_staleness=bound,
                                       service_time_s=0.0)).run()
    summary = summarize_async(result)
    assert result.dropped > 0
    assert summary["single_worker_update_time_s"] == pytest.approx(MU, rel=0.05)
    assert summary["speedup"] == pytest.approx(summary["updates_per_s"] * MU, rel=0.05)


@pytest.mark.parametrize("bound", [0, 1, 4])
def test_max_staleness_bounds_every_applied_update(bound):
    unbounded = AsyncSimulation(free_comm(16, 3000)).run()
    assert unbounded.staleness.max() > bound  # the bound has something to do
    result = AsyncSimulation(free_comm(16, 3000, max_staleness=bound)).run()
    assert len(result.staleness) == 3000
    assert result.staleness.max() <= bound
    assert result.dropped > 0 and result.dropped_compute_s > 0


def test_zero_staleness_applies_only_gradients_of_the_newest_weights():
    trace = Trace()
    result = AsyncSimulation(free_comm(8, 500, max_staleness=0), trace=trace,
                             trace_updates=500).run()
    assert not result.staleness.any()
    # Replay the server: a gradient is applied only if no other update landed since its pull.
    applied = [e for e in trace.events if e.get("name") == "apply"]
    assert all(e["args"]["staleness"] == 0 for e in applied)
    assert any(e.get("name") == "drop (too stale)" for e in trace.events)


def test_bounded_staleness_costs_throughput_in_dropped_work():
    free = AsyncSimulation(free_comm(16, 3000)).run()
    bounded = AsyncSimulation(free_comm(16, 3000, max_staleness=2)).run()
    assert bounded.updates_per_s < free.updates_per_s
    assert free.dropped == 0


def test_shards_relieve_the_incast_bottleneck():
    workload = from_preset("resnet50").with_grad_bytes(50_000_000).with_compute(Constant(0.05))
    rates = [AsyncSimulation(AsyncConfig(ClusterConfig(16), workload, 500, servers=s)).run()
             .updates_per_s for s in (1, 2, 4)]
    assert rates[0] < rates[1] < rates[2]


def test_same_seed_same_run_and_other_seed_other_run():
    runs = [AsyncSimulation(free_comm(4, 300, seed=s)).run() for s in (5, 5, 6)]
    assert np.array_equal(runs[0].update_end_s, runs[1].update_end_s)
    assert not np.array_equal(runs[0].update_end_s, runs[2].update_end_s)


def test_trace_numbers_tracks_as_a_real_job_server_0_and_workers_after_it():
    trace = Trace()
    AsyncSimulation(AsyncConfig(ClusterConfig(3), from_preset("resnet50"), 9), trace=trace).run()
    spans = [e for e in trace.events if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {0, 1, 2, 3}
    assert [e["name"] for e in spans if e["tid"] == 0].count("apply") == 9
    for worker_track in (1, 2, 3):
        assert {e["name"] for e in spans if e["tid"] == worker_track} >= {"compute", "push",
                                                                          "reply"}


@pytest.mark.parametrize("options, message", [
    ({"servers": 0}, "servers"), ({"max_staleness": -1}, "staleness"),
    ({"servers": 3}, "3 servers for 2 parameters"), ({"service_time_s": -1.0}, "service"),
    ({"notice_queue_s": -0.001}, "notice queue"), ({"notice_queue_s": math.inf}, "notice queue"),
    ({"notice_queue_s": 0.005, "fair_server_nic": True}, "in-order server NIC"),
    ({"header_look_s": -0.001}, "header look"), ({"header_look_s": math.nan}, "header look"),
])
def test_config_rejects_bad_values(options, message):
    workload = from_preset("resnet50").with_grad_bytes(8)
    with pytest.raises(ValueError, match=message):
        AsyncConfig(ClusterConfig(2), workload, 10, **options)


# -- command line -------------------------------------------------------------------------------

ASYNC_KEYS = {"updates_per_s", "speedup", "staleness_mean", "staleness_p50", "staleness_p99",
              "staleness_max", "staleness_hist"}


def test_default_run_shows_sync_and_async_side_by_side_with_a_verdict(capsys):
    assert main(["--replicas", "16", "--bandwidth", "10Gbps"]) == 0
    out = capsys.readouterr().out
    assert "sync (ring)" in out and "async (parameter server)" in out
    verdict = [line for line in out.splitlines() if line.startswith("verdict:")]
    # 100 Gbit/s of ResNet-50 gradients through one 10 Gbit/s server NIC: sync wins here.
    assert len(verdict) == 1 and verdict[0].startswith("verdict: sync finishes")


def test_a_tie_is_called_a_tie(capsys):
    # free communication and constant compute: both take the same time; "1x sooner" said nothing
    assert main(["--params", "0", "--compute", "80ms", "--iterations", "5"]) == 0
    verdict = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("verdict:")]
    assert verdict[0].startswith("verdict: sync and async finish") and "together" in verdict[0]
    assert "sooner" not in verdict[0]


def test_async_json_has_the_documented_keys(tmp_path):
    out = tmp_path / "run.json"
    assert main(["--mode", "async", "--replicas", "8", "--iterations", "400", "--servers", "2",
                 "--max-staleness", "5", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert "sync" not in data and ASYNC_KEYS <= data["async"].keys()
    asyn = data["async"]
    assert sum(asyn["staleness_hist"]) == asyn["updates"] == 400
    assert asyn["staleness_max"] <= 5 and len(asyn["staleness_hist"]) == asyn["staleness_max"] + 1
    assert data["config"]["servers"] == 2 and data["config"]["max_staleness"] == 5


@pytest.mark.parametrize("updates, timed", [(40, True), (16, False)])
def test_the_rate_leaves_out_the_first_round_as_a_real_server_counts(updates, timed, tmp_path,
                                                                     capsys):
    out = tmp_path / "run.json"
    assert main(["--mode", "async", "--replicas", "8", "--iterations", str(updates),
                 "--compute", "exp:50ms", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    asyn = json.loads(out.read_text())["async"]
    ends = AsyncSimulation(AsyncConfig(ClusterConfig(8), from_preset("resnet50").with_compute(
        Exponential(0.05)), updates)).run().update_end_s
    if timed:  # 8 workers: the first 8 updates are the start-up
        assert asyn["warmup_updates"] == 8 and asyn["warmup_s"] == pytest.approx(ends[7])
        assert asyn["updates_per_s"] == pytest.approx(32 / (ends[-1] - ends[7]))
        assert "after the first 8 (start-up)" in text and "note:" not in text
    else:  # 16 updates leave no round after the first: the whole run, and a note says so
        assert asyn["warmup_updates"] == 0
        assert asyn["updates_per_s"] == pytest.approx(16 / ends[-1])
        assert "note: 16 updates leave no round of 8 workers" in text


@pytest.mark.parametrize("updates", [129, 130, 2049])
def test_bursts_of_updates_cut_short_by_the_run_do_not_lower_the_rate(updates, tmp_path):
    # 64 workers of equal compute, free communication and an apply that takes no time: each
    # round's 64 updates land at one instant, and the run stops inside a burst; counting the
    # stub of that burst over a whole round halved the rate (412.5/s at 130 updates)
    out = tmp_path / "run.json"
    assert main(["--mode", "async", "--replicas", "64", "--grad-bytes", "0", "--latency", "0",
                 "--compute", "const:80ms", "--ps-service-time", "0", "--iterations",
                 str(updates), "--json", str(out)]) == 0
    asyn = json.loads(out.read_text())["async"]
    assert asyn["updates_per_s"] == pytest.approx(64 / 0.08)
    assert asyn["speedup"] == pytest.approx(64)


def test_a_rate_over_distinct_instants_counts_every_update_after_the_start_up():
    # no two updates at one instant: the last update ends the window, as a real server counts
    assert timed_rate([1.0, 2.0, 3.0, 4.5, 6.0], 2) == (2, 2.0, 3 / 4.0)
    # a burst at the start's instant began before the window; the cut burst at the end is left out
    assert timed_rate([1.0, 1.0, 2.0, 2.0, 3.0], 2) == (2, 1.0, 2 / 1.0)
    # one instant after the start-up: nothing earlier to end at, so the whole burst counts
    assert timed_rate([1.0, 1.0, 2.0, 2.0], 2, 1) == (1, 1.0, 2 / 1.0)


def test_a_sweep_marks_the_worker_counts_too_many_for_its_updates(capsys):
    assert main(["--mode", "async", "--replicas", "2,8", "--iterations", "16"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    marked = {row[0]: row[-1] == "*" for row in rows if row and row[0] in ("2", "8")}
    assert marked == {"2": False, "8": True}  # 16 updates leave a round of 2 after the first


def test_both_mode_applies_as_many_async_gradients_as_sync_uses(tmp_path):
    out = tmp_path / "run.json"
    assert main(["--replicas", "4", "--iterations", "10", "--k-sync", "3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["async"]["updates"] == 30 and data["verdict"].startswith("verdict:")
    assert data["sync"]["iteration_time_s"] > 0


def test_replay_maps_each_mode_to_loss_points(tmp_path):
    out = tmp_path / "run.json"
    assert main(["--replicas", "4", "--iterations", "20", "--compute", "exp:50ms", "--replay",
                 "--plot", str(tmp_path / "p.png"), "--json", str(out)]) == 0
    curves = json.loads(out.read_text())["convergence"]
    assert set(curves) == {"sync", "k-sync", "async"}
    for points in curves.values():
        assert points[0]["time_s"] == 0 and points[0]["loss"] == pytest.approx(np.log(2))
        assert all(a["time_s"] <= b["time_s"] for a, b in zip(points, points[1:]))
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_trace_holds_sync_and_async_as_two_processes(tmp_path):
    path = tmp_path / "t.json"
    assert main(["--replicas", "2", "--iterations", "3", "--trace", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    assert any(e.get("name") == "apply" for e in events)


@pytest.mark.parametrize("args, named", [
    (["--max-staleness", "-1"], "'-1'"), (["--max-staleness", "1.5"], "'1.5'"),
    (["--servers", "0"], "'0'"), (["--servers", "1000", "--grad-bytes", "400B"], "1000 servers"),
    (["--mode", "fast"], "'fast'"), (["--lr", "-1"], "'-1'"),
    (["--ps-service-time", "5"], "'5'"), (["--ps-memory-bandwidth", "0GB/s"], "0"),
    (["--ps-notice-queue", "-1ms"], "'-1ms'"),
    (["--ps-notice-queue", "5ms", "--mode", "sync"], "--ps-notice-queue applies to the async"),
])
def test_bad_async_input_gives_one_line_and_status_2(args, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--iterations", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dsgd_sim: error:") and named in err


def test_a_server_taking_one_push_at_a_time_is_held_to_a_workers_rate_however_fast_its_link():
    grad_bytes, rate = 1_000_000, 100e6
    workload = from_preset("resnet50").with_grad_bytes(grad_bytes).with_compute(Constant(0.0))
    cluster = ClusterConfig(replicas=4, bandwidth_bps=rate, latency_s=0.0, ps_bandwidth_bps=4 * rate)

    def per_update_s(one_push_at_a_time):
        ends = AsyncSimulation(AsyncConfig(cluster, workload, updates=200, service_time_s=0.0,
                                           one_push_at_a_time=one_push_at_a_time)).run().update_end_s
        return (ends[-1] - ends[99]) / 100

    push_s = 8 * grad_bytes / rate
    assert per_update_s(True) == pytest.approx(push_s, rel=1e-6)  # pushes in turn, each at B
    # four pushes at once through a 4B link: a worker's push-then-pull cycle (2n/B) is the bound
    assert per_update_s(False) == pytest.approx(2 * push_s / 4, rel=1e-6)


def test_a_fair_server_nic_ends_equal_pushes_together_so_push_and_reply_phases_alternate():
    grad_bytes, rate = 1_000_000, 100e6
    workload = from_preset("resnet50").with_grad_bytes(grad_bytes).with_compute(Constant(0.0))
    cluster = ClusterConfig(replicas=4, bandwidth_bps=rate, latency_s=0.0)

    def per_update_s(fair):
        ends = AsyncSimulation(AsyncConfig(cluster, workload, updates=200, service_time_s=0.0,
                                           fair_server_nic=fair)).run().update_end_s
        return (ends[-1] - ends[99]) / 100

    push_s = 8 * grad_bytes / rate
    assert per_update_s(False) == pytest.approx(push_s, rel=1e-6)  # in order: the link always busy
    # fairly: four pushes end together, then four replies; each link idles half the time
    assert per_update_s(True) == pytest.approx(2 * push_s, rel=1e-6)


def half_run(compute, workers=2, updates=400, **options):
    """Seconds per update after the first half, and the result: 1 MB gradients over 200 Mbit/s
    links, no latency, applied at once unless ``options`` (``AsyncConfig``'s) say otherwise."""
    workload = from_preset("resnet50").with_grad_bytes(1_000_000).with_compute(compute)
    cluster = ClusterConfig(replicas=workers, bandwidth_bps=200e6, latency_s=0.0)
    result = AsyncSimulation(AsyncConfig(cluster, workload, updates=updates,
                                         **{"service_time_s": 0.0, **options})).run()
    ends = result.update_end_s
    return (ends[-1] - ends[updates // 2 - 1]) / (updates // 2), result


def notice_run(notice_queue_s, compute, workers=2, updates=400):
    return half_run(compute, workers, updates, notice_queue_s=notice_queue_s)


def test_a_push_whose_notice_meets_a_reply_waits_the_queue_and_the_workers_settle_there():
    from dsgd_sim.compute import Normal
    push_s, compute = 0.04, Normal(0.05, 0.0002)
    serial_s = (0.05 + 2 * push_s) / 2  # two workers, each computing, pushing, taking its reply
    without, _ = notice_run(0.0, compute)
    assert without == pytest.approx(serial_s, rel=0.005)
    # A push begun while the other worker's reply leaves waits 6 ms for its notice; the waits
    # push the workers apart until every push meets the other's reply, each 6 ms longer.
    with_queue, _ = notice_run(0.006, compute)
    assert with_queue == pytest.approx(serial_s + 0.006 / 2, rel=0.005)


def test_a_notice_never_waits_longer_than_what_the_server_still_has_to_send():
    # One worker: no other reply is ever leaving when it pushes, so the notice never waits.
    one = [notice_run(q, Constant(0.05), workers=1, updates=50)[0] for q in (0.0, 0.5)]
    assert one[1] == pytest.approx(one[0])
    # Two workers, a notice queue far longer than a reply: a push waits only for what is left
    # of the other's reply. That worker pushed (40 ms) and took its reply while this one
    # computed (50 ms), so 2 * 40 - 50 = 30 ms of its reply is left, whatever the queue.
    push_s, serial_s = 0.04, (0.05 + 2 * 0.04) / 2
    for queue_s in (0.5, 5.0):
        assert notice_run(queue_s, Constant(0.05))[0] == pytest.approx(
            serial_s + (2 * push_s - 0.05) / 2, rel=1e-9)


def look_run(look_s, compute, workers, updates=400):
    """``half_run`` with 1 ms to apply a gradient, the server looking ``look_s`` for another
    header before it applies."""
    return half_run(compute, workers, updates, service_time_s=0.001, header_look_s=look_s)[0]


def test_an_idle_server_looks_in_vain_for_a_header_only_while_the_other_workers_compute():
    push_s = 0.04
    # 2 workers computing 50 ms: when a gradient is in, the other worker is still computing,
    # so every update waits the whole look before its apply
    turn_s = 0.05 + 2 * push_s + 0.001
    assert look_run(0.0, Constant(0.05), 2) == pytest.approx(turn_s / 2, rel=0.005)
    assert look_run(0.002, Constant(0.05), 2) == pytest.approx((turn_s + 0.002) / 2, rel=0.005)
    # a lone worker: no other header to look for
    assert look_run(0.002, Constant(0.05), 1, 50) == pytest.approx(turn_s, rel=1e-6)
    # 4 workers that never compute: another push is always waiting, so the look finds a header
    assert look_run(0.002, Constant(0.0), 4) == look_run(0.0, Constant(0.0), 4)


def test_the_notice_queue_is_in_the_json_and_the_header(tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["--mode", "async", "--replicas", "2", "--grad-bytes", "1MB", "--compute",
                 "normal:50ms,0.2ms", "--bandwidth", "200Mbps", "--iterations", "100",
                 "--ps-notice-queue", "6ms", "--json", str(path)]) == 0
    assert "notice queue 6 ms" in capsys.readouterr().out
    assert json.loads(path.read_text())["config"]["ps_notice_queue_s"] == pytest.approx(0.006)
