"""Running a command on every host of a test bed, and collecting what each host printed and wrote.

A host's command runs inside the host's network namespace and its own UTS namespace (so that
``hostname`` prints ``hostI``, which every host resolves to host I's address, as on a real
cluster: torchrun's c10d rendezvous relies on that to decide which agent serves the store).
Each command is its own process group, so that stopping a host stops everything it started.

The command may name its host with placeholders, replaced before it runs:
``{rank}`` ``{hosts}`` ``{addr}`` ``{hostname}`` ``{master}`` (host 0's address) ``{port}``
``{out}`` (a folder for the host's files). Any other brace text is left alone (shell, JSON).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from dsgd_sim.argparse_oneline import read_json
from real.testbed import network

PLACEHOLDER = re.compile(r"\{(rank|hosts|addr|hostname|master|port|out)\}")
PR_SET_PDEATHSIG = 1
ADDR_NO_RANDOMIZE = 0x0040000  # <linux/personality.h>
PERSONALITY_QUERY = 0xFFFFFFFF  # personality() with this returns the current one, changing nothing


@dataclass
class HostResult:
    """What one host's command did."""

    rank: int
    address: str
    returncode: int | None
    """Exit status; negative: killed by that signal; None: never started."""
    duration_s: float
    stdout_path: str
    stderr_path: str
    stopped: bool = False
    """True when the test bed stopped it (timeout, interruption, or another host failed)."""
    json: dict = field(default_factory=dict)
    """Every ``*.json`` file the command left in its folder, by file name, parsed."""
    json_errors: dict = field(default_factory=dict)
    """Files that were not valid JSON, by file name, with the parser's message."""

    def stdout(self) -> str:
        return Path(self.stdout_path).read_text(errors="replace")

    def stderr(self) -> str:
        return Path(self.stderr_path).read_text(errors="replace")


@dataclass
class RunResult:
    """What a command did on every host."""

    command: str
    hosts: list[HostResult]
    wall_s: float
    timed_out: bool = False
    interrupted: bool = False
    signum: int = signal.SIGINT  # what interrupted it: Ctrl-C, or SIGTERM or SIGHUP

    @property
    def ok(self) -> bool:
        return not (self.timed_out or self.interrupted) and all(h.returncode == 0 for h in self.hosts)

    def exit_status(self) -> int:
        """0 when every host succeeded; 124 on timeout, 128 + the signal on interruption (130 for
        Ctrl-C, 143 for SIGTERM); else the first failure (a host killed by a signal gives 128 + the
        signal)."""
        if self.timed_out:
            return 124
        if self.interrupted:
            return 128 + self.signum
        for host in self.hosts:
            if host.returncode and not host.stopped:
                return host.returncode if host.returncode > 0 else 128 - host.returncode
        return 0 if self.ok else 1

    def failure_line(self) -> str:
        """The last line of stderr of the first host that failed on its own (not one stopped
        after it), else of host 0's: why the command failed, for a one-line error."""
        failed = next((h for h in self.hosts if h.returncode and not h.stopped), self.hosts[0])
        return (failed.stderr().strip().splitlines() or ["(no output)"])[-1]

    def as_dict(self) -> dict:
        return {"command": self.command, "ok": self.ok, "exit_status": self.exit_status(),
                "wall_s": self.wall_s, "timed_out": self.timed_out, "interrupted": self.interrupted,
                "hosts": [vars(h) for h in self.hosts]}


def substitute(command: str, values: dict[str, object]) -> str:
    """Replace ``{rank}``-style placeholders; leave every other brace text as it is."""
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), command)


def host_argv(namespace: str, hostname: str, argv: list[str]) -> list[str]:
    """argv that runs ``argv`` in ``namespace`` with its own hostname ``hostname``."""
    set_hostname_then_exec = 'hostname "$0" && exec "$@"'
    return ["ip", "netns", "exec", namespace, "unshare", "--uts", "--",
            "sh", "-c", set_hostname_then_exec, hostname, *argv]


def _die_with_parent() -> None:
    """In the child, before exec: be killed if the test bed's process dies without cleaning up."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _fix_address_layout() -> None:
    """In the child, before exec: turn address-space randomization off (``ADDR_NO_RANDOMIZE``,
    as ``setarch -R`` does) for the program it execs and everything that starts."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(PERSONALITY_QUERY)
    if current == -1 or libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) failed")


def start(argv: list[str], env: dict[str, str], stdout, stderr, scheduling: str = "normal",
          cpus: set[int] | None = None, address_layout: str = "random") -> subprocess.Popen:
    """Start ``argv`` (from ``host_argv``) in a new session; it dies if this process is killed.
    ``scheduling``: ``batch`` runs it, and everything it starts, under ``SCHED_BATCH`` (see
    ``TestbedConfig.scheduling``). ``cpus``: the cores it, and everything it starts, may run on.
    ``address_layout``: ``fixed`` starts it, and everything it starts, with address-space
    randomization off (``TestbedConfig.address_layout``)."""
    def setup() -> None:
        if scheduling == "batch":
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        if cpus:
            os.sched_setaffinity(0, cpus)
        if address_layout == "fixed":
            _fix_address_layout()
        _die_with_parent()
    try:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=stderr, start_new_session=True, preexec_fn=setup)
    except subprocess.SubprocessError:  # setup() failed in the child; Python keeps no reason
        raise network.TestbedError(
            f"a host's command could not be started: this system refused its scheduling "
            f"({scheduling}), cores or address layout ({address_layout}); try --scheduling "
            f"normal --address-layout random") from None


def signal_group(process: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to ``process``'s whole process group (what its command started)."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class OutputPump:
    """Copies one pipe to a file, line by line, and echoes each line with a ``[hostI]`` prefix."""

    def __init__(self, pipe, path: Path, prefix: str | None, echo_to) -> None:
        self.pipe, self.path, self.prefix, self.echo_to = pipe, path, prefix, echo_to
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        with open(self.path, "wb") as sink:
            for line in iter(self.pipe.readline, b""):
                sink.write(line)
                sink.flush()
                if self.prefix is not None:
                    text = line.decode(errors="replace").rstrip("\n")
                    print(f"{self.prefix} {text}", file=self.echo_to or sys.stdout, flush=True)
        self.pipe.close()

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)


def json_stats(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Each ``*.json`` file in ``folder`` by name: (inode, size, mtime in ns), to tell later
    which files a command wrote."""
    stats = {}
    for path in folder.glob("*.json"):
        try:
            info = path.stat()
        except OSError:
            continue
        stats[path.name] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return stats


def collect_json(folder: Path, before: dict | None = None) -> tuple[dict, dict]:
    """Parse the ``*.json`` files in ``folder``: (contents by name, errors by name). With
    ``before`` (``json_stats`` taken when the command started), only those it wrote: an earlier
    run's files in a reused folder are not this run's results."""
    contents, errors = {}, {}
    now = json_stats(folder)
    for path in sorted(folder.glob("*.json")):
        if before is not None and path.name in before and before[path.name] == now.get(path.name):
            continue
        try:
            contents[path.name] = read_json(path)
        except (OSError, ValueError) as exc:
            errors[path.name] = str(exc)
    return contents, errors
