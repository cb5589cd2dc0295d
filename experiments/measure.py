"""Runs on the test bed: calibration per rate, and one test bed per experiment point.

Every rank is started directly on its host (``RANK``/``WORLD_SIZE`` from the test bed's
``{rank}``/``{hosts}``, ``MASTER_ADDR``/``MASTER_PORT`` from its environment) rather than through
torchrun: the process group is the same, and start-up on a busy 2-core machine is seconds shorter.
Every rank runs one torch thread (``--threads 1``), as torchrun would set for several ranks on a
node: the hosts share the machine's cores, and a rank's spare OpenMP threads spinning after an
addition took the cores the other ranks needed (the hand-written rings on 4 hosts at 200 Mbit/s
ran 1.5-1.7x slower with torch's default of a thread per core).
A sync run with ``launcher="torchrun"`` (the ``multinode`` experiment) starts one torchrun agent
per host instead, joined by c10d rendezvous at host 0, exactly as on a real cluster.
A test bed that runs several scripts in turn (a ring probe, the measured run, a probe again:
``run_bracketed``) runs them as ``real/testbed/sequence.py``'s steps, each a process forked from
one interpreter per host that imported torch once, where each ``python SCRIPT`` would import it
again (on a 4-host bed sharing 2 cores, about 7 s of wall time a script).
"""

from __future__ import annotations

import math
import shlex
import statistics
import sys
import time
from pathlib import Path

from dsgd_sim.argparse_oneline import argparse_type
from dsgd_sim.units import parse_bandwidth, parse_count
from real.testbed import TestbedConfig, TestbedError, scratch_testbed, timeline
from real.testbed.calibrate import (LINK_PAUSES_S, calibrate, slow_link_reason, slowest_share,
                                    transfer_shares)
from real.testbed.config import (DEFAULT_HOST_CORES, HOST_CORES_HELP, HOST_CORES_POLICIES,
                                 MAX_HOSTS)

from .core_speed import quantile
from .probe_tables import DRIVERS, merge_halves
from .configs import (PROBE_ORDER_HELP, PROBE_ORDERS, AllReduceConfig, AsyncRunConfig,
                      SyncRunConfig, bed_label, push_window, warmup_updates)
from .ring_probe import ENGINE_MAX_BYTES, SIZE_GRID, chain_rounds

REPO = Path(__file__).resolve().parent.parent
CALIBRATION_SIZES = [2_000_000, 16_000_000]
# quick: the rate from a shorter pair (at 50 Mbit/s the 16 MB transfers alone take 16 s of the
# quick run's ten minutes; 6 MB apart still take a second at that rate)
CALIBRATION_SIZES_QUICK = [2_000_000, 8_000_000]
# duplex exchanges at the sizes of the experiments' all-reduce rounds (ring: n / hosts; naive: n)
# and two large ones for the rate; the model interpolates the start-up cost between them. The
# 1-byte exchange is the probe's own fixed cost (TCP latency, a thread start), taken off the rest.
DUPLEX_SIZES = [1, 16_000, 32_000, 64_000, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000, 16_000_000]
# quick: up to 4 MB (its rounds send at most 4 MB; the rate from 2 MB to 4 MB): seven 16 MB
# exchanges at 50 Mbit/s take 19 s
DUPLEX_SIZES_QUICK = DUPLEX_SIZES[:-1]


QUIET_ROUND_TRIP_S = 1e-3
"""The longest median round trip a calibration's 2 hosts may take (``busy_machine_reason``)."""
CALIBRATION_PAUSES_S = (30.0, 60.0)
"""The pauses between a calibration taken on a busy machine and the next try; after the last
try the run stops."""

# ring rounds: the probe's own grid (experiments/ring_probe.py, SIZE_GRID), up to past the
# largest round an experiment sends (naive ring: the whole buffer)
ROUND_SIZES_QUICK = list(SIZE_GRID)
ROUND_SIZES_FULL = ROUND_SIZES_QUICK + [16 << 20]
CONGESTION_CONTROL = "reno"
"""Every test bed's TCP congestion control (``TestbedConfig.congestion_control``; None: the
machine's). ``experiments/run.py --congestion-control`` sets it for a whole run."""
SCHEDULING = "batch"
"""Every test bed's CPU scheduling policy (``TestbedConfig.scheduling``);
``experiments/run.py --scheduling`` sets it for a whole run."""
HOST_CORES = DEFAULT_HOST_CORES
"""How every test bed places its hosts on the machine's cores (``TestbedConfig.host_cores``);
``experiments/run.py --host-cores`` sets it for a whole run."""
ADDRESS_LAYOUT = "fixed"
"""Every test bed's processes' address layout (``TestbedConfig.address_layout``);
``experiments/run.py --address-layout`` sets it for a whole run."""
PROBE_ORDER = PROBE_ORDERS[0]
"""How every ring probe orders its chains of different sizes (``ring_probe.py --order``):
``blocks`` (each size's chains one after another, the default) or ``interleaved`` (one of each
size, then again: every stored grid that does not name an order); ``experiments/run.py
--probe-order`` sets it for a whole run. Interleaved, the 8-host calls at 1000 Mbit/s leaned
over their price (the 64 KiB chains slow the 32 KiB ones after them); in the two full grids made
in blocks every such call held within 6.4% (the ``allreduce`` section of
``experiments/LOG.md``)."""
PROBE_IDLE = False
"""Whether every ring probe idles before each of its chains (``probe_idle_s``) rather than
running them back to back; ``experiments/run.py --probe-idle`` sets it for a whole run. Off by
default: on 8 hosts sharing 2 cores the chains after an idle ran faster than the calls they
priced, which came out 12-33% low (the ``allreduce`` section of ``experiments/LOG.md``)."""


