"""Round-cost tables from a ring probe's record (``experiments/ring_probe.py``), as the model
prices calls from them (``experiments.model``).

A probe times chains of ring rounds on a test bed: every rank sends to its right and receives
from its left, at a grid of sizes, driven from Python (``results``), from C++ as Gloo's own ring
drives them (``engine_results``) and as the hand-written ring drives them (``ring_results``).
Each driver's rows become a table (``plain_table``, ``engine_table``, ``ring_table``): a first
round and mean later ones per size, which ``dsgd_sim.collectives.RoundCosts`` composes into an
algorithm's rounds. Two kinds of table keep more of the chains:

* ``ChainRounds`` keeps each round's own duration, for the walk of a call's rounds through the
  shaper's bucket (``experiments.model.bucket_walk``): which rounds the chains paid at the rate
  (``paced``), and which sizes' chains started on tokens (``sizes_on_tokens``);
* ``ChainEnds`` prices k rounds of one size from the chains' time to the end of their k-th
  round, for a probe that idled before every chain (``priced_from_ends``).

A measurement is bracketed by two probes of its own test bed, one before and one after
(``experiments.measure.bracket``); ``settled`` reads such a record as the model does, both
halves merged (``merge_halves``) once a paced round that one probe ran a fifth slower is taken
from the faster alone (``steady_halves``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dsgd_sim.collectives import RoundCosts

# A round of chains run back to back counts as paced by the shaper (it waited for tokens) where it
# took at least this share of its bytes' time at the payload rate (the rest: timing noise; paced
# 64 KiB rounds on 4 hosts at 1000 Mbit/s took 1.00-1.07 times it) ...
PACED_SHARE = 0.9
# ... and that time is at least this many latency-bound rounds (``ChainRounds.latency_round_s``:
# the chains' median later round at their smallest size): below, a round's wait for tokens cannot be
# told from its latency (8 KiB rounds on 8 hosts at 200 Mbit/s: 0.35 ms at the rate, 0.26-0.30 ms
# latency-bound)
PACED_OVER_LATENCY = 2.0

# chains of one size the walk of a probe run in blocks runs (``ChainRounds.sizes_on_tokens``):
# each chain starts on what the one before it left, and a few settle the bucket (a chain that
# drains it leaves the same to the next; one that does not refills it to the full within a few)
BLOCK_WALK_CHAINS = 8


def plain_table(probe: dict) -> RoundCosts:
    """The Python-driven rounds of a ``ring_probe.py`` record (``results``), priced from its
    chains' ends where its chains were timed alone (``priced_from_ends``)."""
    return priced_from_ends(RoundCosts.from_rows(probe["results"]), probe)


def engine_table(probe: dict) -> RoundCosts:
    """The rounds of Gloo's own ring from a ``ring_probe.py`` record: its C++-driven rounds
    (``engine_results``, the small sizes) and, above the largest of them, its Python-driven
    ones, where a round pays its bytes at the link's rate whichever way it is driven."""
    return priced_from_ends(_driven_table(probe["engine_results"], probe["results"]), probe,
                            "engine")


def ring_table(probe: dict) -> RoundCosts:
    """The rounds of the hand-written ring from a ``ring_probe.py`` record: its ring-driven
    rounds (``ring_results``, the small sizes), whose additions are inside the rounds (a
    ``reduce_s`` of 0), and, above the largest of them, the Python-driven ones with their
    additions, where a round pays its bytes at the link's rate whichever way it is driven."""
    return priced_from_ends(_driven_table([{**r, "reduce_s": 0.0} for r in probe["ring_results"]],
                                          probe["results"]), probe, "ring")


def _driven_table(driven: list[dict], plain: list[dict]) -> RoundCosts:
    """Rounds timed one way (``driven``) and, above the largest of them, the plain
    Python-driven ones (``plain``)."""
    largest = max(float(r["bytes"]) for r in driven)
    return RoundCosts.from_rows(driven + [r for r in plain if float(r["bytes"]) > largest])


@dataclass(frozen=True)
class ChainEnds(RoundCosts):
    """Round costs that price k rounds of one size from the probe's chains' time to the end of
    their k-th round (``ends_s``: per size, the median over the chains for k = 1, 2, ...,
    interpolated between sizes as ``RoundCosts`` does); any other round list (more rounds than
    the chains ran, rounds of several sizes) as ``RoundCosts``, from a first and mean later
    rounds."""

    ends_s: tuple[tuple[float, ...], ...] = ()

    def rounds_time_s(self, rounds) -> float:
        if len(rounds) == 1 and self.ends_s:
            count, size = rounds[0]
            if 0 < count <= min(len(e) for e in self.ends_s):
                return self._at(tuple(e[count - 1] for e in self.ends_s), size)
        return super().rounds_time_s(rounds)


