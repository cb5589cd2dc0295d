"""All-reduce algorithms as sequences of contention-free rounds (the alpha-beta, or Hockney, model).

In a round every rank sends at most one message and receives at most one, so on a non-blocking
switch with full-duplex NICs a round of messages of n bytes costs α + 8n/B (B in bits/s). An
algorithm is a function ``(p, n_bytes) -> [(rounds, bytes_per_message), ...]``; its time is the
sum over rounds. Closed forms (Thakur, Rabenseifner & Gropp, IJHPCA 2005; Patarasuk & Yuan,
JPDC 2009):

==================  ==========================================================================
ring                2(p−1) rounds of n/p: 2(p−1)α + 2(p−1)/p · n/B   (bandwidth-optimal)
naive-ring          p−1 rounds of n (whole buffer passed on, as the tutorial code): (p−1)(α + n/B)
tree                binomial-tree reduce, then broadcast: 2⌈lg p⌉ rounds of n: 2⌈lg p⌉(α + n/B)
halving-doubling    Rabenseifner: recursive-halving reduce-scatter (n/2, n/4, …, n/p) then
                    recursive-doubling all-gather; p a power of two: 2 lg p·α + 2(p−1)/p · n/B.
                    Otherwise, with p′ = 2^⌊lg p⌋, the p − p′ extra ranks first fold their whole
                    vector into a partner and get the result back at the end:
                    2 lg p′·α + 2(p′−1)/p′ · n/B + 2(α + n/B) (MPICH's scheme).
==================  ==========================================================================

``ps`` (parameter server) is not a round-based collective: its pushes contend at the server's NIC
and are simulated flow by flow in ``sync.py`` (through ``fairshare.py``).

Reduction arithmetic (γ in the papers) is not modelled: on a CPU it hides behind the network,
on GPUs it runs at memory bandwidth, both far faster than the links considered here.
"""

from __future__ import annotations

import math

Rounds = list[tuple[int, float]]


def ring(p: int, n_bytes: float) -> Rounds:
    return [(2 * (p - 1), n_bytes / p)] if p > 1 else []


def naive_ring(p: int, n_bytes: float) -> Rounds:
    return [(p - 1, n_bytes)] if p > 1 else []


def tree(p: int, n_bytes: float) -> Rounds:
    return [(2 * math.ceil(math.log2(p)), n_bytes)] if p > 1 else []


def halving_doubling(p: int, n_bytes: float) -> Rounds:
    if p == 1:
        return []
    power = 1 << (p.bit_length() - 1)
    halving = [(1, n_bytes / 2**k) for k in range(1, power.bit_length())]
    fold = [(1, n_bytes)] if power != p else []
    return fold + halving + halving[::-1] + fold


ALGORITHMS = {
    "ring": ring,
    "naive-ring": naive_ring,
    "tree": tree,
    "halving-doubling": halving_doubling,
}
PARAMETER_SERVER = "ps"
ALGORITHM_NAMES = (*ALGORITHMS, PARAMETER_SERVER)


def allreduce_time_s(algorithm: str, p: int, n_bytes: float, latency_s: float,
                     bandwidth_bps: float) -> float:
    """Seconds for an all-reduce of ``n_bytes`` over ``p`` ranks; 0 when there is nothing to send."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r} "
                         f"(known: {', '.join(ALGORITHM_NAMES)})")
    if n_bytes == 0:
        return 0.0
    return sum(count * (latency_s + 8.0 * size / bandwidth_bps)
               for count, size in ALGORITHMS[algorithm](p, n_bytes))


def bus_bandwidth_factor(p: int) -> float:
    """nccl-tests' busbw / algbw for all-reduce: 2(p−1)/p."""
    return 2.0 * (p - 1) / p