def parse_bed_hosts(text: str) -> int:
    """A test bed's host count: a count from 2 to the test bed's most (``ValueError`` naming the
    text else)."""
    hosts = parse_count(text)
    if not 2 <= hosts <= MAX_HOSTS:
        raise ValueError(f"a test bed has 2 to {MAX_HOSTS} hosts, got {text!r}")
    return hosts


def parse_bed_rate(text: str) -> float:
    """A test bed link's rate in bit/s: a rate with its unit that the test bed's shaper takes
    (``ValueError`` naming the text else, with the test bed's reason)."""
    rate = parse_bandwidth(text)
    try:
        testbed_config(2, rate)  # its own checks: a rate tc can shape, a bucket that fits
    except ValueError as error:
        raise ValueError(f"{text!r}: {error}") from None
    return rate


def add_bed_arguments(parser, hosts: int) -> None:
    """``--hosts`` (default ``hosts``, at least 2) and ``--bandwidth`` (default 1000 Mbit/s) of
    a tool that builds its own test bed."""
    parser.add_argument("--hosts", type=argparse_type(parse_bed_hosts, "hosts"), default=hosts,
                        help="hosts of the test bed (default %(default)s)")
    parser.add_argument("--bandwidth", type=argparse_type(parse_bed_rate, "bandwidth"),
                        default=parse_bandwidth("1000Mbps"), help="each link's rate (default 1000Mbps)")


def add_host_cores_argument(parser) -> None:
    """``--host-cores`` (``TestbedConfig.host_cores``) of a tool that builds test beds; the tool
    sets ``HOST_CORES`` from it."""
    parser.add_argument("--host-cores", choices=HOST_CORES_POLICIES, default=DEFAULT_HOST_CORES,
                        help=HOST_CORES_HELP)


def add_probe_order_argument(parser) -> None:
    """``--probe-order`` (``PROBE_ORDER``) of a tool whose test beds run the ring probe; the tool
    sets ``PROBE_ORDER`` from it."""
    parser.add_argument("--probe-order", choices=PROBE_ORDERS, default=PROBE_ORDERS[0],
                        help=PROBE_ORDER_HELP)


def testbed_config(hosts: int, bandwidth_bps: float, **settings) -> TestbedConfig:
    """The test bed of ``hosts`` hosts at ``bandwidth_bps`` that every experiment and calibration
    runs on (``settings``: any other ``TestbedConfig`` field, a faster server host for one)."""
    return TestbedConfig(hosts=hosts, bandwidth_bps=bandwidth_bps,
                         congestion_control=CONGESTION_CONTROL, scheduling=SCHEDULING,
                         host_cores=HOST_CORES, address_layout=ADDRESS_LAYOUT, **settings)


# which hosts of an experiment point run a ring all-reduce (the async server runs none); the
# all-reduce points time their own rounds on their own test bed (``measure_allreduce``)
RING_HOSTS = {"sync": "hosts", "ps_vs_ring": "workers", "async_vs_sync": "workers"}


def runs_ring_probes(experiments) -> bool:
    """Whether running ``experiments`` times ring rounds (``ring_probe.py``): every all-reduce
    point does on its own bed, and the calibration does for every point that runs a ring."""
    return any(p.kind == "allreduce" or p.kind in RING_HOSTS for e in experiments for p in e.points)


def ring_hosts(points, bandwidth_bps: float) -> list[int]:
    """The host counts at ``bandwidth_bps`` whose ring rounds the predictions need."""
    return sorted({getattr(p, RING_HOSTS[p.kind]) for p in ring_points(points, bandwidth_bps)})


def ring_bytes(points, bandwidth_bps: float) -> int | None:
    """The largest gradient those rings all-reduce (a round of it sends less); None: none."""
    from real.models import build_model, grad_bytes
    models = {p.model for p in ring_points(points, bandwidth_bps)}
    return max((grad_bytes(build_model(m, 0)) for m in models), default=None)


def ring_points(points, bandwidth_bps: float) -> list:
    """The points at ``bandwidth_bps`` that run a ring all-reduce on calibrated rounds."""
    return [p for p in points if p.kind in RING_HOSTS and p.bandwidth_bps == bandwidth_bps]