@dataclass(frozen=True)
class ChainRounds(RoundCosts):
    """Round costs from chains run back to back, priced as ``RoundCosts`` (a first and mean later
    rounds), that also keep each round's own median duration per size (``rounds_s``: the
    chains' ends, differenced) for ``full_bucket_saving_s``: which rounds the chains paid at
    the rate."""

    rounds_s: tuple[tuple[float, ...], ...] = ()
    # the probe ran each size's chains one after another (``ring_probe.py --order blocks``),
    # not one chain of each size in turn
    blocks: bool = False

    def round_s(self, index: int, size_bytes: float) -> float:
        """Seconds of round ``index`` (0: the first) at ``size_bytes``, interpolated between
        sizes as ``RoundCosts`` does; past the chains' length, a mean later round."""
        if index >= min(len(r) for r in self.rounds_s):
            return self.first_round_s(size_bytes) if index == 0 else self.next_round_s(size_bytes)
        return self._at(tuple(r[index] for r in self.rounds_s), size_bytes)

    def latency_round_s(self) -> float:
        """A latency-bound round: the median of the chains' later rounds at the table's smallest
        size (the mean, ``next_s[0]``, where the chains ran one round). A median, because one
        slow round of a chain (the chains on 8 hosts at 1000 Mbit/s have one of about twice
        the others near their end) raises the mean by a tenth."""
        later = self.rounds_s[0][1:]
        return statistics.median(later) if later else self.next_s[0]

    def paced(self, took_s: float, size_bytes: float, payload_bps: float) -> bool:
        """Whether a round of ``size_bytes`` that took ``took_s`` waited for the shaper's tokens:
        it took at least ``PACED_SHARE`` of its bytes' time at ``payload_bps``, and that time is
        at least ``PACED_OVER_LATENCY`` latency-bound rounds (below, a wait for tokens cannot be
        told from a round's latency)."""
        wire_s = size_bytes * 8.0 / payload_bps
        return (wire_s >= PACED_OVER_LATENCY * self.latency_round_s()
                and took_s >= PACED_SHARE * wire_s)

    def sizes_on_tokens(self, payload_bps: float, bucket_bytes: float,
                        refilled_bytes: float) -> list[float]:
        """The table's sizes, from the smallest up, whose chains started with their first
        round's tokens in the bucket, up to the first that did not. The probe runs the sizes'
        chains smallest first (``ring_probe.probe``), a pause before each that refills
        ``refilled_bytes``; walked from a full bucket (``bucket_bytes``) before the smallest,
        each chain's rounds as they took, the bucket refilling at ``payload_bps`` meanwhile
        and a paced round short of tokens leaving it empty. Interleaved, a chain follows one of
        the next smaller size: on 4 hosts at 1000 Mbit/s the 32 KiB chains drain the bucket and
        a 0.2 ms pause refills 24 kB, so the 64 KiB chains start short: their first round took
        0.29-0.33 ms against 0.14-0.15 at 32 KiB and below; with a 0.28 ms pause they started
        on tokens, and it took 0.20-0.23. In blocks (``blocks``), a chain follows chains of its
        own size: the walk runs each size's chain ``BLOCK_WALK_CHAINS`` times from what the size
        below left, and the size counts as on tokens where its last chain started so, as most
        of its chains, whose median the table holds, did."""
        tokens, covered = bucket_bytes, []
        for size, rounds in zip(self.sizes_bytes, self.rounds_s):
            for _ in range(BLOCK_WALK_CHAINS if self.blocks else 1):
                tokens = min(bucket_bytes, tokens + refilled_bytes)
                started = tokens
                tokens = self._after_chain(tokens, size, rounds, payload_bps, bucket_bytes)
            if started < size:
                break
            covered.append(size)
        return covered

    def _after_chain(self, tokens: float, size: float, rounds: tuple[float, ...],
                     payload_bps: float, bucket_bytes: float) -> float:
        """The bucket's tokens after a chain of rounds of ``size`` that took ``rounds`` seconds
        each, started on ``tokens`` (``sizes_on_tokens``)."""
        rate_Bps = payload_bps / 8.0
        for took_s in rounds:
            tokens = (0.0 if self.paced(took_s, size, payload_bps) and tokens < size else
                      min(bucket_bytes, max(0.0, tokens + took_s * rate_Bps - size)))
        return tokens

    def first_on_tokens_s(self, size_bytes: float, covered: list[float]) -> float:
        """A first round of ``size_bytes`` that starts with its bytes' tokens in the bucket: the
        chains' first round where chains of that size started so (``covered``: the
        ``sizes_on_tokens``); above the largest such size, its first round plus the slope (at
        least 0) of the first rounds from the smallest size to it."""
        covered = covered or [self.sizes_bytes[0]]
        largest = covered[-1]
        if size_bytes <= largest:
            return self.first_round_s(size_bytes)
        slope = 0.0
        if len(covered) > 1:
            slope = max(0.0, (self.first_round_s(largest) - self.first_round_s(covered[0]))
                        / (largest - covered[0]))
        return self.first_round_s(largest) + slope * (size_bytes - largest)

    def on_tokens_round_s(self, size_bytes: float, covered: list[float]) -> float:
        """A later round of ``size_bytes`` whose bytes all go on the bucket's tokens: a
        latency-bound round plus what the bytes add to a first round on tokens
        (``first_on_tokens_s``, the same arguments)."""
        return self.latency_round_s() + (self.first_on_tokens_s(size_bytes, covered)
                                         - self.first_round_s(self.sizes_bytes[0]))


