"""Predictions for the test bed, from the network calibration alone (nothing fitted to a run).

The calibration (``python -m real.testbed calibrate``) measures a 2-host test bed at one rate: the
payload rate of a long one-way TCP transfer (``goodput_bps``: the rate less Ethernet/IP/TCP headers),
the per-message latency of Gloo's send/recv and the time of a 1-element Gloo all_reduce. The
simulator (``dsgd_sim``) takes a bandwidth and a latency; this module turns the calibration into
those inputs and adds what the test bed does that the alpha-beta model leaves out:

* **ACKs share the link with data.** In a calibration transfer data goes one way and TCP's ACKs
  the other. In a ring every host sends and receives at once, so its uplink carries its data *and*
  the ACKs of the data it receives: one 66-byte frame per two full segments (delayed ACK), i.e.
  the payload rate drops by 1514 / (1514 + 33) (-2.1% at MTU 1500), and those ACKs wait behind
  the data in the shaper's queue, which slows the sender's ACK clock a little more. The runner
  therefore also measures the network with both directions busy (``duplex_probe.py``); that
  payload rate is used when present, the header arithmetic otherwise. ``duplex_payload_bps``.
  On 2 hosts a ring's two neighbours are one peer, and Gloo keeps one TCP connection to a peer:
  the ACKs ride in the data going the other way, and the link carries payload at the one-way
  goodput (``NetworkInputs.for_ring_of``). Over the stored full grids the 2-host calls of 1 MB
  and more at 50 and 200 Mbit/s had been priced 0.2-0.4% over at the mean with the duplex
  probe's rate (two connections, as a ring's two neighbours on more hosts), and 0.0% with the
  goodput, where the 4- and 8-host ones are 0.0-0.1% off with the duplex rate
  (``experiments/LOG.md``; per grid, ``python -m experiments.ablation --results DIR`` against
  the model ``rounds, the duplex probe's rate on 2 hosts``).
* **The shaper's bucket lets a burst through at once.** tbf passes the first ``burst_bytes`` after
  an idle moment without delay and refills at the rate whenever the link idles, so a gap between
  two rounds (a message's latency, the rank's wake-up) costs nothing until the bucket is full
  again: in a bandwidth-bound ring only the last round's latency shows, and a call that starts
  with tokens in the bucket gets its first bytes through free. ``shaped_rounds_time_s`` walks the
  rounds of an algorithm (the simulator's ``dsgd_sim.collectives`` round lists) through a token
  bucket; the bucket holds what refilled during the barrier before the call (as long as a
  1-element all_reduce, measured) and during each round's latency.
* **A duplex exchange may start slowly.** With both directions busy, an exchange of n bytes each
  way can take longer than the bucket and the duplex rate give (a ramp: each sender's congestion
  control starts off every exchange while its ACKs queue behind its own data), by an amount that
  grows with n and levels off after a few MB. How much depends on the congestion control: with
  BBR (its pacing rate and in-flight cap set by the round trip it measures) 4 MB each way at
  50 Mbit/s took 748 ms, with Reno, the test bed's default, 683 ms, which the bucket and the
  duplex rate account for. The calibration times the duplex
  exchange at the rounds' own sizes (``duplex_probe.py``, 16 kB ... 16 MB, network only);
  ``startup_excess_s`` is the measured time less that ideal, interpolated, and every round pays
  it: a round of a measured size then costs what that exchange measured.
* **A call has a fixed cost** beyond its rounds' latency: the calibration's 1-element all_reduce
  (two rounds between two hosts) less two rounds of latency. ``call_overhead_s``.

Those four corrections describe two hosts. **Measured rounds** (``round_costs``) replace them
wherever the calibration holds a ring-round table for the number of hosts predicted: every
H-host test bed the experiments use is timed by ``experiments/ring_probe.py`` (chains of rounds,
each rank sending to its right and receiving from its left through Gloo, at a grid of sizes of its
own; ``experiments.probe_tables`` reads a probe's record into tables), and the simulator's
``RoundCosts`` composes an algorithm's rounds from that table. The hand-written rings (``real/allreduce.py``) also pay the addition the probe times after its
chains (``reduce_s``), once per reduce round (``dsgd_sim.collectives.reduction_sizes``): the
next round cannot leave before it. What the table holds and the corrections above miss: the duplex TCP dynamics of back-to-back rounds,
and the wake-ups of H ranks and the kernel work of H hosts' links on the machine's shared cores.
The hand-written ring drives its rounds its own way (the next round's receive posted first,
the addition and the forwarding send inside the round): where the probe also timed rounds driven
so (``ring_probe.py --ring-rounds``), the ring is priced from those (``ring_table``), additions
included. The bucket model stays for a host count without a table. A table composes a call
from a first round and mean later ones; from a probe that idled before every chain
(``experiments/run.py --probe-idle``, each chain on a full bucket as a call alone), a call of
k rounds of one size is instead what the chains took to the end of their k-th round
(``priced_from_ends``), which did worse in a whole grid (the ``allreduce`` section of ``experiments/LOG.md``).

**Either way, a stream of calls pays the rate.** The benchmark (``real/allreduce.py``) makes its
calls back to back, a barrier apart, the algorithms taking turns (``call_order``). A call alone
gets its first bytes through the bucket free; in a stream the bucket holds only what refilled
since the last call took its tokens, so where a rotation of calls sends more than the link
carries in that time, a call lasts until its bytes have passed at the rate. ``stream_call_s``
runs the bucket through the rotation until it settles: each call as long as it takes alone or
as its missing tokens take to refill, a gap before each: what the test bed's own probe measured
between two 1-element calls of such a stream, from the end of the slowest rank's call to the
next call's start (``stream_gap_s``: the barrier and the loop's own work; in one full grid
0.11 ms on 2 hosts, 0.28-0.29 on 4, 0.54-0.60 on 8, the barrier's ⌈log2 H⌉ rounds), or where
the probe has none the calibration's on 2 hosts (a stored run from before the probes timed it,
and before the gap was taken after the slowest rank's call, has rank 0's), or, in a
calibration without it, the 1-element all_reduce. The gap grows with the calls' buffer, which
the loop refills before each: the probes time it at each size after calls of that size
(``ring_probe.sized_gaps``; ``NetworkInputs.call_gap_at``). A call that works on after its last
bytes arrived (the naive ring's final addition: ``call_tail_s``) ends that much later in a
stream paid at the rate, and the links, idle meanwhile, refill the bucket for the next call.
On 2 hosts at 1000 Mbit/s (a 125 kB bucket) a 64 kB ring call alone takes 0.38 ms (the full
grid's rounds); in a stream its 64 kB each way take 0.54 ms at the 950 Mbit/s duplex rate, of
which the barrier refills 0.13 ms: 0.41 ms a call (measured: 0.44).

**A call alone starts on a full bucket; the probe's chains do not.** The probe runs its chains
back to back, so a chain starts on what the pause before it refilled, and its later rounds of a
size near the bucket are paid at the rate. ``predict_call_alone_s`` takes off what a full bucket
saves on those rounds (``full_bucket_saving_s``, a walk of the call's rounds from a full bucket
over the chains' own round durations, kept in ``ChainRounds``), and the stream adds back what it
cannot lend. A round the tokens cover costs a round on tokens: the first, what the chains' first
round took at the sizes whose chains started on tokens (``ChainRounds.sizes_on_tokens`` walks
the probe's chains through the bucket in the order it runs them), above those the largest one's
plus the slope below it (``first_on_tokens_s``); a later one, a latency-bound round plus what
the bytes add to a first round (``on_tokens_round_s``). A chain may itself have started short
of tokens: on 4 hosts at 1000 Mbit/s the 64 KiB chains follow 32 KiB ones that drain the bucket,
and the 0.2 ms pause refills 24 kB, so their first round took 0.29-0.33 ms against 0.14-0.15 at
32 KiB and below; priced from it, the naive ring's 64 kB call alone came out 1.10-1.18 ms, more
than it took in the benchmark where the bucket was fullest (0.885-0.95 ms).

**A call that waited for tokens leaves the bucket empty.** In the stream the bucket a call
leaves is what the same walk ends with from the tokens the call started on
(``bucket_left_after``): a round that found too few tokens waits for the rest and takes the
bucket down to nothing, whatever the call's earlier rounds refilled. The naive ring's 64 kB call
on 4 hosts at 1000 Mbit/s sends 192 kB, more than the bucket: in the rotation it follows a ring
call after a naive one, a Gloo call after a naive one, or Gloo's and the ring's, and took
1.29-1.38, 1.14-1.18 and 0.885-0.900 ms there on four test beds (``python -m
experiments.call_positions --hosts 4 --beds 4``), the first two as the tokens each start held
allow (a ring or Gloo call sends 96 kB and refills about as much); the model priced those
places 1.24-1.39, 1.20-1.22 and 0.82-0.90 ms.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field, replace

from dsgd_sim.collectives import ALGORITHMS, RoundCosts, allreduce_time_s, reduction_sizes
from experiments.probe_tables import ChainRounds, engine_table, plain_table, ring_table, settled

ACK_FRAME_BYTES = 66  # 14 Ethernet + 20 IP + 32 TCP (with timestamps), no payload
SEGMENTS_PER_ACK = 2  # Linux delayed ACK: one ACK for every second full segment
# a ring-round table whose hosts each moved less than this share of the duplex payload rate was
# held back by the machine, not by its links (link-bound tables reach 0.98-1.00 of it; 8 hosts
# at 200 Mbit/s on 2 cores reached 0.70-0.78 while the shapers cut TCP's batches in software,
# which the test bed now prevents: docs/testbed.md)
BED_BOUND_SHARE = 0.9

# the most rotations of the benchmark's calls run through the bucket to let it settle: each
# rotation drains it by the same bytes until the calls wait for it, so a stream still draining
# after this many lacks under a thousandth of the bucket a rotation, a wait no longer than that
# at the rate
STREAM_MAX_ROTATIONS = 1000

# real/allreduce.py's algorithm names -> the simulator's; Gloo's own all-reduce is a ring
SIM_ALGORITHM = {"ring": "ring", "naive": "naive-ring", "backend": "ring"}
# real/allreduce.py's hand-written rings add what arrived before the next round can leave; Gloo's
# own ring is left at its rounds (it reduces in C++ as its segments arrive)
REDUCES_BETWEEN_ROUNDS = {"ring", "naive"}
# ... and of those, the one whose call ends with an addition: the naive ring adds the last
# buffer it receives after its bytes have all arrived, the links idle meanwhile (the ring's
# last rounds only gather)
ENDS_WITH_ADDITION = {"naive"}


@dataclass(frozen=True)
class NetworkInputs:
    """What the simulator is told about one test-bed rate, all from its calibration record."""

    rate_bps: float          # the shaper's rate
    goodput_bps: float       # payload rate of a long one-way TCP transfer (measured)
    latency_s: float         # per-message latency through Gloo send/recv (median RTT/2)
    call_overhead_s: float   # a 1-element Gloo all_reduce between two hosts (median)
    frame_bytes: int = 1514  # a full frame at the MTU
    duplex_goodput_bps: float | None = None  # payload rate each way with both ways busy (measured)
    burst_bytes: int = 0     # the shaper's bucket (tbf burst), in frame bytes
    # (bytes each way, median seconds) of duplex exchanges started with full buckets (measured)
    duplex_transfers: tuple[tuple[int, float], ...] = ()
    tcp_latency_s: float = 0.0  # one-way latency of a raw TCP message (the duplex probe's transport)
    # hosts -> ring rounds timed on a test bed of that many hosts at this rate (ring_probe.py)
    round_costs: dict[int, RoundCosts] = field(default_factory=dict)
    # hosts -> the same rounds as Gloo's own ring makes them (driven from C++, two halves in
    # flight: ring_probe.py --engine-rounds) at the small sizes, the Python-driven ones above
    engine_round_costs: dict[int, RoundCosts] = field(default_factory=dict)
    # hosts -> the same rounds as real/allreduce.py's ring makes them (the next receive posted
    # first, the addition inside the round: ring_probe.py --ring-rounds) at the small sizes, the
    # Python-driven ones above
    ring_round_costs: dict[int, RoundCosts] = field(default_factory=dict)
    # what a stream of calls made as the benchmark makes them leaves idle between two (a barrier
    # and the loop's own work; measured, median); None: not measured, the 1-element all_reduce
    stream_gap_s: float | None = None
    # a ring of 2 hosts: both directions of every round on one connection (``for_ring_of``)
    one_connection: bool = False
    # whether ``for_ring_of`` gives a 2-host ring the one-way goodput (the ablation turns it off)
    two_host_goodput: bool = True
    # (bytes, median seconds): the same gap where the loop refills a buffer of that many bytes
    # before each call, as the benchmark does at that size (measured on the bed, by size)
    sized_gaps: tuple[tuple[int, float], ...] = ()
    # how long a small message waits behind a long one its sender is sending (queue_probe.py,
    # median); 0: not measured (calibrations before it), the simulator's notice then never waits
    notice_queue_s: float = 0.0
    # the wire's bytes beyond the payload's (``experiments/wire_bytes.py``'s fit), charged to a
    # stream of calls where given: what each message a rank sends costs beyond its payload (its
    # header and last partial frame, the receive notice back), and, by hosts, what each cycle of
    # the stream costs beyond its call's messages (the barrier's). The model's default charges
    # neither (``experiments/LOG.md``: the ablation's "rounds, the wire's bytes")
    message_wire_bytes: float = 0.0
    cycle_wire_bytes: dict[int, float] = field(default_factory=dict)
    # hosts -> what a call of the hand-written ring costs beyond its ring-driven rounds: its own
    # bookkeeping (and its set-up, before the ring planned its buffers once), the links idle
    # meanwhile (``ring_call_extra``; none where the probe did not time its calls). Charged
    # only with ``price_ring_own_work`` (the ablation's "rounds, the ring's own work"): on this
    # 2-core machine it over-priced the ring's 64 kB calls at 200 Mbit/s, where the bucket
    # lets the links make up what they idled
    ring_call_extra_s: dict[int, float] = field(default_factory=dict)
    price_ring_own_work: bool = False

    @classmethod
    def from_calibration(cls, record: dict) -> "NetworkInputs":
        gloo = record.get("gloo")
        if not gloo:
            raise ValueError("calibration record has no 'gloo' section (run it without --no-gloo)")
        return cls(rate_bps=record["bandwidth_bps"], goodput_bps=record["goodput_bps"],
                   latency_s=gloo["latency_s"],
                   call_overhead_s=gloo["all_reduce_1_element_s"]["median"],
                   frame_bytes=record.get("frame_bytes", 1514),
                   duplex_goodput_bps=(record.get("duplex") or {}).get("goodput_bps"),
                   burst_bytes=record.get("burst_bytes", 0),
                   duplex_transfers=tuple((int(t["bytes"]), float(t["median_s"]))
                                          for t in (record.get("duplex") or {}).get("transfers", [])),
                   tcp_latency_s=record.get("latency_s", 0.0),
                   round_costs={int(h): plain_table(t)
                                for h, t in (record.get("rounds") or {}).items()},
                   engine_round_costs={int(h): engine_table(t)
                                       for h, t in (record.get("rounds") or {}).items()
                                       if t.get("engine_results")},
                   ring_round_costs={int(h): ring_table(t)
                                     for h, t in (record.get("rounds") or {}).items()
                                     if t.get("ring_results")},
                   stream_gap_s=(gloo.get("stream_gap_s") or {}).get("median"),
                   notice_queue_s=(record.get("queue") or {}).get("behind_bulk_s", 0.0))

    def with_rounds(self, hosts: int, probe: dict | None) -> "NetworkInputs":
        """These inputs with ``probe`` (a ``ring_probe.py`` record) as the round costs on
        ``hosts`` hosts: its Python-driven rounds, and its C++-driven and ring-driven ones where
        it has them; and the gap a stream of calls leaves between two of them on those hosts
        (``call_gap_s``) where it timed one (``stream_gap_s``: the median), else the
        calibration's, timed on 2 hosts; and that gap at each buffer size where it timed it
        (``sized_stream_gaps``: the medians; ``call_gap_at``); and what the hand-written
        ring's calls cost beyond their ring-driven rounds where it timed them
        (``calls_results``: ``ring_call_extra``). Without a probe (a run that timed no rounds
        of its own), these inputs unchanged."""
        if probe is None:
            return self
        probe = settled(probe)
        gap_s = (statistics.median(probe["stream_gap_s"]) if probe.get("stream_gap_s")
                 else self.stream_gap_s)
        sized = tuple(sorted((int(g["bytes"]), statistics.median(g["gaps_s"]))
                             for g in probe.get("sized_stream_gaps") or []))
        engine = {k: v for k, v in self.engine_round_costs.items() if k != hosts}
        if probe.get("engine_results"):
            engine[hosts] = engine_table(probe)
        ring = {k: v for k, v in self.ring_round_costs.items() if k != hosts}
        if probe.get("ring_results"):
            ring[hosts] = ring_table(probe)
        extra = {k: v for k, v in self.ring_call_extra_s.items() if k != hosts}
        if probe.get("ring_results") and probe.get("calls_results"):
            extra[hosts] = ring_call_extra(probe["calls_results"])
        return replace(self, round_costs={**self.round_costs,
                                          hosts: plain_table(probe)},
                       engine_round_costs=engine, ring_round_costs=ring, stream_gap_s=gap_s,
                       sized_gaps=sized, ring_call_extra_s=extra)

    def for_ring_of(self, hosts: int) -> "NetworkInputs":
        """These inputs for a ring of ``hosts`` hosts. On 2 hosts a rank's right and left
        neighbours are one peer, and Gloo keeps one TCP connection to a peer: both directions
        of every round travel on that connection, and its ACKs ride in the data going the
        other way. Each link then carries payload at the one-way goodput, where the duplex
        probe's two connections (a ring's two neighbours on 3 hosts and more) each send ACKs
        of their own. On 2 hosts the duplex rate is the goodput (``one_connection``);
        otherwise (or where already so: each pricing function calls it, one inside another)
        these inputs unchanged."""
        if hosts == 2 and self.two_host_goodput and not self.one_connection:
            return replace(self, one_connection=True)
        return self

    def rounds_for(self, algorithm: str, hosts: int) -> RoundCosts | None:
        """The measured rounds an algorithm's calls are composed of on ``hosts`` hosts: Gloo's own
        all-reduce (``backend``) makes its rounds in C++, so its table is the C++-driven one
        where the calibration has it; the hand-written ring's is the ring-driven one where it
        has it; the naive ring drives its rounds as the plain chains do. None: no table for that
        many hosts."""
        if algorithm == "backend" and hosts in self.engine_round_costs:
            return self.engine_round_costs[hosts]
        if algorithm == "ring" and hosts in self.ring_round_costs:
            return self.ring_round_costs[hosts]
        return self.round_costs.get(hosts)

    @property
    def duplex_payload_bps(self) -> float:
        """Payload rate each way of a link busy both ways: the one-way goodput where both ways
        share one connection (``one_connection``, whose ACKs ride in the data), else
        ``probe_duplex_bps``."""
        return self.goodput_bps if self.one_connection else self.probe_duplex_bps

    @property
    def probe_duplex_bps(self) -> float:
        """Payload rate of a link that also carries the ACKs of an equal flow the other way on
        a connection of its own: measured when the calibration has a ``duplex`` section (the
        duplex probe's two connections), else from the header sizes."""
        if self.duplex_goodput_bps:
            return self.duplex_goodput_bps
        ack_share = ACK_FRAME_BYTES / SEGMENTS_PER_ACK / self.frame_bytes
        return self.goodput_bps / (1.0 + ack_share)

    def bed_payload_bps(self, size_bytes: float) -> float | None:
        """What the whole test bed carries at this rate in messages of ``size_bytes`` when its
        links are not the limit: the payload bits per second summed over the hosts of a
        ring-round table that reaches that size and whose hosts, at that size, moved less than
        ``BED_BOUND_SHARE`` of the duplex payload rate (the machine's cores, busy in the
        kernel's packet work, set the pace, not the shapers). The largest such sum over the
        tables; None when every table ran at its links' rate or none reaches the size (the
        bed's limit is then not known, only that it is above what was seen)."""
        sums = []
        for hosts, table in self.round_costs.items():
            if table.sizes_bytes[-1] < size_bytes:
                continue
            host_bps = 8.0 * size_bytes / table.next_round_s(size_bytes)
            if host_bps < BED_BOUND_SHARE * self.duplex_payload_bps:
                sums.append(hosts * host_bps)
        return max(sums, default=None)

    @property
    def bucket_payload_bytes(self) -> float:
        """The bucket in payload bytes: tbf counts frames, of which this share is payload."""
        return self.burst_bytes * self.duplex_payload_bps / self.rate_bps

    @property
    def startup_table(self) -> list[tuple[int, float]]:
        """Per measured duplex size: the exchange's time beyond the ideal (its bytes less a full
        bucket at the duplex rate, plus the probe's own fixed cost: its exchange of at most one
        segment when measured, else one TCP latency). Not clipped at zero: with it, a round of a
        measured size costs exactly the measured exchange (plus what its bucket lacks, and Gloo's
        latency for the probe's), whatever the rate, so a size whose exchange ran faster than
        the slope keeps its (negative) excess. Empty without a table of at least three sizes
        above one segment (two only give the rate, whose slope cancels the excess)."""
        measured = sorted(self.duplex_transfers)
        base_s = self.tcp_latency_s
        if measured and measured[0][0] <= self.frame_bytes - 66:  # one segment: the fixed cost
            base_s = measured.pop(0)[1]
        if len(measured) < 3:
            return []
        rate_Bps = self.probe_duplex_bps / 8.0  # the probe's own exchanges: two connections
        bucket = self.burst_bytes * self.probe_duplex_bps / self.rate_bps
        return [(n, t - max(0.0, n - bucket) / rate_Bps - base_s) for n, t in measured]

    def startup_excess_s(self, size_bytes: float) -> float:
        """What a round of ``size_bytes`` each way pays beyond the bucket and the duplex rate."""
        return interpolate_excess(self.startup_table, size_bytes)

    @property
    def call_gap_s(self) -> float:
        """The links' idle time before each call of a stream: the measured gap, else (a
        calibration without it) the 1-element all_reduce, the barrier's own length."""
        return self.call_overhead_s if self.stream_gap_s is None else self.stream_gap_s

    def call_gap_at(self, n_bytes: float) -> float:
        """The links' idle time before each call of a stream of ``n_bytes`` calls: the loop
        refills the call's buffer before its barrier, and a larger buffer takes longer. Where
        the bed timed that gap by size (``sized_gaps``), interpolated in bytes between the
        1-element stream's gap (``call_gap_s``, at 4 bytes) and the sizes timed, the last
        stretch's slope beyond them; else ``call_gap_s`` at every size."""
        points = [(4, self.call_gap_s)] + [p for p in self.sized_gaps if p[0] > 4]
        if len(points) < 2:
            return self.call_gap_s
        # the stretch that holds n_bytes; the first or the last beyond the sizes timed
        i = min(max(bisect.bisect_right([n for n, _ in points], n_bytes), 1), len(points) - 1)
        (n0, g0), (n1, g1) = points[i - 1], points[i]
        return max(0.0, g0 + (g1 - g0) * (n_bytes - n0) / (n1 - n0))

    @property
    def gap_refill_bytes(self) -> float:
        """What the bucket refills in the pause before a call or a probe's chain (``call_gap_s``
        at the duplex payload rate)."""
        return self.call_gap_s * self.duplex_payload_bps / 8.0

    def wire_extra_bytes(self, algorithm: str, hosts: int, n_bytes: float) -> tuple[float, float]:
        """Payload bytes' worth of tokens a cycle of a stream of ``algorithm``'s calls takes
        beyond its payload, as (the barrier's, in the gap: ``cycle_wire_bytes``; the call's:
        ``message_wire_bytes`` a message, ``wire_messages``), wire bytes at the duplex payload
        rate's share of the link's."""
        share = self.duplex_payload_bps / self.rate_bps
        call = (self.message_wire_bytes * wire_messages(algorithm, hosts, n_bytes)
                if self.message_wire_bytes else 0.0)
        return self.cycle_wire_bytes.get(hosts, 0.0) * share, call * share

    @property
    def fixed_call_s(self) -> float:
        """What a call costs beyond its rounds: the 1-element all_reduce less its two rounds."""
        return max(0.0, self.call_overhead_s - 2 * self.latency_s)

    def as_dict(self) -> dict:
        engine = ({"engine_round_costs": {str(h): t.as_rows()
                                          for h, t in sorted(self.engine_round_costs.items())}}
                  if self.engine_round_costs else {})  # as stored before the C++ rounds existed
        if self.ring_round_costs:  # as stored before the ring-driven rounds existed
            engine["ring_round_costs"] = {str(h): t.as_rows()
                                          for h, t in sorted(self.ring_round_costs.items())}
        if self.stream_gap_s is not None:  # as stored before the gap was measured
            engine["stream_gap_s"] = self.stream_gap_s
        if self.ring_call_extra_s:
            engine["ring_call_extra_s"] = {str(h): e for h, e in
                                           sorted(self.ring_call_extra_s.items())}
        if self.sized_gaps:  # a bed's inputs; a calibration times no sized gaps
            engine["sized_gaps"] = [[n, g] for n, g in self.sized_gaps]
        if self.notice_queue_s:  # as stored before the queue probe existed
            engine["notice_queue_s"] = self.notice_queue_s
        return {**engine, "rate_bps": self.rate_bps, "goodput_bps": self.goodput_bps,
                "duplex_payload_bps": self.duplex_payload_bps, "latency_s": self.latency_s,
                "call_overhead_s": self.call_overhead_s, "burst_bytes": self.burst_bytes,
                "startup_excess_s": [[n, e] for n, e in self.startup_table],
                "round_costs": {str(h): t.as_rows() for h, t in sorted(self.round_costs.items())}}



def bucket_walk(table: RoundCosts | None, messages_bytes: list[float], tokens: float,
                payload_bps: float, bucket_bytes: float,
                refilled_bytes: float) -> tuple[float, float] | None:
    """Walk a call's rounds of ``messages_bytes`` (each rank's message per round, in order)
    through the shaper's bucket from ``tokens``, over a table from chains run back to back
    (``ChainRounds``; any other table: None). Those chains start on what the pause before them
    refilled (``refilled_bytes``), and the sizes' chains follow one another, so a round they
    paid at the rate (paced, ``ChainRounds.paced``: at least ``PACED_SHARE`` of its bytes' time
    at ``payload_bps``, where that time is at least ``PACED_OVER_LATENCY`` latency-bound rounds,
    both in ``experiments.probe_tables``) may be one the
    call gets through on the bucket's tokens. A round whose bytes the tokens cover, the first
    or a paced one, costs a round on tokens (``ChainRounds.first_on_tokens_s``,
    ``on_tokens_round_s``), less than the chains took by what it saves; a paced round they do
    not cover waits for its tokens and leaves the bucket empty; any other round costs what the
    chains took, the bucket refilling at the rate meanwhile (up to ``bucket_bytes``). Returns
    (seconds saved against the chains, tokens left at the call's end)."""
    if not isinstance(table, ChainRounds):
        return None
    rate_Bps, saving = payload_bps / 8.0, 0.0
    covered = table.sizes_on_tokens(payload_bps, bucket_bytes, refilled_bytes)
    for index, size in enumerate(messages_bytes):
        took_s = table.round_s(index, size)
        paced = table.paced(took_s, size, payload_bps)
        if tokens >= size and (paced or index == 0):
            on_tokens = table.first_on_tokens_s if index == 0 else table.on_tokens_round_s
            on_tokens_s = min(took_s, on_tokens(size, covered))
            saving += took_s - on_tokens_s
            tokens = min(bucket_bytes, tokens - size + on_tokens_s * rate_Bps)
        elif paced:
            tokens = 0.0
        else:
            tokens = min(bucket_bytes, max(0.0, tokens + took_s * rate_Bps - size))
    return saving, tokens


def full_bucket_saving_s(table: RoundCosts | None, messages_bytes: list[float],
                         payload_bps: float, bucket_bytes: float, refilled_bytes: float) -> float:
    """Seconds a call of rounds of ``messages_bytes`` takes less than ``table`` prices it when it
    starts on a full bucket (``bucket_walk`` from ``bucket_bytes`` of tokens; 0 for a table not
    from chains run back to back). ``stream_call_s`` then adds back what a stream of calls
    cannot borrow from the bucket."""
    walked = bucket_walk(table, messages_bytes, bucket_bytes, payload_bps, bucket_bytes,
                         refilled_bytes)
    return 0.0 if walked is None else walked[0]



def interpolate_excess(table: list[tuple[int, float]], size_bytes: float) -> float:
    """Piecewise-linear interpolation of ``table`` ((bytes, seconds), sizes increasing) at
    ``size_bytes``: from (0, 0) to the first point, between points, and the last point's value
    beyond it (past the largest sizes the exchange runs at the rate: its excess no longer grows).
    An empty table gives 0."""
    if not table or size_bytes <= 0:
        return 0.0
    sizes = [n for n, _ in table]
    i = bisect.bisect_left(sizes, size_bytes)
    if i == len(table):
        return table[-1][1]
    (n1, e1) = table[i]
    (n0, e0) = table[i - 1] if i else (0, 0.0)
    return e0 + (e1 - e0) * (size_bytes - n0) / (n1 - n0)


def shaped_rounds_time_s(messages_bytes: list[float], latency_s: float, payload_bps: float,
                         bucket_bytes: float, idle_before_s: float, startup_s=None) -> float:
    """Seconds for rounds of messages sent one after another through a token bucket.

    Each round's message leaves as fast as the bucket allows (its tokens at once, the rest at
    ``payload_bps``) and arrives ``latency_s`` after its last byte left; the next round starts
    then. The bucket refills at the rate while the link idles (``idle_before_s`` before the
    first round, each round's latency after), up to ``bucket_bytes``. ``startup_s(size)``, when
    given, is added to every round (the duplex start-up; the link is busy, so no refill)."""
    rate_Bps = payload_bps / 8.0
    tokens, now = min(bucket_bytes, idle_before_s * rate_Bps), 0.0
    for size in messages_bytes:
        now += max(0.0, size - tokens) / rate_Bps + latency_s
        if startup_s is not None:
            now += startup_s(size)
        tokens = min(bucket_bytes, max(0.0, tokens - size) + latency_s * rate_Bps)
    return now


def allreduce_messages(algorithm: str, hosts: int, n_bytes: float) -> list[float]:
    """Each round's message size (bytes per rank), from the simulator's round list."""
    rounds = ALGORITHMS[SIM_ALGORITHM[algorithm]](hosts, n_bytes)
    return [size for count, size in rounds for _ in range(count)]


GLOO_MAX_SEGMENT_BYTES = 1 << 20  # Gloo's ring: segments of at most 1 MiB, two in flight
ELEMENT_BYTES = 4  # the benchmark's buffers are float32


def wire_messages(algorithm: str, hosts: int, n_bytes: float) -> float:
    """Messages a rank sends in one call, the mean over the ranks (each a send with a header of
    its own, a last partial frame and a receive notice back). The naive ring: one a round. The
    hand-written ring (``real/allreduce.py``): each of its 2(p - 1) steps sends one chunk in
    pieces of at most ``DEFAULT_SEGMENT_BYTES``, so each chunk's pieces travel 2(p - 1) hops
    in all, shared by p ranks. Gloo's own ring cuts the buffer into S segments (S the larger of
    ceil(n / 1 MiB) and 2p, rounded up to a multiple of p) and sends each segment that holds
    data p - 1 hops in each of its two phases."""
    if algorithm not in SIM_ALGORITHM:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r} "
                         f"(known: {', '.join(SIM_ALGORITHM)})")
    elements = int(n_bytes) // ELEMENT_BYTES
    if hosts < 2 or elements == 0:
        return 0.0
    if algorithm == "naive":
        return float(hosts - 1)
    if algorithm == "ring":
        from real.allreduce import DEFAULT_SEGMENT_BYTES, chunk_bounds, segment_bounds
        segment = DEFAULT_SEGMENT_BYTES // ELEMENT_BYTES
        pieces = sum(len(segment_bounds(a, b, segment)) for a, b in chunk_bounds(elements, hosts))
        return 2 * (hosts - 1) * pieces / hosts
    def ceil_div(a: int, b: int) -> int:
        return -(-a // b)
    whole = elements * ELEMENT_BYTES
    segments = ceil_div(max(ceil_div(whole, GLOO_MAX_SEGMENT_BYTES), 2 * hosts), hosts) * hosts
    segment_bytes = ceil_div(ceil_div(whole, segments), ELEMENT_BYTES) * ELEMENT_BYTES
    return 2 * (hosts - 1) * ceil_div(whole, segment_bytes) / hosts


def predict_allreduce_s(algorithm: str, hosts: int, n_bytes: int, net: NetworkInputs,
                        measured_rounds: bool = True) -> float:
    """Seconds for one all-reduce of ``n_bytes`` over ``hosts`` hosts (one rank each), started
    after a barrier: the simulator's rounds of the algorithm at the costs measured on a test bed
    of ``hosts`` hosts when the calibration has them (and ``measured_rounds``), plus the
    additions measured there that a hand-written ring makes between rounds and the hand-written
    ring's own work beyond its rounds (``own_work_s``); otherwise the
    rounds through the shaper, each with the duplex start-up measured at its size, plus the
    fixed cost of a call."""
    if algorithm not in SIM_ALGORITHM:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r} (known: {', '.join(SIM_ALGORITHM)})")
    net = net.for_ring_of(hosts)
    table = net.rounds_for(algorithm, hosts) if measured_rounds else None
    if table is not None:
        reduce_s = (table.reduce_time_s(reduction_sizes(SIM_ALGORITHM[algorithm], hosts, n_bytes))
                    if algorithm in REDUCES_BETWEEN_ROUNDS else 0.0)
        return (reduce_s + own_work_s(algorithm, hosts, net)
                + allreduce_time_s(SIM_ALGORITHM[algorithm], hosts, n_bytes, net.latency_s,
                                   net.duplex_payload_bps, round_costs=table))
    network_s = shaped_rounds_time_s(allreduce_messages(algorithm, hosts, n_bytes), net.latency_s,
                                     net.duplex_payload_bps, net.bucket_payload_bytes,
                                     idle_before_s=net.call_overhead_s,
                                     startup_s=net.startup_excess_s)
    return network_s + net.fixed_call_s