def calibrate_rate(bandwidth_bps: float, quick: bool, hosts: list[int] = (),
                   largest_bytes: int | None = None) -> dict:
    """The calibration record of a 2-host test bed at ``bandwidth_bps`` (network only), with a
    ``duplex`` section (the payload rate when both hosts send to each other at once) and a
    ``rounds`` section: per host count in ``hosts``, ring rounds timed on a test bed of that many
    hosts (``measure_rounds``), on the probe's grid up to ``largest_bytes`` (``ring_bytes``;
    None: the whole grid). A round's cost comes from the two sizes around it, so sizes past
    the first that reaches the largest round change no prediction; at 50 Mbit/s on 8 hosts a
    chain of 16 MiB rounds alone takes 38 s.

    Up to three attempts: one taken on a busy machine (``busy_machine_reason``) is taken again
    after ``CALIBRATION_PAUSES_S`` and never kept, and the run stops (``TestbedError``) if the
    last is busy too, unless an earlier attempt was quiet; on a quiet one the duplex rate is
    measured too, and one whose link ran slow (``slow_link_reason``) is taken again after
    ``LINK_PAUSES_S``. Of the quiet attempts the one whose slowest transfer ran nearest the rate
    is kept. The record says how many attempts there were (``attempts``) and each quiet one's
    ``transfer_shares`` (``link_rate_shares``); the pauses go by the attempt's number."""
    config = testbed_config(2, bandwidth_bps)
    where = f"calibration at {bandwidth_bps / 1e6:g} Mbit/s"
    kept, checks = None, []
    for attempt in range(1, len(CALIBRATION_PAUSES_S) + 2):
        with timeline.span("TCP and Gloo transfers", "calibration", attempt=attempt):
            record = calibrate(config, CALIBRATION_SIZES_QUICK if quick else CALIBRATION_SIZES,
                               pings=100 if quick else 200, repeats=3)
        reason = busy_machine_reason(record)
        if reason is not None:
            if attempt > len(CALIBRATION_PAUSES_S) and kept is not None:  # slow, then busy
                reason = slow_link_reason(kept)
                break
            if attempt > len(CALIBRATION_PAUSES_S):
                raise TestbedError(f"{where}: {reason}, in {attempt} attempts: another process "
                                   f"is keeping the cores busy; stop it and run again")
            pause_s, what = CALIBRATION_PAUSES_S[attempt - 1], "the machine is busy"
        else:
            with timeline.span("duplex", "calibration", attempt=attempt):
                record["duplex"] = measure_duplex(config, sizes=DUPLEX_SIZES_QUICK if quick
                                                  else DUPLEX_SIZES)
            checks.append(transfer_shares(record))
            if kept is None or slowest_share(record) > slowest_share(kept):
                kept = record
            reason = slow_link_reason(record)
            if reason is None or attempt > len(LINK_PAUSES_S):
                break
            pause_s, what = LINK_PAUSES_S[attempt - 1], "the link ran under its rate"
        print(f"{where}: {reason}: {what}; trying again in {pause_s:g} s",
              file=sys.stderr, flush=True)
        with timeline.span("pause", "calibration", why=what):
            time.sleep(pause_s)
    if reason is not None:
        tries = "its one attempt" if len(checks) == 1 else f"each of its {len(checks)} attempts"
        print(f"{where}: the link ran under its rate in {tries} on a quiet machine; going on "
              f"with the nearest ({slow_link_reason(kept)}): the calls at this rate may be "
              f"priced over", file=sys.stderr, flush=True)
    record = kept
    record["attempts"] = attempt
    record["link_rate_shares"] = checks
    with timeline.span("queue", "calibration"):
        record["queue"] = measure_queue(testbed_config(3, bandwidth_bps))
    sizes = round_sizes_up_to(largest_bytes or math.inf, quick)
    record["rounds"] = {}
    for h in hosts:
        with timeline.span(f"ring rounds on {h} hosts", "calibration"):
            record["rounds"][str(h)] = measure_rounds(testbed_config(h, bandwidth_bps), sizes)
    return record


def busy_machine_reason(record: dict) -> str | None:
    """Why a 2-host calibration record was taken while other work kept the cores busy, or None.

    Each of the calibration's 2 hosts has a core of its own, and on a quiet machine a round trip
    between them takes 0.02-0.54 ms (the stored grids' calibrations, TCP and Gloo). Under
    ``SCHED_BATCH`` a woken host does not preempt another process running on its core: it waits
    for the scheduler's tick (4 ms at 250 Hz), so on a busy core every round trip takes ~4 ms.
    Such a record misprices every row that takes an input from it: a full grid whose
    calibration ran beside another process's file searches had 4.0 ms round trips and a duplex
    rate of 905 Mbit/s at 1000 Mbit/s (947 in the grid before), and priced the 2-host calls of
    1 to 16 MB there 5.7-10.2% over their measurements (``experiments/LOG.md``)."""
    for name, spread in (("TCP", record.get("rtt_s")),
                         ("Gloo", record.get("gloo", {}).get("rtt_s"))):
        if spread and spread["median"] >= QUIET_ROUND_TRIP_S:
            return (f"{name}'s round trip between its 2 hosts took {spread['median'] * 1e3:.2f} ms "
                    f"(median of {spread['count']}), where an idle machine takes under "
                    f"{QUIET_ROUND_TRIP_S * 1e3:g} ms")
    return None