def with_chain_rounds(table: RoundCosts, ends: dict[int, list[float]],
                      blocks: bool = False) -> RoundCosts:
    """``table`` as ``ChainRounds`` with the rounds' durations from ``ends`` (``chain_ends``)
    where they cover every size of it, from a probe that ran its sizes' chains in blocks or
    not (``ChainRounds.blocks``); else as it is."""
    if not all(int(n) in ends for n in table.sizes_bytes):
        return table
    rounds = tuple(tuple(e[:1] + [b - a for a, b in zip(e, e[1:])])
                   for e in (ends[int(n)] for n in table.sizes_bytes))
    return ChainRounds(table.sizes_bytes, table.first_s, table.next_s, table.reduce_s,
                       rounds_s=rounds, blocks=blocks)

def chain_ends(halves: list[list[dict]]) -> dict[int, list[float]]:
    """Bytes -> per round k, the median over every chain of the probe rows in ``halves`` (a
    bracket's two probes, or one) of the time to the end of round k (``ends_chains_s``)."""
    chains: dict[int, list[list[float]]] = {}
    for rows in halves:
        for row in rows:
            chains.setdefault(int(row["bytes"]), []).extend(row.get("ends_chains_s", []))
    return {n: [statistics.median(c[k] for c in cs) for k in range(min(len(c) for c in cs))]
            for n, cs in chains.items() if cs}


def with_chain_ends(table: RoundCosts, ends: dict[int, list[float]]) -> RoundCosts:
    """``table`` priced by ``ChainEnds`` where ``ends`` covers every size of it; else as it is."""
    if not all(int(n) in ends for n in table.sizes_bytes):
        return table
    return ChainEnds(table.sizes_bytes, table.first_s, table.next_s, table.reduce_s,
                     ends_s=tuple(tuple(ends[int(n)]) for n in table.sizes_bytes))


DRIVERS = ("engine", "ring")  # the probe's other drivers of the same rounds (``engine_results``,
                              # ``ring_results``), beside the Python-driven ones (``results``)
PACED_PROBE_BYTES = 256 << 10  # a round this large runs at its link's pace on a quiet bed ...
HALVES_APART = 0.2             # ... so two probes of one bed whose rounds differ by more met
                               # something that slowed one of them