def predict_call_alone_s(algorithm: str, hosts: int, n_bytes: int, net: NetworkInputs,
                         measured_rounds: bool = True) -> float:
    """Seconds for one all-reduce started on a full bucket, as a call alone starts:
    ``predict_allreduce_s`` less what a full bucket saves on the rounds that the probe's chains,
    run back to back, paid at the rate (``full_bucket_saving_s``; nothing for tables from chains
    timed alone, which started on a full bucket themselves)."""
    net = net.for_ring_of(hosts)
    table = net.rounds_for(algorithm, hosts) if measured_rounds else None
    return (predict_allreduce_s(algorithm, hosts, n_bytes, net, measured_rounds)
            - full_bucket_saving_s(table, allreduce_messages(algorithm, hosts, n_bytes),
                                   net.duplex_payload_bps, net.bucket_payload_bytes,
                                   net.gap_refill_bytes))


def call_tail_s(algorithm: str, hosts: int, n_bytes: float, table: RoundCosts | None) -> float:
    """Seconds a call of ``algorithm`` runs on after its last bytes have arrived, the links
    idle: the naive ring's addition of the last buffer it received (``ENDS_WITH_ADDITION``;
    the probe's addition at that size, as ``predict_allreduce_s`` prices it); 0 for the other
    algorithms and for a table without additions."""
    if algorithm not in ENDS_WITH_ADDITION or table is None:
        return 0.0
    return table.reduce_time_s(reduction_sizes(SIM_ALGORITHM[algorithm], hosts, n_bytes)[-1:])