def measure_rounds(config: TestbedConfig, sizes: list[int], repeats: int = 5) -> dict:
    """``experiments/ring_probe.py`` on every host of a fresh test bed, in chains as long as a
    ring all-reduce there (``chain_rounds``): per size, the first and the next round's seconds
    (slowest rank, median over chains), and what was run."""
    step = probe_step(sizes, repeats, "rounds.json", chain_rounds(config.hosts),
                      engine_max_bytes(config.bandwidth_bps), idle_s=probe_idle_s(config))
    return _run(config, host_command(step), "rounds.json", timeout_s=900)


# the probe times rounds from C++ too (as Gloo's own all-reduce makes them) up to the size a
# link carries in this long: a Python-driven round pays the interpreter's wake-ups on top, 0.2-0.3
# ms a round on 8 hosts sharing 2 cores, which a round this long carries within 2%
ENGINE_ROUND_S = 0.016
PROBE_WAKE_S = 1e-3  # probe_idle_s: the ranks' wake-ups from the idle, on top of the refill


def engine_max_bytes(bandwidth_bps: float) -> int:
    """The largest round the probe times from C++ on a test bed at ``bandwidth_bps``: what the
    link carries in ``ENGINE_ROUND_S``, at least ``ring_probe.ENGINE_MAX_BYTES`` (50 Mbit/s: 100
    kB, of the probe's grid up to 64 KiB, as before; 200: 400 kB, up to 256 KiB; 1000: 2 MB,
    up to 1 MiB)."""
    return max(ENGINE_MAX_BYTES, int(bandwidth_bps * ENGINE_ROUND_S / 8))


def probe_idle_s(config: TestbedConfig) -> float:
    """How long the probe idles before each chain on ``config``'s test bed
    (``ring_probe.py --idle``) in a run with ``PROBE_IDLE``, else 0 (chains back to back): twice
    the time the slowest link's bucket takes to refill, and a millisecond for the ranks'
    wake-ups (1000 and 200 Mbit/s: 3 ms; 50 Mbit/s, a bucket of 10 frames: 5.8 ms). Every chain
    then starts on a full bucket, as a call alone does, and the calls are priced from the chains'
    ends (``experiments.probe_tables.priced_from_ends``)."""
    if not PROBE_IDLE:
        return 0.0
    slowest_s = max(config.refill_s(config.rate_bps(rank)) for rank in range(config.hosts))
    return 2 * slowest_s + PROBE_WAKE_S


def probe_step(sizes: list[int], repeats: int, json_name: str, rounds: int,
               engine_max: int = ENGINE_MAX_BYTES, ring: bool = False, idle_s: float = 0.0,
               stream_gaps: int = 0, gap_sizes: tuple[int, ...] = (),
               calls: tuple[int, ...] = ()) -> str:
    """``experiments/ring_probe.py`` at ``sizes`` on every host, chains of ``rounds`` rounds,
    driven from Python and (``--engine-rounds``, the sizes up to ``engine_max``) from C++ as
    Gloo's own ring drives them, and with ``ring`` (``--ring-rounds``, the same sizes) as
    ``real/allreduce.py``'s ring drives them, each chain after ``idle_s`` (``--idle``), then
    with ``stream_gaps`` a stream of that many 1-element calls (``--stream-gaps``), and one at
    each of ``gap_sizes``, the benchmark's buffer sizes (``--gap-sizes``), and with ``calls``
    the hand-written ring's calls against their chains at those sizes a rank (``--calls``),
    writing ``{out}/json_name``; the chains in the run's ``PROBE_ORDER``. A ``script_step``."""
    args = ["--sizes", ",".join(f"{n}B" for n in sizes), "--rounds", str(rounds),
            "--repeats", str(repeats), "--threads", "1", "--timeout", "120s", "--engine-rounds",
            *(["--ring-rounds"] if ring else []), "--engine-max", f"{engine_max}B",
            "--idle", f"{idle_s * 1e3:.3f}ms",
            *(["--stream-gaps", str(stream_gaps)] if stream_gaps else []),
            *(["--gap-sizes", ",".join(f"{n}B" for n in gap_sizes)]
              if stream_gaps and gap_sizes else []),
            *(["--calls", ",".join(f"{n}B" for n in calls)] if calls else []),
            *(["--order", PROBE_ORDER] if PROBE_ORDER != PROBE_ORDERS[0] else [])]
    return script_step("experiments/ring_probe.py", args, json_name)


