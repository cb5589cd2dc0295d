"""The emulated network: namespaces, links, the switch and the shapers, made and unmade with iproute2.

Layout of one test bed (run id ``RUN``, hosts 0..H-1)::

    namespace dsgd-RUN-sw:  bridge br0, ports p0 … p(H-1)      (tbf on each port: the host's downlink)
    namespace dsgd-RUN-hI:  eth0 (address of host I), lo        (tbf on eth0: the host's uplink)
    /etc/netns/dsgd-RUN-hI/hosts: hostI -> address of host I, for every host

Nothing is created in the machine's own network namespace, so a test bed cannot disturb the
machine's network, and deleting the namespaces deletes every link and qdisc with them. A state
file ``/run/dsgd-testbed/RUN.json`` names the process that owns the run, so that ``cleanup`` can
tell the leftovers of a crashed run from a run that is still going.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from dsgd_sim.argparse_oneline import read_json
from real.testbed.config import TestbedConfig

PREFIX = "dsgd"
NAMESPACE_PATTERN = re.compile(rf"^{PREFIX}-(?P<run>[0-9a-f]{{8}})-(?P<role>sw|h\d+)$")
STATE_DIR = Path("/run/dsgd-testbed")
ETC_NETNS = Path("/etc/netns")
TOOL_TIMEOUT_S = 30  # an ip or tc command that takes longer has hung
HOST_IFNAME = "eth0"
BRIDGE = "br0"


class TestbedError(RuntimeError):
    """The test bed could not be made, used or unmade; the message says which command failed."""

    __test__ = False


def host_namespace(run_id: str, rank: int) -> str:
    return f"{PREFIX}-{run_id}-h{rank}"


def switch_namespace(run_id: str) -> str:
    return f"{PREFIX}-{run_id}-sw"


def hostname(rank: int) -> str:
    """The hostname a command on host ``rank`` sees (and that every host resolves)."""
    return f"host{rank}"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; raise TestbedError with ip's own message when it fails and ``check``."""
    return _run_tool(["ip", *args], check)