def stream_call_s(alone_s: list[float], sent_bytes: list[float], gap_s: float,
                  payload_bps: float, bucket_bytes: float,
                  left_after: list | None = None, tail_s: list[float] | None = None) -> list[float]:
    """Seconds per call of each algorithm in the benchmark's steady stream of calls: the median
    over a settled rotation of ``stream_rotation_s``, the same arguments."""
    return [statistics.median(s) for s in stream_rotation_s(alone_s, sent_bytes, gap_s,
                                                             payload_bps, bucket_bytes, left_after,
                                                             tail_s)]


def stream_rotation_s(alone_s: list[float], sent_bytes: list[float], gap_s: float,
                      payload_bps: float, bucket_bytes: float,
                      left_after: list | None = None,
                      tail_s: list[float] | None = None,
                      extra_bytes: list[tuple[float, float]] | None = None) -> list[list[float]]:
    """Seconds of each algorithm's calls in one rotation of the benchmark's steady stream, in
    the order it makes them: algorithm ``a`` takes ``alone_s[a]`` when its host's bucket holds
    the tokens for the ``sent_bytes[a]`` it sends, else until the missing tokens have refilled
    at ``payload_bps`` and then its ``tail_s[a]`` (the work after its last bytes arrived:
    ``call_tail_s``; none where not given). The bucket (``bucket_bytes``) refills during the
    ``gap_s`` before every call (the barrier) and starts full; ``extra_bytes[a]``, where given,
    is what a's cycle sends beyond its payload (``NetworkInputs.wire_extra_bytes``): the
    barrier's part leaves the bucket during the gap (a full bucket refills it), the call's with
    the call's payload (the bucket may so owe tokens, which the call pays at the rate and the
    next one finds missing). What a call leaves in it:
    ``left_after[a](tokens)`` where given (``bucket_walk``'s end, from the tokens the call
    started on) and what its tail refills, else the tokens it started on plus the call's length
    at the rate less its bytes (an approximation: a call that waited for tokens in a round leaves
    nothing, whatever its earlier rounds refilled). A tail so moves time from the call after it
    to its own: the links idle through it, and the next call finds the tokens. The calls come in
    ``real.allreduce.call_order``: algorithm k first in iteration k, so a rotation is as many
    iterations as algorithms. The rotation returned is the first after which the bucket holds
    as much as before it (at most ``STREAM_MAX_ROTATIONS``)."""
    from real.allreduce import call_order  # here: the benchmark imports torch, the model need not
    if not len(alone_s) == len(sent_bytes) > 0:
        raise ValueError(f"need one call time per algorithm and its bytes, got {len(alone_s)} "
                         f"and {len(sent_bytes)}")
    if not payload_bps > 0:
        raise ValueError(f"the payload rate must be positive, got {payload_bps} bit/s")
    n, rate_Bps = len(alone_s), payload_bps / 8.0
    left_after = left_after or [None] * n
    tail_s = [0.0] * n if tail_s is None else tail_s
    if len(tail_s) != n or not all(t >= 0 for t in tail_s):
        raise ValueError(f"need one tail of at least 0 s per algorithm, got {tail_s}")
    extra_bytes = [(0.0, 0.0)] * n if extra_bytes is None else extra_bytes
    if len(extra_bytes) != n or not all(len(e) == 2 and min(e) >= 0 for e in extra_bytes):
        raise ValueError(f"need one (barrier, call) pair of at least 0 bytes per algorithm, "
                         f"got {extra_bytes}")
    order = call_order(n, n)  # one rotation: n iterations, each algorithm first once

    def rotation(tokens: float) -> tuple[float, list[list[float]]]:
        seconds: list[list[float]] = [[] for _ in range(n)]
        for _, a in order:
            barrier, extra = extra_bytes[a]
            tokens = min(bucket_bytes, tokens + gap_s * rate_Bps - barrier) - extra
            call_s = max(alone_s[a], (sent_bytes[a] - tokens) / rate_Bps + tail_s[a])
            owed = min(0.0, tokens)
            tokens = (min(bucket_bytes, max(0.0, left_after[a](tokens - owed) + owed)
                          + tail_s[a] * rate_Bps)
                      if left_after[a] is not None else
                      min(bucket_bytes, max(0.0, tokens + call_s * rate_Bps - sent_bytes[a])))
            seconds[a].append(call_s)
        return tokens, seconds

    tokens = bucket_bytes
    for _ in range(STREAM_MAX_ROTATIONS):
        before = tokens
        tokens, seconds = rotation(tokens)
        if abs(tokens - before) <= 1e-9 * max(bucket_bytes, 1.0):
            break
    return seconds


