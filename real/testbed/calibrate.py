"""Calibration: what the test bed's network does, measured, written as the simulator's inputs.

Two hosts of a fresh test bed run ``probe.py``: small round trips give the per-message latency,
bulk transfers of two sizes give the payload rate the shaper lets through. Nothing here looks at
a training run: the figures describe the network only, so a prediction made from them is never
fitted to the measurement it is later compared with.

The JSON record (all rates in bit/s, times in s, sizes in bytes)::

    bandwidth_bps               the shaper's rate (what tbf charges frames against)
    latency_s                   half the median 1-byte TCP round trip (per-message latency)
    goodput_bps                 payload rate of a long transfer: (n2 - n1) / (t2 - t1)
                                (n1, n2 the smallest and largest sizes; burst and fixed costs cancel)
    payload_efficiency          goodput_bps / bandwidth_bps, measured (headers, timer slack)
    payload_efficiency_expected (MTU - 52) / (MTU + 14): TCP/IP/Ethernet headers only
    burst_bytes                 the bucket: that much of a transfer after an idle period is free
    transfers                   per size: median seconds, payload rate, and the time the
                                shaper model (headers + burst, no fitting) predicts
    gloo                        the same through torch.distributed's Gloo send/recv (the transport
                                of training): latency_s, goodput_bps, a 1-element all_reduce
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from real.testbed.bed import Testbed, scratch_testbed
from real.testbed.config import TestbedConfig
from real.testbed.network import TestbedError
from real.testbed.probe import MAX_SECONDS as PROBE_MAX_WAIT_S  # a probe's longest timeout

PROBE = Path(__file__).with_name("probe.py")
GLOO_PROBE = Path(__file__).with_name("gloo_probe.py")
PROBE_PORT = 5201


def shaper_time_s(payload_bytes: int, rate_bps: float, burst_bytes: int, mtu_bytes: int,
                  rtt_s: float = 0.0) -> float:
    """Seconds tbf needs for a TCP transfer of ``payload_bytes`` that starts with a full bucket.

    Every full segment carries MTU - 52 payload bytes in an MTU + 14 byte frame; the first
    ``burst_bytes`` of frames pass at once; the rest at ``rate_bps``; plus one round trip (the
    acknowledgement the probe waits for).
    """
    payload_per_frame = mtu_bytes - 52
    frames = math.ceil(payload_bytes / payload_per_frame)
    wire_bytes = payload_bytes + frames * (52 + 14)
    return max(0, wire_bytes - burst_bytes) * 8 / rate_bps + rtt_s


def path_rate_bps(config: TestbedConfig, sender: int, receiver: int) -> float:
    """Rate of the path from ``sender`` to ``receiver``: the slower of uplink and downlink."""
    return min(config.rate_bps(sender), config.rate_bps(receiver))


def probe_timeouts_s(config: TestbedConfig, sizes: list[int], repeats: int) -> tuple[float, float]:
    """How long the probes may wait for one transfer, and for all of their work: 30 s and 300 s,
    or three times what the transfers take at the link's rate where that is longer (16 MB
    takes 43 s at 3 Mbit/s)."""
    rate_bps = path_rate_bps(config, 0, 1)
    return (min(PROBE_MAX_WAIT_S, max(30.0, 3 * sizes[-1] * 8 / rate_bps)),
            max(300.0, 3 * repeats * sum(sizes) * 8 / rate_bps))


def measure(bed: Testbed, sizes: list[int], pings: int, repeats: int, timeout_s: float,
            sender: int = 0, receiver: int = 1) -> dict:
    """Run the probe client on host ``sender`` against a server on ``receiver``; its raw JSON.
    The probe waits for each transfer as long as ``probe_timeouts_s`` allows."""
    server = bed.spawn(receiver, [sys.executable, str(PROBE), "server", "--port", str(PROBE_PORT)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rate_bps = path_rate_bps(bed.config, sender, receiver)
    idle_s = 2 * bed.config.refill_s(rate_bps) + 0.02  # refill every bucket
    transfer_s = probe_timeouts_s(bed.config, sizes, repeats)[0]
    client = bed.spawn(sender, [sys.executable, str(PROBE), "client", "--connect", bed.hosts[receiver].address,
                           "--port", str(PROBE_PORT), "--pings", str(pings), "--repeats", str(repeats),
                           "--sizes", ",".join(map(str, sizes)), "--idle", f"{idle_s:.4f}",
                           "--connect-timeout", f"{transfer_s:.1f}"])
    try:
        out, err = client.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"calibration probe did not finish within {timeout_s} s") from None
    finally:
        if client.poll() is None:
            client.kill()
    if client.returncode != 0:
        server_err = server.stderr.read().decode(errors="replace") if server.poll() is not None else ""
        raise TestbedError(f"calibration probe failed: {err.decode(errors='replace').strip()} "
                           f"{server_err.strip()}".strip())
    return json.loads(out)


def summarise_transfers(bulk: list[dict], rate_bps: float, burst_bytes: int, mtu_bytes: int,
                        rtt_s: float) -> tuple[list[dict], float]:
    """Per size: median time, payload rate and the shaper model's time; and the long-transfer
    payload rate (n2 - n1) / (t2 - t1) of the smallest and largest sizes."""
    transfers = []
    for item in bulk:
        median_s = statistics.median(item["seconds"])
        model_s = shaper_time_s(item["bytes"], rate_bps, burst_bytes, mtu_bytes, rtt_s)
        transfers.append({"bytes": item["bytes"], "median_s": median_s, "seconds": item["seconds"],
                          "goodput_bps": item["bytes"] * 8 / median_s, "shaper_model_s": model_s,
                          "shaper_model_error": (model_s - median_s) / median_s})
    small, large = transfers[0], transfers[-1]
    if not large["median_s"] > small["median_s"]:
        raise TestbedError(f"the {large['bytes']} B transfer took no longer than the "
                           f"{small['bytes']} B one ({large['median_s']:.6f} s against "
                           f"{small['median_s']:.6f} s): no rate can be read from them")
    goodput_bps = (large["bytes"] - small["bytes"]) * 8 / (large["median_s"] - small["median_s"])
    return transfers, goodput_bps


def summarise(raw: dict, config: TestbedConfig, sender: int = 0, receiver: int = 1) -> dict:
    """Turn the TCP probe's raw times into the calibration record (see the module docstring)."""
    rate_bps = path_rate_bps(config, sender, receiver)
    burst = config.burst_for(rate_bps)
    rtts = sorted(raw["ping_rtt_s"])
    rtt_s = statistics.median(rtts)
    transfers, goodput_bps = summarise_transfers(raw["bulk"], rate_bps, burst, config.mtu_bytes, rtt_s)
    return {
        "bandwidth_bps": rate_bps,
        "latency_s": rtt_s / 2,
        "goodput_bps": goodput_bps,
        "payload_efficiency": goodput_bps / rate_bps,
        "payload_efficiency_expected": config.payload_efficiency,
        "burst_bytes": burst,
        "mtu_bytes": config.mtu_bytes,
        "frame_bytes": config.frame_bytes,
        "rtt_s": _spread(rtts),
        "transfers": transfers,
        "config": config.as_dict(),
        "machine": {"node": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                    "python": platform.python_version()},
    }


