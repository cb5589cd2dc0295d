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
* **A call has a fixed cost** beyond the per-round latency: the 1-element all_reduce measured by the
  calibration (a round trip through Gloo on this machine's busy CPUs). ``call_overhead_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsgd_sim.collectives import allreduce_time_s

ACK_FRAME_BYTES = 66  # 14 Ethernet + 20 IP + 32 TCP (with timestamps), no payload
SEGMENTS_PER_ACK = 2  # Linux delayed ACK: one ACK for every second full segment

# real/allreduce.py's algorithm names -> the simulator's; Gloo's own all-reduce is a ring
SIM_ALGORITHM = {"ring": "ring", "naive": "naive-ring", "backend": "ring"}


@dataclass(frozen=True)
class NetworkInputs:
    """What the simulator is told about one test-bed rate, all from its calibration record."""

    rate_bps: float          # the shaper's rate
    goodput_bps: float       # payload rate of a long one-way TCP transfer (measured)
    latency_s: float         # per-message latency through Gloo send/recv (median RTT/2)
    call_overhead_s: float   # a 1-element Gloo all_reduce between two hosts (median)
    frame_bytes: int = 1514  # a full frame at the MTU
    duplex_goodput_bps: float | None = None  # payload rate each way with both ways busy (measured)

    @classmethod
    def from_calibration(cls, record: dict) -> "NetworkInputs":
        gloo = record.get("gloo")
        if not gloo:
            raise ValueError("calibration record has no 'gloo' section (run it without --no-gloo)")
        return cls(rate_bps=record["bandwidth_bps"], goodput_bps=record["goodput_bps"],
                   latency_s=gloo["latency_s"],
                   call_overhead_s=gloo["all_reduce_1_element_s"]["median"],
                   frame_bytes=record.get("frame_bytes", 1514),
                   duplex_goodput_bps=(record.get("duplex") or {}).get("goodput_bps"))

    @property
    def duplex_payload_bps(self) -> float:
        """Payload rate of a link that also carries the ACKs of an equal flow the other way:
        measured when the calibration has a ``duplex`` section, else from the header sizes."""
        if self.duplex_goodput_bps:
            return self.duplex_goodput_bps
        ack_share = ACK_FRAME_BYTES / SEGMENTS_PER_ACK / self.frame_bytes
        return self.goodput_bps / (1.0 + ack_share)

    def as_dict(self) -> dict:
        return {"rate_bps": self.rate_bps, "goodput_bps": self.goodput_bps,
                "duplex_payload_bps": self.duplex_payload_bps, "latency_s": self.latency_s,
                "call_overhead_s": self.call_overhead_s}


def predict_allreduce_s(algorithm: str, hosts: int, n_bytes: int, net: NetworkInputs) -> float:
    """Seconds for one all-reduce of ``n_bytes`` over ``hosts`` hosts (one rank each)."""
    if algorithm not in SIM_ALGORITHM:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r} (known: {', '.join(SIM_ALGORITHM)})")
    network_s = allreduce_time_s(SIM_ALGORITHM[algorithm], hosts, n_bytes, net.latency_s,
                                 net.duplex_payload_bps)
    return network_s + net.call_overhead_s
