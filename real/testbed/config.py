"""What a test bed is: how many hosts, how fast each link is, and how the shaper is set.

Every host sits on one emulated switch through its own link; the link is shaped by a token-bucket
filter (``tc qdisc … tbf``) in both directions, so a host can send at most ``bandwidth_bps`` and
receive at most ``bandwidth_bps``. One host may be slower (``slow_host_bps``).

What the shaper counts (why a transfer never reaches the nominal rate): tbf charges every byte of
every Ethernet frame it sends, i.e. the 14-byte Ethernet header, the 20-byte IP header and the
32-byte TCP header (20 bytes + 12 bytes of timestamp option, on by default in Linux) around each
segment's payload. At a 1500-byte MTU a segment carries 1448 payload bytes in a 1514-byte frame,
so a long TCP transfer moves payload at 1448/1514 = 95.6% of the rate (``payload_efficiency``).
The bucket starts full, so the first ``burst_bytes`` of a transfer that follows an idle period
pass at the speed of the virtual link, not at the rate.

What the shaper costs the machine: TCP hands the link segments in batches (GSO: one buffer of up
to 64 KiB, cut into frames as late as possible), and tbf takes a batch whole only if it fits in
the bucket; a larger one it cuts into frames itself, in software, and every frame then crosses
the bridge and the receiving host's stack on its own. At 200 Mbit/s (a 25 kB bucket) that was
most of the machine's work: an 8-host ring moved 140-151 Mbit/s a host of the 188 its links
carry, the 2 cores 96% busy, a third of it in the kernel's packet work. Every link therefore caps
its batches at what the smallest bucket of the bed holds (``gso_max_segs``): the same ring then
runs at 188 Mbit/s a host with the cores 66% busy, and the shaper charges the same frames.

Every host's TCP uses one congestion control, Reno unless told otherwise, not whatever this
machine's default is (BBR on some, CUBIC on most): the test bed should behave the same on every
machine, and a namespace may only pick from the machine's allowed list
(``net.ipv4.tcp_allowed_congestion_control``), which always holds Reno. The choice matters on a
shaped link: BBR caps what a flow has in flight at about twice its rate times the *smallest* round
trip it has seen (here tens of microseconds), so once other flows or the reverse direction's data
fill the shaper's queue, a BBR flow cannot keep its share of the link busy (see
``experiments/LOG.md``). At the sub-millisecond round trips of the test bed, CUBIC grows its
window as Reno does.

Every host's processes run under the batch scheduling policy (``SCHED_BATCH``) unless told
otherwise. On a real cluster a host's threads never take another host's cores; here all hosts
share this machine's, and the kernel lets a thread that wakes up preempt the one running. Gloo's
network thread busy-waits at times (its epoll loop only try-locks a connection that another
thread holds, and polls again), and a woken one can take the core from the very thread it waits
for, until the scheduler's tick (4 ms at 250 Hz): a 64 kB all-reduce on 2 hosts took 0.4 ms in
one run and 3.4 ms in the next. Under the batch policy a waking thread preempts none, which
removes those stalls (see ``experiments/LOG.md``); ``scheduling="normal"`` keeps the
machine's default policy.

Where the machine has a core for every host, each host's processes also run on a core of their
own (``host_cores="spread"``, the default, and ``"own"``): the kernel otherwise moves the two
hosts' threads between the cores as it pleases, differently from one test bed to the next: on 2
hosts at 1000 Mbit/s a 64 kB ring all-reduce took 0.41 to 0.78 ms on six beds, 0.38 to 0.42 ms
on three pinned ones (``docs/testbed.md``). Where the hosts outnumber the cores but divide
evenly among them (4 or 8 hosts on 2 cores), ``spread`` runs host i on core i mod cores: every
core carries as many hosts, and hosts next in rank (neighbours in a ring) never share one
(given 2 cores or more). Left
to the kernel, the placement changed from one launch to the next and the calls with it: on one
4-host bed at 1000 Mbit/s six launches of the ring's 64 kB all-reduce took 1.60 to 3.25 ms,
spread 0.90 to 0.93 ms (``docs/testbed.md``). Otherwise the hosts share every core (as
``"own"`` does with more hosts than cores, and ``"shared"`` always).

Every host's processes also start with address-space randomization off
(``address_layout="fixed"``, the default; ``"random"`` keeps the machine's), so that each launch
lays out its processes' code and data as the one before did: with a random layout per process the
ring's 64 kB all-reduce on 4 hosts at 1000 Mbit/s took 0.918 to 0.998 ms over five launches,
0.752 to 0.779 ms fixed (``docs/testbed.md``).
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

ETHERNET_HEADER_BYTES = 14
IP_HEADER_BYTES = 20
TCP_HEADER_BYTES = 32  # 20 + 12 bytes of the timestamp option (net.ipv4.tcp_timestamps=1)
SHAPER_TIMER_SLACK_S = 1e-3  # the bucket holds at least this long at the rate (see burst_bytes)
MIN_BURST_FRAMES = 10
MAX_HOSTS = 64  # hosts of one test bed
TC_MAX_BYTES = 2**32 - 1  # tc keeps a bucket and a queue limit in 32 bits
SCHEDULING_POLICIES = ("batch", "normal")
HOST_CORES_POLICIES = ("spread", "block", "own", "shared")
DEFAULT_HOST_CORES = "spread"
HOST_CORES_HELP = ("spread (default): each host on a core of its own when there is one per host, "
                   "else host i on core i mod cores when the hosts divide evenly among the cores "
                   "(hosts next in rank on different cores); block: so, but hosts next in rank "
                   "share a core (host i on core i // (hosts / cores)); own: a core each or none; "
                   "shared: every host on every core")
ADDRESS_LAYOUTS = ("fixed", "random")


def parse_congestion_control(text: str) -> str | None:
    """A ``--congestion-control`` value: a kernel name (reno, cubic, bbr, ...) as it is, or None
    for ``system`` (the machine's default); ValueError naming anything else."""
    if text == "system":
        return None
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,15}", text):
        raise ValueError(f"congestion control must be a kernel name such as reno or cubic, "
                         f"or system, got {text!r}")
    return text