def predict_allreduce_stream_s(algorithms: list[str], hosts: int, n_bytes: int, net: NetworkInputs,
                               measured_rounds: bool = True, walk_calls: bool = True,
                               call_tails: bool = True) -> dict[str, float]:
    """Seconds per call of each of ``algorithms`` as ``real/allreduce.py`` times them at one
    size: taking turns (in the order given, as ``--algorithms``), a barrier before each call
    (``predict_stream_rotation_s``, the same arguments; the median of each algorithm's calls)."""
    rotation = predict_stream_rotation_s(algorithms, hosts, n_bytes, net, measured_rounds,
                                         walk_calls, call_tails)
    return {a: statistics.median(s) for a, s in zip(algorithms, rotation)}


def predict_stream_rotation_s(algorithms: list[str], hosts: int, n_bytes: int,
                              net: NetworkInputs, measured_rounds: bool = True,
                              walk_calls: bool = True,
                              call_tails: bool = True) -> list[list[float]]:
    """Seconds of each of ``algorithms``' calls in a settled rotation of ``real/allreduce.py``'s
    stream at one size (``stream_rotation_s``): each call alone costs ``predict_call_alone_s``;
    the stream adds what the shaper's bucket cannot lend (the gap between calls of that size:
    ``NetworkInputs.call_gap_at``), and a call leaves the bucket as ``bucket_walk`` walks its
    rounds from the tokens it started on (``bucket_left_after``; without ``walk_calls``, as
    the call's length at the rate counts it, the ablation's older model) and as its tail
    refills it (``call_tail_s``; none without ``call_tails``, the ablation's older model). Each
    cycle also sends the wire's bytes beyond its payload where the inputs have them
    (``NetworkInputs.wire_extra_bytes``; none by default). On 2 hosts the rate is the one-way
    goodput (``NetworkInputs.for_ring_of``)."""
    net = net.for_ring_of(hosts)
    alone = [predict_call_alone_s(a, hosts, n_bytes, net, measured_rounds) for a in algorithms]
    sent = [sum(allreduce_messages(a, hosts, n_bytes)) for a in algorithms]
    tables = [net.rounds_for(a, hosts) if measured_rounds else None for a in algorithms]
    left = [refilled_after(bucket_left_after(t if walk_calls else None,
                                             allreduce_messages(a, hosts, n_bytes), net),
                           own_work_s(a, hosts, net) if t is not None else 0.0, net)
            for a, t in zip(algorithms, tables)]
    tails = [call_tail_s(a, hosts, n_bytes, t) if call_tails else 0.0
             for a, t in zip(algorithms, tables)]
    extra = [net.wire_extra_bytes(a, hosts, n_bytes) for a in algorithms]
    return stream_rotation_s(alone, sent, net.call_gap_at(n_bytes), net.duplex_payload_bps,
                             net.bucket_payload_bytes, left, tails, extra)


