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

Reduction arithmetic (γ in the papers) is left out of the α-β time: on GPUs it runs at memory
bandwidth, far faster than the links considered here, and a library's pipelined ring (NCCL's,
Gloo's) overlaps it with the transfers. A ring that reduces between its rounds pays it in full:
:func:`reduction_sizes` lists what each algorithm adds after a round, and measured rounds may carry
what that costs (``RoundCosts.reduce_s``).

**Measured rounds instead of α and B.** Where a cluster's rounds have been timed (every rank
sending one message to its right neighbour and receiving one from its left, chains of rounds
back to back, at a grid of sizes: ``experiments/ring_probe.py``), :class:`RoundCosts` replaces
α + 8n/B: a collective's first round costs what a first round of its size measured (it starts
after the others' barrier, with the network idle), every later round what a round measured back
to back, both interpolated between the measured sizes. What the table holds that α-β lacks is
whatever a real round pays: a transport's start-up, a shaper's bucket, several ranks' wake-ups
on shared cores.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

from .argparse_oneline import MAX_INPUT_BYTES, read_json

Rounds = list[tuple[int, float]]
MAX_ROUND_S = 1e6  # a measured round longer than 11 days is a typo, not a measurement
MAX_ROUND_BYTES = 1e15  # ... and so is a round of more than a petabyte


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


def reduction_sizes(algorithm: str, p: int, n_bytes: float) -> list[float]:
    """Bytes each rank adds into its buffer after a round, round by round, for an algorithm that
    reduces between rounds (the reduce phases; gathers and broadcasts only copy)."""
    if p == 1 or n_bytes == 0:
        return []
    if algorithm == "ring":
        return [n_bytes / p] * (p - 1)
    if algorithm == "naive-ring":
        return [n_bytes] * (p - 1)
    if algorithm == "tree":
        return [n_bytes] * math.ceil(math.log2(p))
    if algorithm == "halving-doubling":
        power = 1 << (p.bit_length() - 1)
        fold = [n_bytes] if power != p else []
        return fold + [n_bytes / 2**k for k in range(1, power.bit_length())]
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")


ALGORITHMS = {
    "ring": ring,
    "naive-ring": naive_ring,
    "tree": tree,
    "halving-doubling": halving_doubling,
}
PARAMETER_SERVER = "ps"
ALGORITHM_NAMES = (*ALGORITHMS, PARAMETER_SERVER)


@dataclass(frozen=True)
class RoundCosts:
    """Measured seconds of one round (each rank sends ``bytes`` to one peer and receives as much)
    at increasing sizes: ``first_s`` for a round started on an idle network, ``next_s`` for one
    that follows another back to back; optionally ``reduce_s``, at the same sizes, for a rank to
    add what a round brought into its buffer (empty: not measured, costs nothing). Between sizes
    a cost is interpolated linearly; below the smallest it is the smallest's; above the largest
    it grows along the last two points. No size costs less than the smallest: a round of more
    bytes is taken to cost at least what the smallest one's did, where a table measured the
    smallest slower than a larger one (a probe's first chains may wake ranks that later ones
    find awake; in about half the stored tables). Priced without that floor, the stored grids'
    all-reduce rows over 8% came to 394 of 7,106 (392 with it) in the full grids and 27 of 1,470
    (29) in the quick ones: no better, so the floor stays."""

    sizes_bytes: tuple[float, ...]
    first_s: tuple[float, ...]
    next_s: tuple[float, ...]
    reduce_s: tuple[float, ...] = ()
    ranks: int | None = None  # how many ranks the table was measured on, where known

    def __post_init__(self):
        n = len(self.sizes_bytes)
        if n < 2 or len(self.first_s) != n or len(self.next_s) != n:
            raise ValueError(f"round costs need at least 2 sizes, each with a first and a next "
                             f"time; got {n} sizes, {len(self.first_s)} and {len(self.next_s)} times")
        if len(self.reduce_s) not in (0, n):
            raise ValueError(f"round costs: {n} sizes but {len(self.reduce_s)} reduce times "
                             f"(none, or one per size)")
        if any(b <= a for a, b in zip(self.sizes_bytes, self.sizes_bytes[1:])) \
                or not all(0 < n <= MAX_ROUND_BYTES for n in self.sizes_bytes):
            raise ValueError(f"round-cost sizes must be increasing, from 1 B to "
                             f"{MAX_ROUND_BYTES:.0e} B, got {self.sizes_bytes}")
        if not all(math.isfinite(t) and 0 < t <= MAX_ROUND_S for t in (*self.first_s, *self.next_s)):
            raise ValueError(f"round-cost times must be positive seconds, at most {MAX_ROUND_S:g}")
        if not all(math.isfinite(t) and 0 <= t <= MAX_ROUND_S for t in self.reduce_s):
            raise ValueError(f"reduce times must be seconds from 0 to {MAX_ROUND_S:g}")

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "RoundCosts":
        """From ``[{"bytes": n, "first_s": t1, "next_s": t2}, ...]`` (any order), with
        ``reduce_s`` too where every row has it (a table of Gloo's own rounds below the
        Python-driven ones that add: no additions)."""
        try:
            if any(isinstance(r[k], bool) for r in rows for k in ("bytes", "first_s", "next_s")):
                raise TypeError("true or false where a number belongs")
            rows = sorted(rows, key=lambda r: float(r["bytes"]))
            table = [tuple(float(r[k]) for r in rows) for k in ("bytes", "first_s", "next_s")]
            reduce = tuple(float(r["reduce_s"]) for r in rows) \
                if all("reduce_s" in r for r in rows) else ()
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise ValueError(f"bad round-cost rows ({error}): each needs bytes, first_s and next_s") \
                from None
        try:
            return cls(*table, reduce)
        except OverflowError as error:
            raise ValueError(f"bad round-cost rows: {error}") from None

    def as_rows(self) -> list[dict]:
        rows = [{"bytes": n, "first_s": a, "next_s": b}
                for n, a, b in zip(self.sizes_bytes, self.first_s, self.next_s)]
        for row, t in zip(rows, self.reduce_s):
            row["reduce_s"] = t
        return rows

    def _at(self, times: tuple[float, ...], size: float) -> float:
        sizes = self.sizes_bytes
        i = min(max(bisect.bisect_left(sizes, size), 1), len(sizes) - 1)
        if size <= sizes[0]:
            return times[0]
        slope = (times[i] - times[i - 1]) / (sizes[i] - sizes[i - 1])
        return max(times[0], times[i - 1] + slope * (size - sizes[i - 1]))

    def first_round_s(self, size_bytes: float) -> float:
        return self._at(self.first_s, size_bytes)

    def next_round_s(self, size_bytes: float) -> float:
        return self._at(self.next_s, size_bytes)

    def reduce_time_s(self, sizes_bytes: list[float]) -> float:
        """Seconds to add each of ``sizes_bytes`` after its round (0 when not measured)."""
        return sum(self._at(self.reduce_s, n) for n in sizes_bytes) if self.reduce_s else 0.0

    def rounds_time_s(self, rounds: Rounds) -> float:
        """Seconds for ``rounds`` run back to back, the first on an idle network."""
        messages = [size for count, size in rounds for _ in range(count)]
        if not messages:
            return 0.0
        return self.first_round_s(messages[0]) + sum(self.next_round_s(m) for m in messages[1:])


