"""The simulated sync iteration against the alpha-beta closed forms (REFERENCE.md, Thakur et al.)."""

import math

import pytest

from dsgd_sim import ClusterConfig, SyncConfig, SyncSimulation, from_preset
from dsgd_sim.collectives import RoundCosts, allreduce_time_s, reduction_sizes
from dsgd_sim.compute import Constant

COMPUTE_S = 0.05
CASES = [  # p, n bytes, alpha, bandwidth bits/s
    (2, 4_000_000, 5e-6, 10e9), (3, 1_000_000, 50e-6, 1e9), (4, 100_000_000, 1e-6, 100e9),
    (7, 12_345_678, 20e-6, 25e9), (8, 64_000_000, 10e-6, 10e9), (16, 25_000_000, 2e-6, 400e9),
    (64, 400_000_000, 30e-6, 100e6),
]


def closed_form(algorithm, p, n, alpha, bandwidth):
    beta_n = 8 * n / bandwidth  # n/B in seconds
    lg = math.log2(p)
    return {
        "ring": 2 * (p - 1) * alpha + 2 * (p - 1) / p * beta_n,
        "naive-ring": (p - 1) * (alpha + beta_n),
        "tree": 2 * math.ceil(lg) * (alpha + beta_n),
        "halving-doubling": 2 * lg * alpha + 2 * (p - 1) / p * beta_n,
        "ps": 2 * alpha + 2 * max(beta_n, p * beta_n),  # server NIC as fast as a worker's
    }[algorithm]


def simulated_iteration_s(algorithm, p, n, alpha, bandwidth, **cluster):
    workload = from_preset("resnet50").with_grad_bytes(n).with_compute(Constant(COMPUTE_S))
    config = SyncConfig(ClusterConfig(p, bandwidth, alpha, **cluster), workload, algorithm,
                        iterations=3)
    result = SyncSimulation(config).run()
    assert result.iteration_s.max() == pytest.approx(result.iteration_s.min(), rel=1e-12)
    return float(result.iteration_s.mean())


@pytest.mark.parametrize("algorithm", ["ring", "naive-ring", "tree", "ps"])
@pytest.mark.parametrize("p, n, alpha, bandwidth", CASES)
def test_sync_iteration_matches_closed_form(algorithm, p, n, alpha, bandwidth):
    expected = COMPUTE_S + closed_form(algorithm, p, n, alpha, bandwidth)
    # tight: at these sizes the latency terms are under 1e-3 of the total
    assert simulated_iteration_s(algorithm, p, n, alpha, bandwidth) == pytest.approx(expected,
                                                                                     rel=1e-12)


@pytest.mark.parametrize("p, n, alpha, bandwidth",
                         [c for c in CASES if c[0] & (c[0] - 1) == 0])
def test_halving_doubling_matches_closed_form_for_powers_of_two(p, n, alpha, bandwidth):
    expected = COMPUTE_S + closed_form("halving-doubling", p, n, alpha, bandwidth)
    assert simulated_iteration_s("halving-doubling", p, n, alpha, bandwidth) == \
        pytest.approx(expected, rel=1e-12)


def test_halving_doubling_pays_two_extra_full_messages_when_p_is_not_a_power_of_two():
    p, n, alpha, bandwidth = 6, 10_000_000, 10e-6, 10e9
    expected = closed_form("halving-doubling", 4, n, alpha, bandwidth) + \
        2 * (alpha + 8 * n / bandwidth)
    assert allreduce_time_s("halving-doubling", p, n, alpha, bandwidth) == pytest.approx(expected)


def test_parameter_server_incast_is_limited_by_the_server_nic():
    p, n, alpha = 8, 10_000_000, 0.0
    worker, server = 10e9, 40e9  # 4 workers' worth: the server NIC is still the bottleneck
    expected = COMPUTE_S + 2 * max(8 * n / worker, p * 8 * n / server)
    got = simulated_iteration_s("ps", p, n, alpha, worker, ps_bandwidth_bps=server)
    assert got == pytest.approx(expected, rel=1e-6)


def test_parameter_server_with_a_fat_nic_is_limited_by_the_workers_links():
    p, n, worker = 8, 10_000_000, 10e9
    expected = COMPUTE_S + 2 * 8 * n / worker
    got = simulated_iteration_s("ps", p, n, 0.0, worker, ps_bandwidth_bps=100e9)
    assert got == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("algorithm", ["ring", "naive-ring", "tree", "halving-doubling", "ps"])
def test_one_replica_communicates_nothing(algorithm):
    workload = from_preset("vgg16").with_compute(Constant(COMPUTE_S))
    config = SyncConfig(ClusterConfig(1, 1e6, 1e-3), workload, algorithm, iterations=5)
    result = SyncSimulation(config).run()
    assert result.comm_s.sum() == 0
    assert result.iteration_s == pytest.approx([COMPUTE_S] * 5)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "ps"])
def test_zero_gradient_bytes_means_free_communication(algorithm):
    zero_bytes = simulated_iteration_s(algorithm, 8, 0, 1e-3, 1e9)
    assert zero_bytes == pytest.approx(COMPUTE_S, rel=1e-12)