def tc(namespace: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``tc ARGS`` inside ``namespace``."""
    return _run_tool(["ip", "netns", "exec", namespace, "tc", *args], check)


def _run_tool(argv: list[str], check: bool) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"`{' '.join(argv)}` did not finish in {TOOL_TIMEOUT_S} s") from None
    if check and done.returncode != 0:
        raise TestbedError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (one line), or None when they can."""
    if os.geteuid() != 0:
        return "the test bed needs root (network namespaces and tc); run it as root"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"the test bed needs `{tool}` (apt-get install {package}); not found on PATH"
    probe = f"{PREFIX}-probe{os.getpid()}"
    with signals_deferred():  # a Ctrl-C between the two would leave the namespace behind
        made = ip("netns", "add", probe, check=False)
        if made.returncode == 0:
            ip("netns", "del", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    return None


@contextmanager
def signals_deferred():
    """Hold off SIGINT, SIGTERM and SIGHUP (main thread only) until the block is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def create(run_id: str, config: TestbedConfig) -> None:
    """Make the switch, every host and every shaper of test bed ``run_id``.

    On failure part of it may exist; ``destroy(run_id, config.hosts)`` removes whatever does.
    """
    _write_state(run_id, config.hosts)
    switch = switch_namespace(run_id)
    ip("netns", "add", switch)
    ip("-n", switch, "link", "add", BRIDGE, "mtu", str(config.mtu_bytes), "type", "bridge")
    ip("-n", switch, "link", "set", BRIDGE, "up")
    for rank in range(config.hosts):
        _create_host(run_id, rank, config)
    _write_hosts_files(run_id, config)


def _create_host(run_id: str, rank: int, config: TestbedConfig) -> None:
    namespace, switch, port = host_namespace(run_id, rank), switch_namespace(run_id), f"p{rank}"
    mtu = str(config.mtu_bytes)
    ip("netns", "add", namespace)
    ip("-n", switch, "link", "add", port, "mtu", mtu, "type", "veth",
       "peer", "name", HOST_IFNAME, "mtu", mtu, "netns", namespace)
    cap_batches([(switch, port), (namespace, HOST_IFNAME)], config.gso_max_segs)
    ip("-n", switch, "link", "set", port, "master", BRIDGE, "up")
    ip("-n", namespace, "addr", "add", f"{config.address(rank)}/{config.prefix_len}", "dev", HOST_IFNAME)
    ip("-n", namespace, "link", "set", HOST_IFNAME, "up")
    ip("-n", namespace, "link", "set", "lo", "up")  # local agents (torchrun) talk over loopback
    if config.congestion_control:
        set_congestion_control(namespace, config.congestion_control)
    rate_bps = config.rate_bps(rank)
    shaper = ["tbf", "rate", f"{int(rate_bps)}bit", "burst", str(config.burst_for(rate_bps)),
              "limit", str(config.limit_for(rate_bps))]
    tc(namespace, "qdisc", "replace", "dev", HOST_IFNAME, "root", *shaper)  # uplink
    tc(switch, "qdisc", "replace", "dev", port, "root", *shaper)  # downlink


_uncapped_warned = False


def cap_batches(ends: list[tuple[str, str]], segs: int) -> bool:
    """Cap the GSO batches of each (namespace, device) at ``segs`` frames, so that no shaper cuts
    a batch into frames in software (``config.TestbedConfig.gso_max_segs``). A kernel that
    cannot set the cap leaves the links as they are: one line on stderr says so, once, and the
    bed works on (its shapers then cost more of the machine below about 530 Mbit/s). True if
    every end was capped."""
    global _uncapped_warned
    failed = [done for ns, dev in ends
              if (done := ip("-n", ns, "link", "set", dev, "gso_max_segs", str(segs),
                             check=False)).returncode != 0]
    if failed and not _uncapped_warned:
        _uncapped_warned = True
        print(f"test bed: cannot cap the links' GSO batches here ({failed[0].stderr.strip()}); "
              "the shapers will cut them into frames in software", file=sys.stderr)
    return not failed


CONGESTION_SYSCTL = "/proc/sys/net/ipv4/tcp_congestion_control"
ALLOWED_SYSCTL = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def check_congestion_control(name: str | None) -> None:
    """ValueError when this machine does not let a namespace pick TCP congestion control
    ``name`` (None, the machine's default, always passes): said before any test bed is built.
    Where the allowed list cannot be read, building the bed finds out (``set_congestion_control``)."""
    try:
        allowed = Path(ALLOWED_SYSCTL).read_text().split()
    except OSError:
        return
    if name is not None and name not in allowed:
        raise ValueError(f"--congestion-control {name}: this machine lets a namespace pick only "
                         f"{', '.join(allowed)} ({ALLOWED_SYSCTL})")


def set_congestion_control(namespace: str, name: str) -> None:
    """Make ``name`` the TCP congestion control of new connections in ``namespace``; a
    TestbedError saying which ones this machine lets a namespace pick when it cannot."""
    done = _run_tool(["ip", "netns", "exec", namespace, "sh", "-c",
                      f"echo {name} > {CONGESTION_SYSCTL}"], check=False)
    if done.returncode != 0:
        try:
            allowed = Path(ALLOWED_SYSCTL).read_text().split()
        except OSError:
            allowed = []
        raise TestbedError(f"cannot use TCP congestion control {name!r} in a namespace here "
                           f"(this machine allows: {', '.join(allowed) or 'unknown'}; "
                           f"{ALLOWED_SYSCTL} lists them)")


def _write_hosts_files(run_id: str, config: TestbedConfig) -> None:
    """Per-host /etc/hosts and /etc/resolv.conf (``ip netns exec`` mounts them over /etc's).

    Every host knows every other by name; DNS queries go to the host's own loopback, where
    nothing answers, so no lookup ever leaves the test bed.
    """
    lines = ["127.0.0.1 localhost"] + [f"{config.address(r)} {hostname(r)}" for r in range(config.hosts)]
    for rank in range(config.hosts):
        folder = ETC_NETNS / host_namespace(run_id, rank)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text("\n".join(lines) + "\n")
        (folder / "resolv.conf").write_text("# test bed host: names come from /etc/hosts only\n"
                                            "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n")


def namespace_pids(namespace: str) -> list[int]:
    """Processes whose network namespace is ``namespace`` (empty when it does not exist)."""
    done = ip("netns", "pids", namespace, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def kill_namespace_processes(namespaces: list[str], wait_s: float = 5.0) -> list[int]:
    """SIGKILL every process in ``namespaces``; return the pids still alive after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = [pid for ns in namespaces for pid in namespace_pids(ns)]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def destroy(run_id: str, hosts: int | None = None) -> list[str]:
    """Remove every process, namespace, link, qdisc and file of test bed ``run_id``.

    ``hosts=None`` finds the hosts from the namespaces that exist. Returns the problems met (empty
    when everything is gone); it keeps going past each one so that as much as possible is removed.
    """
    existing = set(list_namespaces())
    names = [host_namespace(run_id, r) for r in range(hosts)] if hosts is not None else []
    names += [n for n in existing if n.startswith(f"{PREFIX}-{run_id}-h") and n not in names]
    if ETC_NETNS.is_dir():  # a host's files outlive its namespace (a reboot removes only that)
        names += sorted(p.name for p in ETC_NETNS.iterdir()
                        if p.name.startswith(f"{PREFIX}-{run_id}-h") and p.name not in names)
    names.append(switch_namespace(run_id))
    problems = []
    survivors = kill_namespace_processes([n for n in names if n in existing])
    if survivors:
        problems.append(f"processes {survivors} would not die")
    for name in names:
        if name in existing:
            done = ip("netns", "del", name, check=False)
            if done.returncode != 0:
                problems.append(f"ip netns del {name}: {done.stderr.strip()}")
        shutil.rmtree(ETC_NETNS / name, ignore_errors=True)
    _remove_if_empty(ETC_NETNS)
    (STATE_DIR / f"{run_id}.json").unlink(missing_ok=True)
    _remove_if_empty(STATE_DIR)
    return problems


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def list_namespaces() -> list[str]:
    """Names of every network namespace that belongs to some test bed."""
    done = ip("netns", "list", check=False)
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return [n for n in names if NAMESPACE_PATTERN.match(n)]


def run_ids_present() -> set[str]:
    """Run ids with a namespace, a hosts file or a state file still on the machine."""
    found = {NAMESPACE_PATTERN.match(n).group("run") for n in list_namespaces()}
    if ETC_NETNS.is_dir():
        found |= {m.group("run") for p in ETC_NETNS.iterdir() if (m := NAMESPACE_PATTERN.match(p.name))}
    if STATE_DIR.is_dir():
        found |= {p.stem for p in STATE_DIR.glob("*.json") if re.fullmatch(r"[0-9a-f]{8}", p.stem)}
    return found


def owner_alive(run_id: str) -> bool:
    """True while the process that made test bed ``run_id`` is still running."""
    try:
        state = read_json(STATE_DIR / f"{run_id}.json")
        return _start_time(int(state["pid"])) == state["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _write_state(run_id: str, hosts: int) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state = {"pid": os.getpid(), "start_time": _start_time(os.getpid()), "hosts": hosts}
    (STATE_DIR / f"{run_id}.json").write_text(json.dumps(state))


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat): tells pid reuse apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def cleanup(include_live: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Remove the leftovers of test beds whose owner has died (all of them with ``include_live``).

    Returns (run ids removed, run ids skipped because their owner still runs, problems).
    """
    removed, skipped, problems = [], [], []
    for run_id in sorted(run_ids_present()):
        if owner_alive(run_id) and not include_live:
            skipped.append(run_id)
            continue
        problems += destroy(run_id)
        removed.append(run_id)
    return removed, skipped, problems


def qdisc_counters(namespace: str, device: str) -> dict:
    """Bytes, packets and drops a device's root qdisc has counted (``tc -s -j qdisc show``)."""
    done = tc(namespace, "-s", "-j", "qdisc", "show", "dev", device)
    for qdisc in json.loads(done.stdout or "[]"):
        if qdisc.get("root"):
            return {"sent_bytes": qdisc.get("bytes", 0), "sent_packets": qdisc.get("packets", 0),
                    "drops": qdisc.get("drops", 0), "overlimits": qdisc.get("overlimits", 0)}
    raise TestbedError(f"no root qdisc on {device} in {namespace}")
