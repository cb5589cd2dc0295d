"""Ring rounds as Gloo's own all-reduce makes them: driven from C++, two halves in flight.

``experiments/ring_probe.py`` times rounds driven from Python (``irecv``, ``isend``, ``wait``),
as the hand-written rings of ``real/allreduce.py`` make them. Gloo's all-reduce makes the same
rounds in C++: it pays no interpreter between them, and it keeps two segments of every chunk in
flight at once. Where the ranks share few cores, that difference is a large part of a small
round: on 8 emulated hosts on 2 cores at 1000 Mbit/s (chains of 14 rounds, one run) a later
32 KiB round took 0.90 ms driven from Python and 0.57 ms driven from here, and Gloo's
all-reduce of 256 KiB 6.59 ms, 0.47 ms a round (its 14 rounds of 32 KiB; the command is in the
``allreduce`` section of ``experiments/LOG.md``). This module compiles a
small C++ loop (``engine_rounds.cpp``) against the installed torch at first use
(``torch.utils.cpp_extension``: needs a C++ compiler, Python's headers and ninja, which
``./install.sh dev`` installs; about 30 s, then kept in ``build_directory()`` for every
checkout of the project, while the source is unchanged) and runs it
through the communicator's process group. torch.distributed with Gloo only: an MPI library's
all-reduce is its own C code, and these rounds say nothing about it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("engine_rounds.cpp")
NAME = "dsgd_engine_rounds"
MIN_BYTES = 8  # two halves of at least one float32 each
# torch's build lock; a build killed midway leaves it behind and every later build would wait
# for it forever. A build takes about 30 s: a lock this old belongs to no running build.
STALE_LOCK_S = 600.0
_module = None


class EngineRoundsError(RuntimeError):
    """The C++ rounds cannot be built or run here (one line, for the command line)."""


def build_directory() -> Path:
    """Where the extension is built and kept: ``$TORCH_EXTENSIONS_DIR`` (default
    ``~/.cache/torch_extensions``), one folder per Python and torch version."""
    base = Path(os.environ.get("TORCH_EXTENSIONS_DIR")
                or Path.home() / ".cache" / "torch_extensions")
    version = f"py{sys.version_info.major}{sys.version_info.minor}_torch{torch.__version__}"
    return base / version.replace("+", "_") / NAME


def remove_stale_lock(directory: Path, max_age_s: float = STALE_LOCK_S) -> bool:
    """Remove the build lock in ``directory`` if it is older than ``max_age_s``; True if removed."""
    lock = directory / "lock"
    try:
        if time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink()
            return True
    except FileNotFoundError:
        pass
    return False


def kept_source(directory: Path) -> Path:
    """A copy of ``SOURCE`` in ``directory``, the file the extension is built from, rewritten
    only when ``SOURCE`` differs from it. The build names its source's path, so one made from
    ``SOURCE`` itself would be made again (about 30 s) from every other checkout of the
    project; built from the copy, it is kept while the source is unchanged."""
    copy = directory / SOURCE.name
    text = SOURCE.read_bytes()
    try:
        if copy.read_bytes() == text:
            return copy
    except FileNotFoundError:
        pass
    fresh = directory / f".{SOURCE.name}.{os.getpid()}"
    fresh.write_bytes(text)
    os.replace(fresh, copy)  # whole, even with another process building beside this one
    return copy


def build_error_line(error: BaseException) -> str:
    """The line of a failed build that says why (a compiler's ``error:``, ninja's ``FAILED``),
    else its first line, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    why = next((line for line in lines if "error:" in line.lower()), None) \
        or next((line for line in lines if "FAILED" in line), None) \
        or (lines[0] if lines else type(error).__name__)
    return why[:300]


def load():
    """The compiled extension (built on first use, then kept by torch)."""
    global _module
    if _module is None:
        from torch.utils.cpp_extension import load as load_extension
        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        remove_stale_lock(directory)
        source = kept_source(directory)
        # ninja installed by pip sits beside this Python, which sudo leaves off PATH
        here = os.path.dirname(sys.executable)
        if here not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
        try:
            _module = load_extension(NAME, sources=[str(source)], extra_cflags=["-O2"],
                                     build_directory=str(directory), verbose=False)
        except (OSError, RuntimeError, ImportError) as error:  # no compiler, no ninja, a failed build
            raise EngineRoundsError(f"cannot build the C++ ring rounds ({SOURCE.name}): "
                                    f"{build_error_line(error)} (needs a C++ compiler, Python's "
                                    "headers and ninja: ./install.sh dev)") from None
    return _module


def check_comm(comm) -> None:
    """Refuse a communicator these rounds cannot run on, in one line."""
    if comm.engine != "torch" or comm.backend != "gloo":
        raise EngineRoundsError(f"C++ rounds run on torch.distributed with Gloo, not "
                                f"{comm.engine} with {comm.backend}")


def chain_marks(comm, buffers: tuple[torch.Tensor, torch.Tensor],
                rounds: int, tag: int) -> tuple[list[float], torch.Tensor]:
    """After a barrier, ``rounds`` ring rounds driven from C++, each message in two halves in
    flight at once: the seconds at the end of each round, and the buffer the last round
    received into (the same contract as ``ring_probe.chain_marks``). Buffers of at least
    ``MIN_BYTES``; a peer's failure is the communicator's one-line ``CommError``."""
    import torch.distributed as dist
    outgoing, incoming = buffers
    group = comm.group if comm.group is not None else dist.group.WORLD
    right, left = (comm.rank + 1) % comm.world_size, (comm.rank - 1) % comm.world_size
    module = load()
    comm.barrier()
    marks = comm.guard("C++ ring rounds", lambda: module.chain_marks(
        group, outgoing, incoming, right, left, rounds, tag))
    return marks, (incoming if rounds % 2 else outgoing)
