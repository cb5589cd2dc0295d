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

Every step is checked before the first runs (each a shell-quoted ``SCRIPT ARGS``, its script an
existing file); a bad one is one line on stderr and exit 2, nothing run. A step forked from here
is killed when this process dies (``PR_SET_PDEATHSIG``), as a test bed's command is.
"""

from __future__ import annotations

import ctypes
import gc
import os
import runpy
import shlex
import signal
import sys
import traceback
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
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def run_step(argv: list[str], path: list[str]) -> int:
    """In the forked child: ``argv[0]`` as ``__main__`` with ``argv``; its exit status, as
    Python's own would be (an uncaught exception's traceback on stderr and 1, ``sys.exit``'s
    code, a message's text on stderr and 1)."""
    sys.argv = list(argv)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # as a fresh interpreter has them
    sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *path[1:]]
    try:
        runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BaseException as error:  # noqa: BLE001 - what Python prints for any uncaught error
        frame, ours = error.__traceback__, (__file__, "<frozen runpy>")
        while frame is not None and frame.tb_frame.f_code.co_filename in ours:
            frame = frame.tb_next  # the script's frames only, as ``python SCRIPT`` shows them
        traceback.print_exception(type(error), error, frame)
        return 1


def fork_step(argv: list[str], path: list[str]) -> int:
    """Run one step in a child of this process; its exit status (``exit_status``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's code
        status = 1
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            status = run_step(argv, path)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed reader: its script's own concern
                    pass
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
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
    # the one thread besides ours is numpy's OpenBLAS pool, which stops itself before a fork
    # (its pthread_atfork handler); Python 3.12 warns of any thread at a fork
    warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks",
                            category=DeprecationWarning)
    gc.freeze()  # the imported objects out of the collector's walks: fewer pages a step copies
    # the parent only waits: Ctrl-C reaches every step through the terminal's process group,
    # and the parent ends with the step rather than with a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path = list(sys.path)
    for step in steps:
        status = fork_step(step, path)
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(run_command_line(main, keep_status=True))
