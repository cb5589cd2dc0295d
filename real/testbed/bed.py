"""A test bed: made on entry, used to run commands on its hosts, and always unmade on exit.

    with Testbed(TestbedConfig(hosts=4, bandwidth_bps=100e6)) as bed:
        result = bed.run("python train.py --rank {rank} --master {master}", timeout_s=600)

``down()`` runs whatever happens inside the block (an exception, Ctrl-C, a timeout): it stops
every process on every host, then deletes the namespaces, which deletes every link and shaper.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from real.testbed import launch, network, timeline
from real.testbed.config import TestbedConfig
from real.testbed.launch import HostResult, OutputPump, RunResult

HYDRA_LAUNCHER = Path(__file__).with_name("hydra_launcher.sh")
STOP_GRACE_S = 5.0  # SIGTERM, then this long, then SIGKILL (torchrun forwards SIGTERM to workers)


def mpiexec_candidates() -> list[str]:
    """Every ``mpiexec`` this process could run, best first: the one beside this Python (where
    ``pip install mpich`` puts it, with the mpi4py it serves), then the one on the PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return [path for path in dict.fromkeys([beside, shutil.which("mpiexec")])
            if path and os.access(path, os.X_OK)]


def check_mpi_command(command: str) -> None:
    """``ValueError`` if ``command``, to be run as one MPI job, names a host's own placeholder:
    the job's one command line is filled in on host 0, so ``{rank}``, ``{addr}`` and
    ``{hostname}`` would be host 0's in every process."""
    own = sorted({m.group(1) for m in launch.PLACEHOLDER.finditer(command)}
                 & {"rank", "addr", "hostname"})
    if own:
        raise ValueError(f"--mpi runs one command line, filled in on host 0: {{{own[0]}}} would "
                         f"be host 0's in every process; an MPI process has its rank from MPI "
                         f"(PMI_RANK) and its host from socket.gethostname()")


def hydra_mpiexec() -> str:
    """MPICH's ``mpiexec`` (its process manager, Hydra, starts a proxy on each host through the
    bed's launcher; Open MPI's takes other options), the first of ``mpiexec_candidates`` that
    is. ``ValueError`` saying what was found where none is MPICH's."""
    found = mpiexec_candidates()
    for path in found:
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        if "HYDRA" in version:
            return path
    if not found:
        raise ValueError("an MPI job on the test bed needs MPICH's mpiexec, and there is none "
                         "here: pip install mpich mpi4py (./install.sh dev does)")
    raise ValueError(f"an MPI job on the test bed needs MPICH's mpiexec (Hydra); {found[0]} is "
                     f"another MPI's: pip install mpich mpi4py, or put MPICH's first on the PATH")


@dataclass(frozen=True)
class Host:
    """One emulated host: its rank, namespace, address, hostname and link rate."""

    rank: int
    namespace: str
    address: str
    hostname: str
    rate_bps: float