def measure_gloo(bed: Testbed, sizes: list[int], pings: int, repeats: int, timeout_s: float) -> dict:
    """Run ``gloo_probe.py`` on both hosts of ``bed``; rank 0's raw JSON."""
    rate_bps = path_rate_bps(bed.config, 0, 1)
    idle_s = 2 * bed.config.refill_s(rate_bps) + 0.02
    transfer_s = probe_timeouts_s(bed.config, sizes, repeats)[0]
    command = shlex.join([sys.executable, str(GLOO_PROBE), "--pings", str(pings), "--repeats", str(repeats),
                          "--sizes", ",".join(map(str, sizes)), "--idle", f"{idle_s:.4f}",
                          "--timeout", f"{transfer_s:.1f}"])
    result = bed.run(command + " --json {out}/gloo.json", timeout_s=timeout_s)
    if not result.ok:
        tail = result.hosts[0].stderr().strip().splitlines()[-1:] or ["(no output)"]
        raise TestbedError(f"Gloo probe failed (exit {result.exit_status()}): {tail[0]}")
    return result.hosts[0].json["gloo.json"]


def summarise_gloo(raw: dict, config: TestbedConfig) -> dict:
    """The Gloo probe's times: per-message latency, a 1-element all_reduce, the gap a stream of
    calls leaves between two (where measured), bulk payload rate."""
    rate_bps = path_rate_bps(config, 0, 1)
    rtts, all_reduces = sorted(raw["ping_rtt_s"]), sorted(raw["all_reduce_s"])
    rtt_s = statistics.median(rtts)
    transfers, goodput_bps = summarise_transfers(raw["bulk"], rate_bps, config.burst_for(rate_bps),
                                                 config.mtu_bytes, rtt_s)
    gaps = {"stream_gap_s": _spread(raw["stream_gap_s"])} if raw.get("stream_gap_s") else {}
    return {"latency_s": rtt_s / 2, "rtt_s": _spread(rtts), "all_reduce_1_element_s": _spread(all_reduces),
            **gaps, "goodput_bps": goodput_bps, "payload_efficiency": goodput_bps / rate_bps,
            "transfers": transfers}