def bracket(before: dict, after: dict) -> dict:
    """One round table from two ``ring_probe.py`` records of the same sizes, taken before and
    after a measurement: per size the median over the chains of both (one probe split in two
    halves around the measurement, so that a burst of load during one half moves the median
    less than it moves that half's; a round paced by the link that one half ran more than a
    fifth slower, from the other alone: ``experiments.probe_tables.steady_halves``), for the
    Python-driven rounds (``results``) and the
    C++-driven ones and the ring-driven ones where both records have them (``engine_results``,
    ``ring_results``); both records kept. The gaps of a stream of calls (``stream_gap_s``)
    where both records have them: both probes' together, the first probe's first; so too per
    size the gaps of the streams at the benchmark's sizes (``sized_stream_gaps``, whose
    records say what their calls reduced, ``calls``, the same in both probes, and how many of
    the gaps are the first probe's, ``before_gaps``: a stream of whole calls makes as many as
    fit in its time)."""
    merged = {**before, "results": merge_halves(before["results"], after["results"]),
              "before": before["results"], "after": after["results"]}
    if before.get("stream_gap_s") and after.get("stream_gap_s"):
        merged["stream_gap_s"] = before["stream_gap_s"] + after["stream_gap_s"]
    else:
        merged.pop("stream_gap_s", None)
    if before.get("sized_stream_gaps") and after.get("sized_stream_gaps"):
        pairs = list(zip(before["sized_stream_gaps"], after["sized_stream_gaps"]))
        if len(before["sized_stream_gaps"]) != len(after["sized_stream_gaps"]) \
                or any(b["bytes"] != a["bytes"] for b, a in pairs):
            raise ValueError("probes whose streams refilled different sizes")
        if any(b.get("calls") != a.get("calls") for b, a in pairs):
            raise ValueError("probes whose streams made different calls (ring_probe.py "
                             "--gap-calls)")
        merged["sized_stream_gaps"] = [{**b, "gaps_s": b["gaps_s"] + a["gaps_s"],
                                        "before_gaps": len(b["gaps_s"])} for b, a in pairs]
    else:
        merged.pop("sized_stream_gaps", None)
    if before.get("calls_results") and after.get("calls_results"):
        merged["calls_results"] = merge_call_turns(before["calls_results"],
                                                   after["calls_results"])
    else:
        merged.pop("calls_results", None)
    for driver in DRIVERS:
        if f"{driver}_results" in before and f"{driver}_results" in after:
            merged[f"{driver}_results"] = merge_halves(before[f"{driver}_results"],
                                                       after[f"{driver}_results"])
            merged[f"{driver}_before"] = before[f"{driver}_results"]
            merged[f"{driver}_after"] = after[f"{driver}_results"]
        else:
            merged.pop(f"{driver}_results", None)
    return merged


def merge_call_turns(before: list[dict], after: list[dict]) -> list[dict]:
    """Two probes' ``calls_results`` (``ring_probe.call_turns``) as one: per size both probes'
    turns, and the median of each figure over them."""
    if [r["bytes"] for r in before] != [r["bytes"] for r in after]:
        raise ValueError("probes whose calls had different sizes (ring_probe.py --calls)")
    rows = []
    for b, a in zip(before, after):
        row = dict(b)
        for key in [k for k in b if k.endswith("_turns_s")]:
            row[key] = b[key] + a[key]
            row[key[:-len("_turns_s")] + "_s"] = statistics.median(row[key])
        rows.append(row)
    return rows


def round_sizes_up_to(largest_bytes: int, quick: bool) -> list[int]:
    """The probe's grid (``ROUND_SIZES_QUICK``/``_FULL``) up to the first size that reaches
    ``largest_bytes``: beyond the last size the round costs extend its slope."""
    grid = ROUND_SIZES_QUICK if quick else ROUND_SIZES_FULL
    reach = next((i for i, n in enumerate(grid) if n >= largest_bytes), len(grid) - 1)
    return grid[:reach + 1]


def refill_idle_s(config: TestbedConfig) -> float:
    """The pause a network probe takes before each transfer: twice the time the shaper's bucket
    takes to refill, and 20 ms."""
    return 2 * config.refill_s(config.bandwidth_bps) + 0.02


def run_network_probe(config: TestbedConfig, script: str, what: str, flags: str) -> list:
    """``experiments/<script> <flags>`` on every host of a fresh bed of ``config``: the hosts'
    results. A failure is one ``TestbedError`` naming the ``what`` probe and the last line a host
    wrote to stderr (the one that failed first says why; the others, that it went)."""
    command = (f"{shlex.quote(sys.executable)} "
               f"{shlex.quote(str(REPO / 'experiments' / script))} {flags}")
    with scratch_testbed(config) as bed:
        result = bed.run(command, timeout_s=300)
    if not result.ok:
        tail = next((line for host in result.hosts
                     for line in reversed(host.stderr().strip().splitlines())), "(no output)")
        raise TestbedError(f"{what} probe failed (exit {result.exit_status()}): {tail}")
    return result.hosts


def measure_duplex(config: TestbedConfig, repeats: int = 7, sizes: list[int] = DUPLEX_SIZES) -> dict:
    """``duplex_probe.py`` on both hosts: per size the median (over repeats) of the slower host's
    time, and the incremental payload rate (n2 - n1) / (t2 - t1) each way between the two
    largest sizes (the start-up is over by then; what remains of it cancels)."""
    hosts = run_network_probe(config, "duplex_probe.py", "duplex",
                              f"--peer host$((1 - {{rank}})) --sizes {','.join(map(str, sizes))} "
                              f"--repeats {repeats} --idle {refill_idle_s(config):.4f} "
                              f"--json {{out}}/duplex.json")
    per_host = [h.json["duplex.json"]["bulk"] for h in hosts]
    medians = [statistics.median(max(times) for times in zip(*(host[i]["seconds"] for host in per_host)))
               for i in range(len(sizes))]
    goodput_bps = (sizes[-1] - sizes[-2]) * 8 / (medians[-1] - medians[-2])
    return {"goodput_bps": goodput_bps, "payload_efficiency": goodput_bps / config.bandwidth_bps,
            "transfers": [{"bytes": n, "median_s": t} for n, t in zip(sizes, medians)]}