@dataclass
class TestbedConfig:
    """An emulated cluster: ``hosts`` hosts on one switch, each link capped in both directions.

    Rates are in bits per second, sizes in bytes, times in seconds.
    """

    __test__ = False  # not a pytest test class, despite the name

    hosts: int = 2
    """Number of hosts (one network namespace each), 1 to 64."""
    bandwidth_bps: float = 100e6
    """Rate of every host's link, each direction, as counted by tbf (Ethernet frames)."""
    slow_host_bps: float | None = None
    """Rate of the one slower host's link (``slow_rank``), or None for a uniform cluster."""
    slow_rank: int | None = None
    """Which host is slower; defaults to the last one when ``slow_host_bps`` is set."""
    burst_bytes: int | None = None
    """tbf bucket size; None: max(10 frames, 1 ms at the rate). Smaller is more exact but a late
    timer then loses tokens; it must hold at least one frame."""
    queue_s: float = 0.1
    """How long a full queue takes to drain at the rate (sets tbf's ``limit``); beyond it, drops."""
    mtu_bytes: int = 1500
    """MTU of every link (IP packet size); 9000 makes header overhead small (0.7%)."""
    subnet: str = "10.77.0.0/24"
    """Addresses of the hosts (host i gets the (i+1)-th address). Each test bed has its own
    switch, so two test beds may use the same subnet without seeing each other."""
    master_port: int = 29500
    """Port given to commands as MASTER_PORT and ``{port}``."""
    congestion_control: str | None = "reno"
    """TCP congestion control of every host (``net.ipv4.tcp_congestion_control`` in its
    namespace); None: whatever a new namespace gets on this machine."""
    scheduling: str = "batch"
    """CPU scheduling policy of every host's processes: ``batch`` (``SCHED_BATCH``: a thread
    that wakes up does not preempt the running one) or ``normal`` (the machine's default)."""
    host_cores: str = DEFAULT_HOST_CORES
    """``own``: host i's processes run on the i-th core this process may use, when there is a
    core for every host (else as ``shared``); ``spread``: as ``own``, and where there are more
    hosts than cores and they divide evenly among them, host i runs on core i mod cores (every
    core carries as many hosts, and with 2 cores or more neighbours in rank never share one);
    ``shared``: every host on every core."""
    address_layout: str = "fixed"
    """``fixed``: every host's processes start with address-space randomization off
    (``ADDR_NO_RANDOMIZE``, as ``setarch -R``), so that every launch lays out its code and data
    as the one before it; ``random``: the machine's default, a fresh random layout per process."""

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise ValueError(f"hosts must be between 1 and {MAX_HOSTS}, got {self.hosts}")
        if not 1 <= self.bandwidth_bps < math.inf:  # tc takes whole bits per second
            raise ValueError(f"bandwidth must be a finite rate of at least 1 bit/s, "
                             f"got {self.bandwidth_bps} bit/s")
        if self.slow_host_bps is not None and not 1 <= self.slow_host_bps < math.inf:
            raise ValueError(f"slow host bandwidth must be a finite rate of at least 1 bit/s, "
                             f"got {self.slow_host_bps} bit/s")
        if self.slow_rank is not None:
            if self.slow_host_bps is None:
                raise ValueError("a slow host's rank (--slow-rank) needs its rate (--slow-host)")
            if not 0 <= self.slow_rank < self.hosts:
                raise ValueError(f"slow host rank {self.slow_rank} is not a host (0..{self.hosts - 1})")
        if not 576 <= self.mtu_bytes <= 65000:
            raise ValueError(f"mtu must be between 576 and 65000 bytes, got {self.mtu_bytes}")
        if self.burst_bytes is not None and self.burst_bytes < self.frame_bytes:
            raise ValueError(f"burst {self.burst_bytes} B is smaller than one frame ({self.frame_bytes} B)")
        if not self.queue_s > 0:
            raise ValueError(f"queue must be a positive time, got {self.queue_s} s")
        self._check_shaper_fields()
        if self.congestion_control is not None:
            parse_congestion_control(self.congestion_control)
        if self.scheduling not in SCHEDULING_POLICIES:
            raise ValueError(f"scheduling must be one of {', '.join(SCHEDULING_POLICIES)}, "
                             f"got {self.scheduling!r}")
        if self.host_cores not in HOST_CORES_POLICIES:
            raise ValueError(f"host cores must be one of {', '.join(HOST_CORES_POLICIES)}, "
                             f"got {self.host_cores!r}")
        if self.address_layout not in ADDRESS_LAYOUTS:
            raise ValueError(f"address layout must be one of {', '.join(ADDRESS_LAYOUTS)}, "
                             f"got {self.address_layout!r}")
        if not 1 <= self.master_port <= 65535:
            raise ValueError(f"master port must be 1..65535, got {self.master_port}")
        try:
            network = ipaddress.ip_network(self.subnet)
        except ValueError as exc:
            raise ValueError(f"subnet {self.subnet!r} is not an IPv4 network: {exc}") from None
        if network.version != 4 or not network.is_private or network.num_addresses < self.hosts + 2:
            raise ValueError(f"subnet {self.subnet!r} must be a private IPv4 network with room for "
                             f"{self.hosts} hosts")

    def _check_shaper_fields(self) -> None:
        """tc takes a rate of whole bytes per second, and a bucket and a queue limit that fit
        in 32 bits: refuse here, in one line, what it would refuse after the bed is made."""
        for rate_bps in {self.bandwidth_bps, self.slow_host_bps or self.bandwidth_bps}:
            if rate_bps < 8:
                raise ValueError(f"a link rate must be at least 8 bit/s (tc counts whole bytes "
                                 f"per second), got {rate_bps:g} bit/s")
            limit = self.limit_for(rate_bps)
            if limit > TC_MAX_BYTES:  # exact where it can be read, else four digits, not 300
                shown = f"{limit:,}" if limit < 10**15 else f"{limit:.4g}"
                raise ValueError(f"at {rate_bps:g} bit/s the shaper's bucket and queue "
                                 f"({shown} B) exceed what tc takes ({TC_MAX_BYTES:,} B): "
                                 f"lower the rate, --burst or --queue")

    @property
    def frame_bytes(self) -> int:
        """Bytes tbf charges for one full-size frame: the MTU plus the Ethernet header."""
        return self.mtu_bytes + ETHERNET_HEADER_BYTES

    @property
    def payload_efficiency(self) -> float:
        """TCP payload bytes per byte tbf charges, for full-size segments (0.956 at MTU 1500)."""
        return (self.mtu_bytes - IP_HEADER_BYTES - TCP_HEADER_BYTES) / self.frame_bytes

    def rate_bps(self, rank: int) -> float:
        """The link rate of host ``rank`` (each direction)."""
        if self.slow_host_bps is not None and rank == self.effective_slow_rank:
            return self.slow_host_bps
        return self.bandwidth_bps

    @property
    def effective_slow_rank(self) -> int | None:
        if self.slow_host_bps is None:
            return None
        return self.hosts - 1 if self.slow_rank is None else self.slow_rank

    def burst_for(self, rate_bps: float) -> int:
        """tbf bucket size in bytes for a link of ``rate_bps``."""
        if self.burst_bytes is not None:
            return self.burst_bytes
        return max(MIN_BURST_FRAMES * self.frame_bytes, int(rate_bps * SHAPER_TIMER_SLACK_S / 8))

    def refill_s(self, rate_bps: float) -> float:
        """Seconds the bucket of a link of ``rate_bps`` takes to refill from empty: the wait
        after which a transfer starts on a full one (probes idle a multiple of it)."""
        return self.burst_for(rate_bps) * 8 / rate_bps

    @property
    def gso_max_segs(self) -> int:
        """The most frames a batch (GSO buffer) on any link of this bed may hold: as many whole
        frames as the smallest bucket takes, less a byte (tbf's bucket, converted to time and
        back, may come out a byte short), at least 1."""
        smallest = min(self.burst_for(self.rate_bps(rank)) for rank in range(self.hosts))
        return max(1, (smallest - 1) // self.frame_bytes)

    def limit_for(self, rate_bps: float) -> int:
        """tbf queue limit in bytes: the burst plus ``queue_s`` worth of frames at the rate."""
        return self.burst_for(rate_bps) + int(rate_bps * self.queue_s / 8)

    def address(self, rank: int) -> str:
        """IPv4 address of host ``rank``."""
        return str(ipaddress.ip_network(self.subnet).network_address + rank + 1)

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    def as_dict(self) -> dict:
        """Plain values for a JSON record, including the derived shaper settings."""
        return {
            "hosts": self.hosts, "bandwidth_bps": self.bandwidth_bps,
            "slow_host_bps": self.slow_host_bps, "slow_rank": self.effective_slow_rank,
            "burst_bytes": self.burst_for(self.bandwidth_bps),
            "limit_bytes": self.limit_for(self.bandwidth_bps), "queue_s": self.queue_s,
            "mtu_bytes": self.mtu_bytes, "frame_bytes": self.frame_bytes,
            "payload_efficiency": self.payload_efficiency, "subnet": self.subnet,
            "master_port": self.master_port, "congestion_control": self.congestion_control,
            "scheduling": self.scheduling, "host_cores": self.host_cores,
            "address_layout": self.address_layout,
        }