class Testbed:
    """H hosts in network namespaces on one bridge, each link shaped by tbf in both directions."""

    __test__ = False

    def __init__(self, config: TestbedConfig, out_dir: str | os.PathLike | None = None) -> None:
        self.config = config
        self.run_id = secrets.token_hex(4)
        self._out_dir = Path(out_dir) if out_dir else None
        if out_dir and shlex.quote(str(Path(out_dir).resolve())) != str(Path(out_dir).resolve()):
            raise ValueError(f"--out-dir {str(out_dir)!r}: a command's {{out}} is pasted into "
                             "its shell line unquoted; choose a folder whose path has no spaces "
                             "or shell characters")
        self.hosts = [Host(r, network.host_namespace(self.run_id, r), config.address(r),
                           network.hostname(r), config.rate_bps(r)) for r in range(config.hosts)]
        self._processes: list[subprocess.Popen] = []
        self._is_up = False

    @property
    def out_dir(self) -> Path:
        """Folder of the hosts' output folders; a new temporary folder unless one was given."""
        if self._out_dir is None:
            self._out_dir = Path(tempfile.mkdtemp(prefix=f"testbed-{self.run_id}-"))
        return self._out_dir

    @property
    def master_addr(self) -> str:
        """Address of host 0, where rendezvous happens."""
        return self.hosts[0].address

    def __enter__(self) -> "Testbed":
        self._entered_s = time.monotonic()
        self.up()
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.down()
        finally:
            timeline.add(f"test bed: {self.label}", self._entered_s, time.monotonic(), "test bed",
                         run_id=self.run_id)

    @property
    def label(self) -> str:
        """``"4 hosts at 200 Mbit/s"``, for the timeline."""
        return f"{self.config.hosts} hosts at {self.config.bandwidth_bps / 1e6:g} Mbit/s"

    def up(self) -> None:
        """Make the namespaces, links and shapers; on any failure, unmake what was made."""
        reason = network.unavailable_reason()
        if reason:
            raise network.TestbedError(reason)
        self._is_up = True
        try:
            with timeline.span("make", "test bed"):
                network.create(self.run_id, self.config)
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Stop every process on every host and remove everything the test bed made.

        Signals are held off meanwhile, so a second Ctrl-C cannot leave half a test bed behind.
        Raises TestbedError if something could not be removed (after trying everything).
        """
        if not self._is_up:
            return
        with network.signals_deferred(), timeline.span("unmake", "test bed"):
            for process in self._processes:
                launch.signal_group(process, signal.SIGKILL)
            problems = network.destroy(self.run_id, self.config.hosts)
            for process in self._processes:
                _reap(process)
            self._processes.clear()
            self._is_up = False
        if problems:
            raise network.TestbedError(f"test bed {self.run_id} left behind: {'; '.join(problems)}")

    def host_env(self, rank: int, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of a command on host ``rank``: this process's, plus who and where it is."""
        env = dict(os.environ)
        env.update({
            "HOST_RANK": str(rank), "NUM_HOSTS": str(self.config.hosts),
            "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.config.master_port),
            "GLOO_SOCKET_IFNAME": network.HOST_IFNAME, "TP_SOCKET_IFNAME": network.HOST_IFNAME,
            # MPICH over UCX would otherwise use shared memory between hosts (one kernel): TCP on eth0.
            "UCX_TLS": "tcp", "UCX_NET_DEVICES": network.HOST_IFNAME,
            "TESTBED_RUN_ID": self.run_id,
        })
        # for hydra_launcher.sh, which starts MPI's proxies on the other hosts (never one inherited)
        env.pop("TESTBED_HOST_CPUS", None)
        pinned = self.host_cpus()
        if pinned:
            env["TESTBED_HOST_CPUS"] = ",".join(str(cpu) for cpu in pinned)
        # every host runs on this machine's cores: without this, each host's torch would start a
        # thread per core and the hosts' spinning OpenMP threads would slow one another
        env.setdefault("OMP_NUM_THREADS", str(self.threads_per_host))
        env.update(extra or {})
        return env

    def host_cpus(self) -> list[int] | None:
        """The core each host runs on (``TestbedConfig.host_cores``), by rank: this process's
        cores in order, one per host, when there are enough; with more hosts than cores, a
        multiple of them, under ``spread`` host i on the (i mod cores)-th, under ``block`` on the
        (i // (hosts / cores))-th (hosts next in rank together); None: every host on every
        core."""
        cores, hosts = sorted(os.sched_getaffinity(0)), self.config.hosts
        if self.config.host_cores == "shared":
            return None
        if hosts <= len(cores):
            return cores[:hosts]
        if self.config.host_cores == "spread" and hosts % len(cores) == 0:
            return [cores[i % len(cores)] for i in range(hosts)]
        if self.config.host_cores == "block" and hosts % len(cores) == 0:
            return [cores[i * len(cores) // hosts] for i in range(hosts)]
        return None

    @property
    def threads_per_host(self) -> int:
        """This machine's cores shared among the hosts (at least 1): each host's OMP_NUM_THREADS."""
        return max(1, len(os.sched_getaffinity(0)) // self.config.hosts)

    def host_dir(self, rank: int) -> Path:
        """Folder for host ``rank``'s output files (``{out}`` in a command)."""
        folder = self.out_dir / f"host{rank}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def spawn(self, rank: int, argv: list[str], env: dict[str, str] | None = None,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.Popen:
        """Start ``argv`` on host ``rank``; it is stopped at ``down()`` if it is still running."""
        if not self._is_up:
            raise network.TestbedError("the test bed is not up")
        host = self.hosts[rank]
        argv = launch.host_argv(host.namespace, host.hostname, argv)
        pinned = self.host_cpus()
        process = launch.start(argv, self.host_env(rank, env), stdout, stderr,
                               scheduling=self.config.scheduling,
                               cpus={pinned[rank]} if pinned else None,
                               address_layout=self.config.address_layout)
        self._processes.append(process)
        return process

    def placeholders(self, rank: int) -> dict[str, object]:
        host = self.hosts[rank]
        return {"rank": rank, "hosts": self.config.hosts, "addr": host.address,
                "hostname": host.hostname, "master": self.master_addr,
                "port": self.config.master_port, "out": self.host_dir(rank)}

    def mpiexec_command(self, command: str) -> str:
        """``command`` as one MPI job, one process per host, for ``run(..., ranks=[0])``: mpiexec
        on host 0 starts Hydra's proxies on every host through ``hydra_launcher.sh``.
        ``ValueError`` where no MPICH mpiexec is found (``hydra_mpiexec``) or ``command`` names
        a host's own placeholder (``check_mpi_command``)."""
        check_mpi_command(command)
        hosts = ",".join(host.hostname for host in self.hosts)
        return shlex.join([hydra_mpiexec(), "-launcher", "ssh", "-launcher-exec",
                           str(HYDRA_LAUNCHER), "-hosts", hosts, "-ppn", "1",
                           "-n", str(self.config.hosts), "sh", "-c", command])

    def run(self, command: str, timeout_s: float | None = None, fail_fast: bool = True,
            echo: bool = False, env: dict[str, str] | None = None, ranks: list[int] | None = None) -> RunResult:
        """Run the shell ``command`` on every host (or on ``ranks``) at once and wait for all.

        ``fail_fast``: when a host fails, stop the others (their peers are gone; they would only
        wait for a timeout). ``timeout_s``: stop every host after this long. ``echo``: print every
        line as it comes, prefixed ``[hostI]``. Output and JSON files are in ``host_dir(rank)``.
        A KeyboardInterrupt (or SIGTERM, see ``signals_raise``) stops every host and is re-raised.
        """
        ranks = range(self.config.hosts) if ranks is None else ranks
        runs = [_HostRun(self, rank, command, env, echo) for rank in ranks]
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        timed_out = interrupted = False
        signum = signal.SIGINT
        try:
            timed_out = _wait(runs, deadline, fail_fast)
        except KeyboardInterrupt as exc:
            interrupted, signum = True, getattr(exc, "signum", signal.SIGINT)
            raise
        finally:
            _stop(runs)
            hosts = [r.result(self) for r in runs]
            self.last_result = RunResult(command, hosts, time.monotonic() - started, timed_out,
                                         interrupted, signum)
            timeline.add("run", started, time.monotonic(), "test bed", command=command,
                         ranks=list(ranks), exit_status=self.last_result.exit_status())
        return self.last_result

    def link_counters(self, rank: int) -> dict:
        """What host ``rank``'s shapers have counted: ``{"up": {...}, "down": {...}}`` (bytes,
        packets, drops); shows that traffic crossed the shaped links."""
        switch = network.switch_namespace(self.run_id)
        return {"up": network.qdisc_counters(self.hosts[rank].namespace, network.HOST_IFNAME),
                "down": network.qdisc_counters(switch, f"p{rank}")}


class _HostRun:
    """One host's command: its process, output pumps and timing."""

    def __init__(self, bed: Testbed, rank: int, command: str, env, echo: bool) -> None:
        self.rank = rank
        folder = bed.host_dir(rank)
        self.stdout_path, self.stderr_path = folder / "stdout.txt", folder / "stderr.txt"
        text = launch.substitute(command, bed.placeholders(rank))
        self.json_before = launch.json_stats(folder)
        self.stopped = False
        self.started = time.monotonic()
        self.ended: float | None = None
        env = {"TESTBED_OUT_DIR": str(folder), **(env or {})}
        self.process = bed.spawn(rank, ["sh", "-c", text], env)
        prefix = f"[{bed.hosts[rank].hostname}]" if echo else None
        self.pumps = [OutputPump(self.process.stdout, self.stdout_path, prefix, None),
                      OutputPump(self.process.stderr, self.stderr_path, prefix, None)]

    def poll(self) -> int | None:
        code = self.process.poll()
        if code is not None and self.ended is None:
            self.ended = time.monotonic()
            launch.signal_group(self.process, signal.SIGKILL)  # what it left running in its group
        return code

    def result(self, bed: Testbed) -> HostResult:
        for pump in self.pumps:
            pump.join(timeout_s=5.0)
        contents, errors = launch.collect_json(bed.host_dir(self.rank), self.json_before)
        ended = self.ended if self.ended is not None else time.monotonic()
        return HostResult(self.rank, bed.hosts[self.rank].address, self.process.returncode,
                          ended - self.started, str(self.stdout_path), str(self.stderr_path),
                          self.stopped, contents, errors)


def _wait(runs: list[_HostRun], deadline: float | None, fail_fast: bool) -> bool:
    """Wait until every host is done, one fails (``fail_fast``) or the deadline; True on timeout."""
    while True:
        codes = [run.poll() for run in runs]
        if all(code is not None for code in codes):
            return False
        if fail_fast and any(code not in (None, 0) for code in codes):
            return False
        if deadline is not None and time.monotonic() > deadline:
            return True
        time.sleep(0.02)


def _stop(runs: list[_HostRun]) -> None:
    """SIGTERM every host still running, give it STOP_GRACE_S, then SIGKILL its process group."""
    running = [run for run in runs if run.poll() is None]
    for run in running:
        run.stopped = True
        launch.signal_group(run.process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(run.poll() is None for run in running) and time.monotonic() < deadline:
        time.sleep(0.02)
    for run in running:
        launch.signal_group(run.process, signal.SIGKILL)
        _reap(run.process)
        run.poll()


def _reap(process: subprocess.Popen) -> None:
    try:
        process.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


@contextmanager
def scratch_testbed(config: TestbedConfig):
    """A :class:`Testbed` whose hosts' output folder goes with it: for programs that read what
    they need (``HostResult.json``, ``stderr()``) inside the ``with``."""
    with tempfile.TemporaryDirectory(prefix="testbed-") as out, Testbed(config, out) as bed:
        yield bed


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; raised so that ``finally`` blocks tear the test bed down."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def signals_raise():
    """Within the block, SIGTERM and SIGHUP raise ``Interrupted`` as Ctrl-C raises KeyboardInterrupt."""
    def handler(signum, _frame):
        raise Interrupted(signum)
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run_reporting(program: str, work):
    """``work()`` for a program that builds test beds, SIGTERM and SIGHUP raising within it as
    Ctrl-C does (``signals_raise``, so that a test bed comes down on the way out): (0, what it
    returned); on a test bed's failure or an error from the system or the files, that error on
    one line of stderr after ``program``'s name and (1, None); interrupted, (130, None)."""
    try:
        with signals_raise():
            return 0, work()
    except (network.TestbedError, OSError, ValueError, KeyError) as error:
        print(f"{program}: {error}", file=sys.stderr)
        return 1, None
    except KeyboardInterrupt as exc:  # the test bed has been torn down on the way out
        print(f"{program}: interrupted{f' ({exc})' if str(exc) else ''}", file=sys.stderr)
        return 130, None