QUEUE_PROBE_BYTES = 1_000_000
"""The queue probe's long message, at least: about a reply of the experiments' mlp (940,584
bytes), and longer where that takes under ``QUEUE_PROBE_S`` (``queue_probe_bytes``)."""
QUEUE_PROBE_S = 0.04
"""The least time the queue probe's long message takes at the rate: a round trip behind it takes
5 or 6 ms, so its counted part (``QUEUE_WINDOW``) holds four or more."""
QUEUE_PROBE_REPEATS = 5
QUEUE_WINDOW = (0.1, 0.8)
"""The part of each long message (fractions of its time) whose round trips count: past the
first tenth TCP has built its queue, and in the last fifth the queue drains with the message."""


def queue_probe_bytes(bandwidth_bps: float) -> int:
    """The queue probe's long message at ``bandwidth_bps``: 1 MB, or ``QUEUE_PROBE_S`` at the
    rate where that is more (5 MB at 1000 Mbit/s)."""
    return max(QUEUE_PROBE_BYTES, round(QUEUE_PROBE_S * bandwidth_bps / 8))


def measure_queue(config: TestbedConfig, repeats: int = QUEUE_PROBE_REPEATS) -> dict:
    """``queue_probe.py`` on a 3-host bed: how long a small message from host 0 waits behind a
    long one host 0 is sending (``summarize_queue``)."""
    hosts = run_network_probe(config, "queue_probe.py", "queue",
                              f"--bytes {queue_probe_bytes(config.bandwidth_bps)}B "
                              f"--repeats {repeats} --idle {refill_idle_s(config):.4f}s "
                              f"--json {{out}}/queue.json")
    return summarize_queue(hosts[0].json["queue.json"])


def summarize_queue(record: dict, window: tuple[float, float] = QUEUE_WINDOW) -> dict:
    """From host 0's ``queue_probe.py`` record: every round trip sent within ``window`` of a
    long message, less the median of that repeat's round trips with nothing in flight.
    ``behind_bulk_s``: their median, what the simulator's notice waits (``notice_queue_s``)."""
    waits = []
    for repeat in record["repeats"]:
        base_s = statistics.median(repeat["idle_rtt_s"])
        lo, hi = (f * repeat["transfer_s"] for f in window)
        waits += [rtt - base_s for sent, rtt in repeat["loaded"] if lo <= sent <= hi]
    if not waits:
        raise TestbedError(f"queue probe: no round trip fell within {window[0]:.0%}-{window[1]:.0%} "
                           f"of a {record['bytes']}-byte message; nothing to summarize")
    ordered = sorted(waits)
    return {"behind_bulk_s": statistics.median(ordered), "p10_s": quantile(ordered, 0.1),
            "p90_s": quantile(ordered, 0.9),
            "count": len(waits), "bytes": record["bytes"], "window": list(window),
            "transfer_s": [r["transfer_s"] for r in record["repeats"]]}


# real/allreduce.py's flags wherever an experiment runs it: one torch thread a rank, a timeout
# no shaped link reaches, and Gloo, the engine the model prices (NCCL on a machine with GPUs).
BENCHMARK_FLAGS = ("--threads", "1", "--timeout", "120s", "--backend", "gloo")


RANK_ENV = "RANK={rank} WORLD_SIZE={hosts}"  # every host's rank, from the test bed's placeholders


SEED: int | None = None
"""``experiments/run.py --seed``: the seed given to every trainer and benchmark the run starts
(``SEEDED_SCRIPTS``: model init, data and its order, emulated compute draws, buffers' contents);
None: each script's own default, 0."""
SEEDED_SCRIPTS = ("real/sync.py", "real/async_ps.py", "real/allreduce.py")


def seeded(script: str, args: list[str]) -> list[str]:
    """``args``, and ``--seed SEED`` where the run sets one and ``script`` takes it."""
    return [*args, "--seed", str(SEED)] if SEED is not None and script in SEEDED_SCRIPTS else args


def script_step(script: str, args: list[str], json_name: str | None = None) -> str:
    """``script`` (a path in the repository) with ``args`` as shell words (and the run's seed,
    ``seeded``); with ``json_name``, writing ``{out}/json_name``: what ``python`` runs on a host
    (``rank_command``), or one step of a sequence (``sequence_command``)."""
    return (" ".join(shlex.quote(a) for a in [str(REPO / script), *seeded(script, args)])
            + (f" --json {{out}}/{json_name}" if json_name else ""))


def host_command(step: str) -> str:
    """``step`` (a ``script_step``) on every host as rank ``{rank}`` of ``{hosts}``."""
    return f"{RANK_ENV} {shlex.quote(sys.executable)} {step}"


def rank_command(script: str, args: list[str], json_name: str | None = None) -> str:
    """``script`` on every host as rank ``{rank}`` of ``{hosts}``; with ``json_name``, writing
    ``{out}/json_name``."""
    return host_command(script_step(script, args, json_name))