def _spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p10": _quantile(ordered, 0.1),
            "p90": _quantile(ordered, 0.9), "count": len(ordered)}


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


MAX_PINGS, MAX_REPEATS = 100_000, 1_000  # beyond these a calibration runs for hours: a typo
MAX_TRANSFER_BYTES = 1_000_000_000       # ... and a 1 GB transfer is minutes at 50 Mbit/s


LINK_RATE_FLOOR = 0.97
"""The least share of the headers-only payload rate (``payload_efficiency_expected``) that each of
a calibration's TCP, Gloo and duplex transfers must reach (``slow_link_reason``)."""
LINK_PAUSES_S = (10.0, 20.0)
"""The pauses between a calibration whose link ran slow and the next try (``slow_link_reason``);
the run goes on with the attempt nearest the rate after the last (``calibrate_near_rate``)."""
LINK_ATTEMPTS = 1 + len(LINK_PAUSES_S)
"""Calibrations at most of one rate whose link ran slow, one after each pause."""


def transfer_shares(record: dict) -> dict[str, float]:
    """The payload rates of a calibration record's TCP, Gloo and duplex transfers (those it
    has), each as a share of the headers-only payload rate ``payload_efficiency_expected``
    (none where the record has no such rate)."""
    expected = record.get("payload_efficiency_expected")
    if not expected:
        return {}
    parts = {"TCP": record, "Gloo": record.get("gloo"), "duplex": record.get("duplex")}
    return {name: part["payload_efficiency"] / expected for name, part in parts.items()
            if part and "payload_efficiency" in part}


def slowest_share(record: dict) -> float:
    """The lowest of a calibration record's ``transfer_shares`` (inf: it has none): of two
    records, the one with the higher ran nearer its rate."""
    return min(transfer_shares(record).values(), default=math.inf)


def slow_link_reason(record: dict) -> str | None:
    """Why a 2-host calibration record's link ran slower than its shaper lets through, or None.

    On a quiet machine a long transfer through the shaper carries 0.97-1.02 of the payload rate
    that the rate less the headers gives, one way (TCP, Gloo) or both at once (the duplex probe,
    whose acknowledgements share each direction): the stored grids' calibrations. Grids made on
    slow cores measured 0.81-0.97, on some of their rates, while their test beds later ran at the
    link's usual pace: a quick grid's 200 Mbit/s TCP rate came out at 0.90, and it priced every
    all-reduce call there over, by up to 42% (``experiments/LOG.md``). Such a record is taken
    again (``experiments.measure.calibrate_rate``)."""
    slow = {name: share for name, share in transfer_shares(record).items()
            if share < LINK_RATE_FLOOR}
    if not slow:
        return None
    parts = ", ".join(f"{name} {share:.3f}" for name, share in slow.items())
    return (f"its transfers carried under {LINK_RATE_FLOOR:g} of the rate less headers "
            f"({parts})")