def bucket_left_after(table: RoundCosts | None, messages_bytes: list[float], net: NetworkInputs):
    """tokens -> the tokens a call of rounds of ``messages_bytes`` leaves in the bucket when it
    starts on that many (``bucket_walk``'s end); None for a table not from chains run back to
    back (the stream then counts the call's length at the rate)."""
    if not isinstance(table, ChainRounds):
        return None

    def left(tokens: float) -> float:
        return bucket_walk(table, messages_bytes, tokens, net.duplex_payload_bps,
                           net.bucket_payload_bytes, net.gap_refill_bytes)[1]
    return left


def ring_call_extra(rows: list[dict]) -> float:
    """What a call of the hand-written ring costs beyond its ring-driven rounds, from a probe's
    ``calls_results`` (``ring_probe.call_turns``): at its smallest size a rank, where the rounds
    are latency-bound, the median over the turns of the ring's call less the chain of its rounds
    timed just before it in the same turn (the slowest rank's each; both probes' turns where
    they bracket a point: a slow stretch slows both of a turn), at least 0. The chain prices
    the rounds; this is the rest: the call's bookkeeping between rounds, and, in the probes
    made before the ring planned its buffers once (``real.allreduce.RingAllReduce``), its
    set-up (its chunks, segments and scratch buffers), which the chain, with its buffers laid
    out before its timer, does not do. Before the plan, on a 16-core machine, a core per host
    at 1000 Mbit/s: 0.10-0.14 ms on 4 hosts and 0.21-0.25 ms on 8, in three launches each
    (``experiments/results/calls-16cores/``); on the 2-core machine 0.08-0.10 ms on 2 hosts
    and 0.28 on 4 (``experiments/results/quick-2c6a66a/``)."""
    row = min(rows, key=lambda r: r["bytes"])
    return max(0.0, statistics.median(r - c for r, c in zip(row["ring_turns_s"],
                                                              row["chain_turns_s"], strict=True)))


def own_work_s(algorithm: str, hosts: int, net: NetworkInputs) -> float:
    """Seconds an ``algorithm`` call spends on its own work beyond the rounds its table prices,
    the links idle: the hand-written ring's ``ring_call_extra_s`` where its rounds are the
    ring-driven ones and the inputs charge it (``price_ring_own_work``); 0 otherwise."""
    if algorithm != "ring" or hosts not in net.ring_round_costs or not net.price_ring_own_work:
        return 0.0
    return net.ring_call_extra_s.get(hosts, 0.0)


def refilled_after(left, idle_s: float, net: NetworkInputs):
    """``left`` (tokens -> the tokens a call leaves: ``bucket_left_after``) with what the bucket
    refills while the call's own work (``idle_s``, the links idle) runs; ``left`` itself where
    there is none or it is None."""
    if left is None or idle_s <= 0:
        return left
    gained = idle_s * net.duplex_payload_bps / 8.0
    return lambda tokens: min(net.bucket_payload_bytes, left(tokens) + gained)