# -- measured rounds instead of alpha-beta ----------------------------------------------------------
def test_round_costs_interpolate_between_sizes_clamp_below_and_extend_the_last_slope_above():
    costs = RoundCosts.from_rows([{"bytes": 4000, "first_s": 4.0, "next_s": 5.0},
                                  {"bytes": 1000, "first_s": 1.0, "next_s": 1.5},
                                  {"bytes": 2000, "first_s": 2.0, "next_s": 2.5}])
    assert costs.sizes_bytes == (1000, 2000, 4000)  # rows sorted by size
    assert costs.first_round_s(1500) == pytest.approx(1.5)
    assert costs.next_round_s(3000) == pytest.approx(3.75)
    assert costs.first_round_s(10) == 1.0  # below the grid: the smallest message's cost
    assert costs.next_round_s(8000) == pytest.approx(5.0 + 2.5 / 2000 * 4000)  # last slope
    # a table whose smallest size measured slowest: no larger size costs less than it
    dipping = RoundCosts((1e3, 1e4, 1e5), (3e-4, 1e-4, 5e-4), (3e-4, 1e-4, 5e-4))
    assert dipping.next_round_s(1e4) == 3e-4 and dipping.next_round_s(5e4) == 3e-4
    assert dipping.next_round_s(1e5) == pytest.approx(5e-4)


def test_allreduce_with_round_costs_charges_the_first_round_as_measured_idle_and_the_rest_back_to_back():
    costs = RoundCosts((1000.0, 2000.0), (1.0, 2.0), (1.5, 3.0))
    # ring, p = 4, 8000 bytes: 6 rounds of 2000 bytes; alpha and B are not used
    assert allreduce_time_s("ring", 4, 8000, 1.0, 1.0, round_costs=costs) == pytest.approx(2.0 + 5 * 3.0)
    assert allreduce_time_s("naive-ring", 2, 1000, 1.0, 1.0, round_costs=costs) == pytest.approx(1.0)
    assert allreduce_time_s("ring", 4, 0, 1.0, 1.0, round_costs=costs) == 0.0


def test_simulated_sync_iteration_uses_the_clusters_round_costs():
    costs = RoundCosts((1000.0, 1e9), (0.010, 1.0), (0.020, 2.0))
    workload = from_preset("resnet50").with_compute(Constant(COMPUTE_S))
    plain = ClusterConfig(replicas=4, bandwidth_bps=10e9, latency_s=5e-6)
    measured = ClusterConfig(replicas=4, bandwidth_bps=10e9, latency_s=5e-6, round_costs=costs)
    # 6 rounds of a quarter of the gradient, each cost interpolated linearly in size between
    # the table's two rows: the first round idle, the 5 after it back to back
    share = (workload.grad_bytes / 4 - 1000.0) / (1e9 - 1000.0)
    want = COMPUTE_S + (0.010 + share * 0.990) + 5 * (0.020 + share * 1.980)
    got = SyncSimulation(SyncConfig(measured, workload, iterations=3)).run().iteration_s
    assert got == pytest.approx([want] * 3)
    assert SyncSimulation(SyncConfig(plain, workload, iterations=3)).run().iteration_s[0] < want


def test_reduction_sizes_are_what_each_algorithm_adds_between_its_rounds():
    assert reduction_sizes("ring", 4, 8000) == [2000, 2000, 2000]  # reduce-scatter only
    assert reduction_sizes("naive-ring", 3, 8000) == [8000, 8000]
    assert reduction_sizes("tree", 5, 8000) == [8000] * 3  # reduce phase, ceil(lg 5) levels
    assert reduction_sizes("halving-doubling", 4, 8000) == [4000, 2000]
    assert reduction_sizes("halving-doubling", 6, 8000) == [8000, 4000, 2000]  # fold, then halve
    assert reduction_sizes("ring", 1, 8000) == [] and reduction_sizes("ring", 4, 0) == []
    with pytest.raises(ValueError, match="unknown"):
        reduction_sizes("ps", 4, 8000)


def test_round_costs_carry_measured_reductions_and_cost_nothing_without_them():
    rows = [{"bytes": 1000, "first_s": 1.0, "next_s": 1.5, "reduce_s": 0.1},
            {"bytes": 3000, "first_s": 2.0, "next_s": 2.5, "reduce_s": 0.3}]
    costs = RoundCosts.from_rows(rows)
    assert costs.reduce_time_s([2000, 2000, 1000]) == pytest.approx(0.2 + 0.2 + 0.1)
    assert costs.as_rows() == rows
    assert RoundCosts.from_rows([rows[0], {k: v for k, v in rows[1].items() if k != "reduce_s"}]
                                ).reduce_time_s([2000]) == 0.0  # a column only if every row has it
    with pytest.raises(ValueError, match="2 sizes but 1 reduce"):
        RoundCosts((1000.0, 2000.0), (1.0, 2.0), (1.0, 2.0), reduce_s=(0.1,))
    with pytest.raises(ValueError, match="from 0 to"):
        RoundCosts((1000.0, 2000.0), (1.0, 2.0), (1.0, 2.0), reduce_s=(0.1, -0.1))


@pytest.mark.parametrize("rows,message", [
    ([{"bytes": 1000, "first_s": 1.0, "next_s": 1.0}], "at least 2 sizes"),
    ([{"bytes": 1000, "first_s": 1.0, "next_s": 1.0}, {"bytes": 1000, "first_s": 2, "next_s": 2}],
     "increasing"),
    ([{"bytes": 1000, "first_s": 1.0, "next_s": 1.0}, {"bytes": 2000, "first_s": 0, "next_s": 2}],
     "positive seconds"),
    ([{"bytes": 1000, "first_s": 1.0}, {"bytes": 2000, "first_s": 2, "next_s": 2}], "next_s"),
])
def test_round_costs_reject_bad_tables_naming_the_problem(rows, message):
    with pytest.raises(ValueError, match=message):
        RoundCosts.from_rows(rows)
