"""The project's command lines share one rule: a bad argument is one line on stderr and exit 2."""

from __future__ import annotations

import argparse


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE``, and exit
    status 2 (argparse's own status), without the usage block that argparse prints first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")
