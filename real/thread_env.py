"""``OMP_NUM_THREADS``, checked before torch is imported.

OpenMP reads ``OMP_NUM_THREADS`` once, as torch loads it: a value that is no whole number of
threads (``abc``, ``-1``, an empty one) makes it print a warning of its own and go on with its
default. The trainers and the all-reduce benchmark check the variable first
(``exit_on_bad_omp_num_threads``, before their ``import torch``), so that such a value is one
line and exit status 2, as any other bad input. This module imports nothing heavy.
"""

from __future__ import annotations

import os
import sys


def omp_num_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a number of threads (of the outermost level, where it lists one a
    level of nesting: ``4,1``, as OpenMP allows); None where it is not set. ``ValueError``
    where it is set to anything else than whole numbers of at least 1."""
    text = os.environ.get("OMP_NUM_THREADS")
    if text is None:
        return None
    try:
        levels = [int(level) for level in text.split(",")]
    except ValueError:
        levels = [0]
    if min(levels) < 1:
        raise ValueError(f"environment variable OMP_NUM_THREADS={text!r}: give a whole number of "
                         f"threads, at least 1 (or a list of them, one a level of nesting), or "
                         f"unset it")
    return levels[0]


def exit_on_bad_omp_num_threads(prog: str) -> None:
    """One line ``PROG: error: ...`` on stderr and exit status 2 where ``OMP_NUM_THREADS`` is
    set to no whole number of threads (``omp_num_threads``); nothing otherwise."""
    try:
        omp_num_threads()
    except ValueError as error:
        sys.stderr.write(f"{prog}: error: {error}\n")
        sys.exit(2)