def sequence_command(steps: list[str]) -> str:
    """``steps`` (``script_step``s) one after another on every host as rank ``{rank}`` of
    ``{hosts}``, stopping at the first that fails: ``real/testbed/sequence.py``, each step a
    process forked from one interpreter that imported torch once."""
    return host_command(" ".join(shlex.quote(s) for s in
                                 [str(REPO / "real/testbed/sequence.py"), *steps]))


def _torchrun_command(script: str, args: list[str], run_id: str) -> str:
    python = shlex.quote(sys.executable)
    return (f"{python} -m torch.distributed.run --nnodes {{hosts}} --nproc-per-node 1 "
            f"--rdzv-backend c10d --rdzv-endpoint {{master}}:{{port}} --rdzv-id {run_id} "
            f"--max-restarts 0 {shlex.quote(str(REPO / script))} "
            + " ".join(shlex.quote(a) for a in seeded(script, args)))


def _run(config, command: str, json_name: str | tuple[str, ...], timeout_s: float) -> dict:
    """Run ``command`` on a fresh test bed of ``config.hosts`` hosts at ``config.bandwidth_bps``;
    the ``json_name`` file of the host that wrote it (rank 0's host: under torchrun the
    rendezvous, not the host, decides which rank is 0). With a tuple of names, a dict of each of
    those files (all from the same host)."""
    label = getattr(config, "label", bed_label(config.hosts, config.bandwidth_bps))
    bed = testbed_config(config.hosts, config.bandwidth_bps)
    return run_collect(bed, command, json_name, label, timeout_s)


def run_collect(bed_config: TestbedConfig, command: str, json_name: str | tuple[str, ...],
                label: str, timeout_s: float) -> dict:
    """Run ``command`` on a fresh test bed of ``bed_config`` (removed after, output included);
    the ``json_name`` file of the one host that wrote it, or with a tuple of names a dict of
    those files (all from that host). ``TestbedError`` naming ``label`` and the failing host's
    last line."""
    with timeline.span(label, "point"), scratch_testbed(bed_config) as bed:
        result = bed.run(command, timeout_s=timeout_s, echo=False)
        if not result.ok:
            raise TestbedError(f"{label}: exit {result.exit_status()}: {result.failure_line()}")
    names = json_name if isinstance(json_name, tuple) else (json_name,)
    written = [h.json for h in result.hosts if all(n in h.json for n in names)]
    broken = [(h.rank, n, h.json_errors[n]) for h in result.hosts for n in names
              if n in h.json_errors]
    if not written and broken:
        rank, name, error = broken[0]
        raise TestbedError(f"{label}: host{rank}'s {name} is not JSON: {error}")
    if len(written) != 1:
        raise TestbedError(f"{label}: {len(written)} hosts wrote {', '.join(names)}, expected 1")
    return {n: written[0][n] for n in names} if isinstance(json_name, tuple) else written[0][json_name]


SMALL_ALLREDUCE_BYTES = 1_000_000  # below this a call takes milliseconds and wake-ups move it
SMALL_ITERS_FACTOR = 5             # ... so it gets this many times the iterations (cheap)
RING_CALL_CHUNKS = (64,)  # the hand-written ring's calls a probe times against their chains,
                          # in bytes a rank: latency-bound, its own work beyond the rounds
BRACKET_REPEATS = 3                # ring-probe chains per size on each side of an all-reduce point
BRACKET_STREAM_CALLS = 200         # ... and the 1-element calls of its stream (under 0.5 s)


def measure_allreduce(config: AllReduceConfig, timeout_s: float = 900.0,
                      quick: bool = False) -> dict:
    """``real/allreduce.py`` on ``config``'s test bed, calibrated there: ``results``, the
    all-reduce rows (median seconds per algorithm and size, slowest rank's time), and ``rounds``,
    the ring rounds timed by ``experiments/ring_probe.py`` on the same hosts just before the rows
    and again just after (``run_bracketed``), up to the largest round the point sends (a naive
    ring's whole buffer), with the gaps a stream of calls leaves between them there. Sizes under
    ``SMALL_ALLREDUCE_BYTES`` run first, in their own call with ``SMALL_ITERS_FACTOR`` times the
    iterations."""
    groups = [("small", [s for s in config.sizes_bytes if s < SMALL_ALLREDUCE_BYTES],
               config.iters * SMALL_ITERS_FACTOR),
              ("large", [s for s in config.sizes_bytes if s >= SMALL_ALLREDUCE_BYTES], config.iters)]
    groups = [g for g in groups if g[1]]
    steps = []
    for name, sizes, iters in groups:
        args = ["--sizes", ",".join(f"{s}B" for s in sizes), "--algorithms",
                ",".join(config.algorithms), "--iters", str(iters), "--warmup", str(config.warmup),
                *BENCHMARK_FLAGS]
        steps.append(script_step("real/allreduce.py", args, f"{name}.json"))
    files, rounds = run_bracketed(testbed_config(config.hosts, config.bandwidth_bps), steps,
                                  tuple(f"{name}.json" for name, _, _ in groups), config.label,
                                  timeout_s, round_sizes_up_to(max(config.sizes_bytes), quick),
                                  ring="ring" in config.algorithms,
                                  stream_gaps=BRACKET_STREAM_CALLS,
                                  gap_sizes=tuple(config.sizes_bytes))
    return {"rounds": rounds,
            "results": [row for name, _, _ in groups for row in files[f"{name}.json"]["results"]]}