MAX_ROUND_RANKS = 1 << 20  # a round-cost table's world_size beyond this is not a measurement


def load_round_costs(path: str) -> RoundCosts:
    """The table in ``path``: the JSON written by ``experiments/ring_probe.py`` (its ``results``)
    or a bare list of ``{"bytes", "first_s", "next_s"}`` rows; ValueError naming the file."""
    try:
        data = read_json(path, MAX_INPUT_BYTES)
    except OSError as error:
        raise ValueError(f"cannot read round costs {path!r}: {error.strerror}") from None
    except ValueError as error:  # also: bad UTF-8, nesting too deep for the parser
        raise ValueError(f"round costs {path!r} is not JSON: {error}") from None
    rows = data.get("results") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"round costs {path!r}: expected a list of rows, or an object with "
                         f"'results' (experiments/ring_probe.py --json)")
    with_reduce = sum("reduce_s" in r for r in rows)
    if 0 < with_reduce < len(rows):
        raise ValueError(f"round costs {path!r}: reduce_s on {with_reduce} of {len(rows)} rows; "
                         f"give it on all or none")
    try:
        costs = RoundCosts.from_rows(rows)
    except ValueError as error:
        raise ValueError(f"round costs {path!r}: {error}") from None
    ranks = data.get("world_size") if isinstance(data, dict) else None
    if ranks is None:
        return costs
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= MAX_ROUND_RANKS:
        raise ValueError(f"round costs {path!r}: world_size must be the ranks the rounds were "
                         f"timed on, a whole number from 2 to {MAX_ROUND_RANKS:,}, got {ranks!r}")
    return replace(costs, ranks=ranks)


def round_cost_notes(costs: RoundCosts, algorithm: str, replicas: list[int],
                     bucket_bytes: list[float]) -> list[str]:
    """What a user should know of a measured table used beyond what it measured: other rank
    counts than its own, and rounds larger than its largest (priced along its last two points)."""
    notes = []
    others = sorted({p for p in replicas if p > 1 and costs.ranks and p != costs.ranks})
    if others:
        counts = ", ".join(f"{p:,}" for p in others)
        notes.append(f"note: the round costs were measured on {costs.ranks} ranks; each round of "
                     f"the {counts}-replica all-reduce is priced as one of theirs")
    largest = max((size for p in replicas if p > 1 for n in bucket_bytes if n > 0
                   for _, size in ALGORITHMS[algorithm](p, n)), default=0.0)
    if largest > costs.sizes_bytes[-1]:
        notes.append(f"note: rounds of up to {largest:,.0f} B are priced beyond the round costs' "
                     f"largest size ({costs.sizes_bytes[-1]:,.0f} B), along its last two points")
    return notes


def allreduce_time_s(algorithm: str, p: int, n_bytes: float, latency_s: float,
                     bandwidth_bps: float, round_costs: RoundCosts | None = None) -> float:
    """Seconds for an all-reduce of ``n_bytes`` over ``p`` ranks; 0 when there is nothing to send.
    With ``round_costs``, the rounds cost what they measured instead of α + 8n/B."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r} "
                         f"(known: {', '.join(ALGORITHM_NAMES)})")
    if n_bytes == 0:
        return 0.0
    rounds = ALGORITHMS[algorithm](p, n_bytes)
    if round_costs is not None:
        return round_costs.rounds_time_s(rounds)
    return sum(count * (latency_s + 8.0 * size / bandwidth_bps) for count, size in rounds)


def bus_bandwidth_factor(p: int) -> float:
    """nccl-tests' busbw / algbw for all-reduce: 2(p−1)/p."""
    return 2.0 * (p - 1) / p
