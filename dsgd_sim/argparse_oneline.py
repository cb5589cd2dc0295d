"""The project's command lines share one rule: a bad argument is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import os


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE``, and exit
    status 2 (argparse's own status), without the usage block that argparse prints first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def check_output_file(flag: str, path: str | None) -> None:
    """Refuse an output file that cannot be written, before any work is done: ``ValueError``
    naming the flag and the path. ``None`` (not asked for) passes."""
    if path is None:
        return
    if not path or os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is not a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise ValueError(f"{flag} {path!r}: cannot write into {parent}")