def run_bracketed(bed_config: TestbedConfig, steps: list[str], json_names: tuple[str, ...],
                  label: str, timeout_s: float, round_sizes: list[int],
                  ring: bool = False, stream_gaps: int = 0,
                  gap_sizes: tuple[int, ...] = ()) -> tuple[dict, dict]:
    """``steps`` (``script_step``s) one after the other on a fresh test bed, with ring rounds of
    ``round_sizes`` timed by ``experiments/ring_probe.py`` on the same hosts just before them and
    again just after, all in one ``sequence_command``: the ``json_names`` files (as
    ``run_collect`` returns them) and the round table (``bracket``: per size the median over both
    probes' chains), for the point's prediction.
    With ``ring``, the probes also drive rounds as the hand-written ring does (``--ring-rounds``)
    and time that ring's own work beyond its rounds: its calls of ``RING_CALL_CHUNKS`` a rank
    against their chains (``--calls``; ``NetworkInputs.ring_call_extra_s``);
    with ``stream_gaps``, each also times the gaps of a stream of that many calls, and of one at
    each of ``gap_sizes`` (the buffer the loop refills that large, each call an all-reduce of
    it: ``ring_probe.sized_gaps``).

    Why not the calibration made before the whole run: on a shared machine the network of 4 or 8
    emulated hosts runs faster or slower by the quarter hour (an 8-host probe at 200 Mbit/s took
    206 ms for a 4 MiB round in one run, 257 ms in the next), and a table from another moment
    carries that drift into every prediction made from it; probes on either side of the run
    share its conditions. The probe keeps rounds, the gaps between calls and, with ``ring``,
    what the ring's calls of 64 bytes a rank cost beyond their rounds; never the time of a call
    of a size the point measures."""
    rounds = chain_rounds(bed_config.hosts)
    probes = [probe_step(round_sizes, BRACKET_REPEATS, f"rounds_{side}.json", rounds,
                         engine_max_bytes(bed_config.bandwidth_bps), ring,
                         probe_idle_s(bed_config), stream_gaps, gap_sizes,
                         RING_CALL_CHUNKS if ring else ())
              for side in ("before", "after")]
    files = run_collect(bed_config, sequence_command([probes[0], *steps, probes[1]]),
                        ("rounds_before.json", "rounds_after.json") + json_names, label, timeout_s)
    return ({n: files[n] for n in json_names},
            bracket(files["rounds_before.json"], files["rounds_after.json"]))


def gloo_round_sizes(hosts: int, n_bytes: int) -> list[int]:
    """The probe's sizes up to the round of Gloo's own ring all-reduce of ``n_bytes`` on
    ``hosts`` hosts (a chunk of n / hosts): the table a sync or ring point is priced from."""
    return round_sizes_up_to(math.ceil(n_bytes / hosts), quick=False)


def measure_sync(config: SyncRunConfig, timeout_s: float = 900.0) -> dict:
    """``real/sync.py`` with one replica per host: rank 0's summary, and (started directly, on 2
    hosts or more) under ``rounds`` the ring rounds of its gradient's all-reduce timed on the
    same test bed just before and after the run (``run_bracketed``), which its prediction is
    priced from. Under torchrun the rendezvous picks rank 0's host, so the calibration's rounds
    price that run."""
    args = ["--model", config.model, "--steps", str(config.steps), "--warmup-steps",
            str(config.warmup_steps), "--batch-size", str(config.batch_size), "--no-progress",
            "--threads", "1",
            "--emulate-compute", f"{config.emulate_compute_s}s",
            *(["--real-gradients"] if config.real_gradients else [])]
    if config.launcher == "torchrun":
        command = _torchrun_command("real/sync.py", args, "multinode") + " --json {out}/sync.json"
        return _run(config, command, "sync.json", timeout_s)
    step = script_step("real/sync.py", args, "sync.json")
    if config.hosts < 2:
        return _run(config, host_command(step), "sync.json", timeout_s)
    from real.models import build_model, grad_bytes
    files, rounds = run_bracketed(testbed_config(config.hosts, config.bandwidth_bps), [step],
                                  ("sync.json",), config.label, timeout_s,
                                  gloo_round_sizes(config.hosts, grad_bytes(build_model(config.model, 0))))
    return {**files["sync.json"], "rounds": rounds}


def measure_async(config: AsyncRunConfig, timeout_s: float = 900.0) -> dict:
    """``real/async_ps.py`` with the server on host 0 and a worker on every other host: the
    server's summary (updates/s after the warm-up, ``configs.warmup_updates``; staleness)."""
    args = ["--model", config.model, "--updates", str(config.updates), "--warmup-updates",
            str(warmup_updates(config.workers, config.updates)), "--batch-size",
            str(config.batch_size), "--emulate-compute", f"{config.emulate_compute_s}s",
            "--push-window", str(push_window()), "--threads", "1", "--no-progress"]
    command = rank_command("real/async_ps.py", args, "async.json")
    return _run(config, command, "async.json", timeout_s)