def steady_halves(before: list[dict], after: list[dict]) -> tuple[list[dict], list[dict]]:
    """Two bracketing probes' rows of one driver (``measure.bracket``'s halves), each size of
    ``PACED_PROBE_BYTES`` or more whose later rounds' medians (``next_s``) lie more than
    ``HALVES_APART`` of the faster apart taken from the faster probe alone, in both halves.
    Such a round is paced by the link, which the minutes between two probes do not slow by a
    fifth: the slower probe met a burst of work on the shared cores, and the rows between them
    are priced from the one that did not (a full grid's 4-host bed at 1000 Mbit/s whose second
    probe ran its 1 MiB rounds in 13.5 ms, the first in 9.0, the 1 MB calls between them in
    8.6 a round's worth). Smaller rounds, which the ranks' wake-ups set, move from probe to
    probe by as much without any burst, and keep both halves."""
    steady_b, steady_a = [], []
    for b, a in zip(before, after, strict=True):
        if b["bytes"] != a["bytes"]:
            raise ValueError(f"probes of different sizes: {b['bytes']} and {a['bytes']} bytes")
        if b["bytes"] >= PACED_PROBE_BYTES and \
                abs(b["next_s"] - a["next_s"]) > HALVES_APART * min(b["next_s"], a["next_s"]):
            b = a = b if b["next_s"] < a["next_s"] else a
        steady_b.append(b)
        steady_a.append(a)
    return steady_b, steady_a


def merge_halves(before: list[dict], after: list[dict]) -> list[dict]:
    """Per size, the median over both probes' chains of each figure they timed per chain
    (``first``, ``next``, ``reduce``: ``ring_probe.py``'s ``*_chains_s``), of their
    ``steady_halves``."""
    rows = []
    for b, a in zip(*steady_halves(before, after)):
        rows.append({"bytes": b["bytes"],
                     **{key[:-len("chains_s")] + "s": statistics.median(b[key] + a[key])
                        for key in b if key.endswith("_chains_s") and key != "ends_chains_s"}})
    return rows


def settled(probe: dict) -> dict:
    """A ``ring_probe.py`` record as the model reads it: where it brackets a measurement (both
    probes' rows kept, ``measure.bracket``), each driver's rows merged again from its
    ``steady_halves`` (a stored run bracketed before the halves were steadied reads as a new
    one would), where the halves keep each chain's figures; else as it is."""
    if "before" not in probe:
        return probe
    out = dict(probe)
    for prefix in ("", *(f"{d}_" for d in DRIVERS)):
        halves = [probe.get(f"{prefix}{side}") for side in ("before", "after")]
        if all(halves) and all("next_chains_s" in r for half in halves for r in half):
            out[f"{prefix}results"] = merge_halves(*halves)
    return out


def probe_halves(probe: dict, driver: str = "") -> list[list[dict]]:
    """The rows of one driver's chains (``""``: the Python-driven ones; ``"engine"``, ``"ring"``)
    in a ``ring_probe.py`` record: both probes of a bracket (``measure.bracket``) as
    ``steady_halves`` takes them, else its own."""
    prefix = f"{driver}_" if driver else ""
    if f"{prefix}before" in probe:
        return list(steady_halves(probe[f"{prefix}before"], probe[f"{prefix}after"]))
    return [probe.get(f"{prefix}results") or []]


def ends_of(probe: dict, driver: str = "") -> dict[int, list[float]]:
    """``chain_ends`` of a probe record for a table of ``driver``'s rounds: that driver's chains
    at its sizes, the Python-driven ones above (as ``_driven_table`` joins them)."""
    ends = chain_ends(probe_halves(probe))
    if driver:
        ends.update(chain_ends(probe_halves(probe, driver)))
    return ends


def priced_from_ends(table: RoundCosts, probe: dict, driver: str = "") -> RoundCosts:
    """``table`` (from ``probe``'s ``driver`` rounds) priced from the chains' ends where the probe
    timed every chain alone (``idle_s``: each after an idle that refilled the shaper's bucket):
    a call of k rounds of one size then costs what those chains took to the end of their k-th
    round, started as a call alone is, on a full bucket; what a stream of calls cannot borrow
    from the bucket ``stream_call_s`` adds. A probe that ran its chains back to back started
    each on whatever the chain before it left, a first round and mean later ones are then the
    price (a stored run from before the idle probes repredicts as it was), as ``ChainRounds``,
    which keeps each round's duration for ``full_bucket_saving_s``. The stream
    correction is the all-reduce experiment's; the sync and ring runs of the other experiments
    (``experiments.sync_model``) take the tables as they are. ValueError where a probe that
    idled lacks the chains' ends at a size of the table."""
    if not probe.get("idle_s"):
        return with_chain_rounds(table, ends_of(probe, driver), probe.get("order") == "blocks")
    ends = ends_of(probe, driver)
    missing = [int(n) for n in table.sizes_bytes if int(n) not in ends]
    if missing:
        raise ValueError(f"a probe that idled before its chains has no chains' ends "
                         f"(ends_chains_s) at {', '.join(f'{n} B' for n in missing)}")
    return with_chain_ends(table, ends)