def check_calibration(config: TestbedConfig, sizes: list[int], pings: int, repeats: int,
                      gloo: bool) -> None:
    """``ValueError`` where ``calibrate`` could not run these settings: checked before anything
    is made (or root is asked for)."""
    if config.hosts != 2:
        raise ValueError(f"calibration runs on 2 hosts, got {config.hosts}")
    if len(sizes) < 2 or sorted(sizes) != sizes or len(set(sizes)) != len(sizes) or sizes[0] < 1:
        raise ValueError(f"calibration needs two or more increasing positive transfer sizes, "
                         f"got {sizes}")
    if not 1 <= pings <= MAX_PINGS:
        raise ValueError(f"calibration takes 1 to {MAX_PINGS:,} pings, got {pings:,}")
    if not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(f"calibration takes 1 to {MAX_REPEATS:,} repeats, got {repeats:,}")
    if sizes[-1] > MAX_TRANSFER_BYTES:
        raise ValueError(f"calibration transfers at most {MAX_TRANSFER_BYTES / 1e9:g} GB, got "
                         f"{sizes[-1]:,} B")
    if gloo and any(n % 4 for n in sizes):
        raise ValueError(f"the Gloo measurement sends float32 elements: its transfer sizes must "
                         f"be multiples of 4 bytes, got {next(n for n in sizes if n % 4):,} B")
    largest_s = sizes[-1] * 8 / path_rate_bps(config, 0, 1)
    if 3 * largest_s > PROBE_MAX_WAIT_S:
        raise ValueError(f"at this link's rate the largest transfer ({sizes[-1]:,} B) takes "
                         f"{largest_s:,.0f} s, over the {PROBE_MAX_WAIT_S / 3:g} s a probe may wait "
                         f"for one: take smaller sizes")
    bucket_bytes = min(config.burst_for(config.rate_bps(rank)) for rank in range(2))
    if sizes[0] <= bucket_bytes:
        raise ValueError(f"the smallest transfer ({sizes[0]} B) must be larger than the shaper's "
                         f"bucket ({bucket_bytes} B): what fits in it passes at once, and the "
                         f"rate is read between transfers the shaper paces")


def calibrate(config: TestbedConfig, sizes: list[int], pings: int = 200, repeats: int = 3,
              gloo: bool = True, timeout_s: float | None = None) -> dict:
    """Make a 2-host test bed of ``config``, measure it (TCP, then Gloo), unmake it; the record.
    ``ValueError`` for settings ``check_calibration`` refuses."""
    check_calibration(config, sizes, pings, repeats, gloo)
    if timeout_s is None:
        timeout_s = probe_timeouts_s(config, sizes, repeats)[1]
    with scratch_testbed(config) as bed:
        raw = measure(bed, sizes, pings, repeats, timeout_s)
        raw_gloo = measure_gloo(bed, sizes, pings, repeats, timeout_s) if gloo else None
    record = summarise(raw, config)
    if raw_gloo is not None:
        record["gloo"] = summarise_gloo(raw_gloo, config)
    return record


def calibrate_near_rate(config: TestbedConfig, sizes: list[int],
                        attempts: int = LINK_ATTEMPTS,
                        pauses_s: tuple[float, ...] = LINK_PAUSES_S, **kwargs) -> dict:
    """``calibrate``, taken again where its link ran slower than its shaper lets through
    (``slow_link_reason``: a busy moment of the machine's cores, not the link), at most
    ``attempts`` times, each after ``pauses_s[i]`` (the last one again where there are more
    attempts than pauses). The record of the attempt whose slowest transfer ran nearest the rate
    (``slowest_share``), with ``attempts`` (how many were taken) and every attempt's
    ``transfer_shares`` (``link_rate_shares``). ``kwargs`` go to ``calibrate``."""
    if attempts < 1:
        raise ValueError(f"calibration takes at least one attempt, got {attempts}")
    kept, shares = None, []
    for attempt in range(1, attempts + 1):
        record = calibrate(config, sizes, **kwargs)
        shares.append(transfer_shares(record))
        if kept is None or slowest_share(record) > slowest_share(kept):
            kept = record
        reason = slow_link_reason(record)
        if reason is None or attempt == attempts:
            break
        pause_s = pauses_s[min(attempt, len(pauses_s)) - 1] if pauses_s else 0.0
        print(f"calibration at {config.bandwidth_bps / 1e6:g} Mbit/s: {reason}: the link ran "
              f"under its rate; trying again in {pause_s:g} s ({attempt + 1} of {attempts})",
              file=sys.stderr, flush=True)
        time.sleep(pause_s)
    if reason is not None and attempts > 1:
        print(f"calibration at {config.bandwidth_bps / 1e6:g} Mbit/s: the link ran under its "
              f"rate in each of its {attempts} attempts; keeping the nearest "
              f"({slow_link_reason(kept)})", file=sys.stderr, flush=True)
    kept["attempts"] = attempt
    kept["link_rate_shares"] = shares
    return kept
