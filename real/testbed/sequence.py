"""Python scripts one after another on a host, each in a process forked from one interpreter that
has imported torch once.

    python real/testbed/sequence.py 'experiments/ring_probe.py --sizes 64kB --json before.json' \\
                                    'real/sync.py --steps 20 --json sync.json' \\
                                    'experiments/ring_probe.py --sizes 64kB --json after.json'

does what ``python SCRIPT ARGS && python SCRIPT ARGS && ...`` does: every step is a process of
its own, running its script as ``__main__`` with its own ``sys.argv`` (``sys.path[0]`` its
script's folder), stdout and stderr those of the sequence, and the first step that fails stops
the rest, its exit status the sequence's (128 + N for a step killed by signal N, as a shell
says). What it saves is the import: torch takes 3-4 s of a core to import, and on a test bed
every host imports at once on the machine's shared cores (a 4-host bed on 2 cores: about 7 s of
wall time). An experiment's test bed runs a ring probe, the measured run and a probe again; a
fork of an interpreter that has torch in memory starts in milliseconds. Forked before any step
has made a thread pool or a process group, each step starts as a fresh ``python SCRIPT`` would,
less the import.

What differs from ``python SCRIPT``: what the sequence imported before the fork (torch,
``PRELOADED``) is already in ``sys.modules``, and a step ends when its script does, its streams
flushed (``os._exit``, as ``real/sync.py``'s ranks end): its atexit handlers do not run and its
threads are not waited for. A SIGTERM to the sequence is passed on to the running step, and a SIGTERM or a
Ctrl-C ends the sequence after that step (status 128 + the signal). A step is killed when the
sequence dies (``PR_SET_PDEATHSIG``). Every step is checked before the first runs (each a
shell-quoted ``SCRIPT ARGS``, its script an existing file); a bad one is one line on stderr and
exit 2, nothing run.
"""

from __future__ import annotations

import ctypes
import gc
import os
import runpy
import shlex
import signal
import sys
import warnings

if __package__ in (None, ""):  # run as a script: the repository on the path, not real/testbed
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsgd_sim.argparse_oneline import OneLineArgumentParser, run_command_line  # noqa: E402

PRELOADED = ("torch", "torch.distributed")
"""What the sequence imports before its first fork: what every step's script imports anyway."""
PR_SET_PDEATHSIG = 1


def parse_step(text: str) -> list[str]:
    """``SCRIPT ARGS`` as argv; ValueError naming ``text`` when it is not one."""
    try:
        argv = shlex.split(text)
    except ValueError as error:
        raise ValueError(f"step {text!r}: {error}") from None
    if not argv:
        raise ValueError("an empty step (expected 'SCRIPT ARGS')")
    if not os.path.isfile(argv[0]):
        raise ValueError(f"step {text!r}: no script {argv[0]!r}")
    return argv


def exit_status(wait_status: int) -> int:
    """A child's ``os.waitpid`` status as a shell gives it: its exit code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(wait_status)  # a signal's: minus the signal
    return code if code >= 0 else 128 - code


def run_step(argv: list[str], path: list[str]) -> int:
    """In the forked child: ``argv[0]`` as ``__main__`` with ``argv``; its exit status as Python's
    would be (``sys.exit``'s code, a message's text on stderr and 1; an uncaught error's
    traceback, the script's frames only, and 1; 130 after a Ctrl-C)."""
    sys.argv = list(argv)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # as a fresh interpreter has them
    sys.path[:] = [os.path.dirname(os.path.realpath(argv[0])), *path[1:]]
    try:
        runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return (stop.code or 0) & 0xFF
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException as error:  # noqa: BLE001 - what Python prints for any uncaught error
        frame, ours = error.__traceback__, {__file__, runpy.__file__, "<frozen runpy>"}
        while frame is not None and frame.tb_frame.f_code.co_filename in ours:
            frame = frame.tb_next  # the script's frames only, as ``python SCRIPT`` shows them
        sys.excepthook(type(error), error.with_traceback(frame), frame)
        return 128 + signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1


class Sequence:
    """The steps' parent: forks each in turn and waits for it. A SIGTERM is passed on to the
    running step and ends the sequence after it; so does a Ctrl-C, which reaches the step
    through the terminal's process group itself. Each step starts with the SIGINT and SIGTERM
    handling this process was started with."""

    def __init__(self, path: list[str]) -> None:
        self.path = path
        self.child: int | None = None
        self.stopped_by: int | None = None
        self.inherited = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for signum, handling in self.inherited.items():
            if handling is not signal.SIG_IGN:
                signal.signal(signum, self._stop)

    def _stop(self, signum, _frame) -> None:
        self.stopped_by = self.stopped_by or signum
        if signum == signal.SIGTERM and self.child is not None:
            os.kill(self.child, signum)

    def run(self, steps: list[list[str]]) -> int:
        """Every step in turn; the first non-zero status (``exit_status``), or 128 + the signal
        that stopped the sequence, or 0."""
        for argv in steps:
            status = self.fork(argv)
            if status or self.stopped_by is not None:
                return status or 128 + self.stopped_by
        return 0

    def fork(self, argv: list[str]) -> int:
        """One step in a forked child; its exit status (``exit_status``)."""
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        with warnings.catch_warnings():
            # the one thread besides ours is numpy's OpenBLAS pool, which stops itself before a
            # fork (its pthread_atfork handler); Python 3.12 warns of any thread at a fork
            warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks",
                                    category=DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the step's process: it never returns into the loop
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the sequence died before the line above
                os._exit(128 + signal.SIGKILL)
            status = 1
            try:
                for signum, handling in self.inherited.items():
                    signal.signal(signum, handling)
                status = run_step(argv, self.path)
            finally:  # never back into the loop: the step's streams flushed, the process gone
                for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                    try:
                        stream.flush()
                    except (OSError, ValueError):  # a closed reader: its script's own concern
                        pass
                os._exit(status)
        self.child = pid
        _, wait_status = os.waitpid(pid, 0)
        self.child = None
        return exit_status(wait_status)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="sequence.py",
        description="Python scripts one after another, each forked from one interpreter that "
                    "imported torch once; stops at the first that fails, with its status.")
    parser.add_argument("steps", nargs="+", metavar="STEP",
                        help="one shell-quoted 'SCRIPT ARGS' a step")
    args = parser.parse_args(argv)
    try:
        steps = [parse_step(text) for text in args.steps]
    except ValueError as error:
        parser.error(str(error))
    for name in PRELOADED:
        __import__(name)
    gc.freeze()  # the imported objects out of the collector's walks: fewer pages a step copies
    return Sequence(list(sys.path)).run(steps)


if __name__ == "__main__":
    status = run_command_line(main, keep_status=True)
    from real.local_launch import fast_exit  # the sequence: nothing of its own to tear down
    fast_exit(status)
