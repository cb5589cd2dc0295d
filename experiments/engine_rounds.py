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
``./install.sh dev`` installs; 30-45 s, then kept in ``build_directory()`` for every
checkout of the same source: ``kept_source``) and runs it
through the communicator's process group. torch.distributed with Gloo only: an MPI library's
all-reduce is its own C code, and these rounds say nothing about it.
"""

from __future__ import annotations

import hashlib
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


def kept_source(base: Path) -> tuple[Path, Path]:
    """The build folder of this ``SOURCE`` and this torch (a folder of ``base`` named by a hash
    of the source's contents and torch's install path) and the copy of ``SOURCE`` in it that
    the extension is built from: ``(folder, copy)``.

    The build names its source's path and torch's, so one made from ``SOURCE`` itself would be
    made again (30-45 s) from every other checkout of the project; built from the copy, it is
    kept for every checkout run with the same torch install by the same user (torch's cache is
    the user's own: ``build_directory``), and a checkout of another source, or another
    environment's torch, keeps its own beside it instead of rebuilding this one."""
    text = SOURCE.read_bytes()
    folder = base / hashlib.sha256(text + os.fsencode(torch.__file__)).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / SOURCE.name
    if not copy.is_file() or copy.read_bytes() != text:  # a copy cut short is written again
        fresh = folder / f".{SOURCE.name}.{os.getpid()}"
        try:
            fresh.write_bytes(text)
            os.replace(fresh, copy)  # whole, even with another process beside this one
        finally:
            fresh.unlink(missing_ok=True)
    return folder, copy


def build_error_line(error: BaseException) -> str:
    """The line of a failed build that says why (a compiler's ``error:``, ninja's ``FAILED``),
    else its first line, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    why = next((line for line in lines if "error:" in line.lower()), None) \
        or next((line for line in lines if "FAILED" in line), None) \
        or (lines[0] if lines else type(error).__name__)
    return why[:300]


def load():
    """The compiled extension (built on first use, then kept: ``kept_source``)."""
    global _module
    if _module is None:
        from torch.utils.cpp_extension import load as load_extension
        # ninja installed by pip sits beside this Python, which sudo leaves off PATH
        here = os.path.dirname(sys.executable)
        if here not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
        try:  # a cache folder that cannot be written, too, is one line
            directory, source = kept_source(build_directory())
            remove_stale_lock(directory)
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
