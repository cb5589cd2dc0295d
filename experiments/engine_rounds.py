"""Ring rounds as Gloo's own all-reduce makes them: driven from C++, two halves in flight.

``experiments/ring_probe.py`` times rounds driven from Python (``irecv``, ``isend``, ``wait``),
as the hand-written rings of ``real/allreduce.py`` make them. Gloo's all-reduce makes the same
rounds in C++: it pays no interpreter between them, and it keeps two segments of every chunk in
flight at once. Where the ranks share few cores, that difference is a large part of a small
round: on 8 emulated hosts on 2 cores at 1000 Mbit/s (chains of 14 rounds, medians of 20, one
run) a 32 KiB round took 0.68 ms driven from Python and 0.52 ms driven from here, and Gloo's
all-reduce of 256 KiB took 0.52 ms a round (its 14 rounds of 32 KiB). This module compiles a
small C++ loop (``engine_rounds.cpp``) against the installed torch at first use
(``torch.utils.cpp_extension``: needs a C++ compiler and ninja; about 30 s, then cached) and
runs it through the communicator's process group. torch.distributed only: an MPI library's all-reduce is its own C code, and these
rounds say nothing about it.
"""

from __future__ import annotations

from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("engine_rounds.cpp")
_module = None


class EngineRoundsError(RuntimeError):
    """The C++ rounds cannot be built or run here (one line, for the command line)."""


def load():
    """The compiled extension (built on first use, then cached by torch)."""
    global _module
    if _module is None:
        from torch.utils.cpp_extension import load as load_extension
        try:
            _module = load_extension("dsgd_engine_rounds", sources=[str(SOURCE)],
                                     extra_cflags=["-O2"], verbose=False)
        except (OSError, RuntimeError, ImportError) as error:  # no compiler, no ninja, a failed build
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise EngineRoundsError(f"cannot build the C++ ring rounds ({SOURCE.name}): {first} "
                                    "(needs a C++ compiler and ninja: ./install.sh dev)") from None
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
    received into (the same contract as ``ring_probe.chain_marks``)."""
    import torch.distributed as dist
    outgoing, incoming = buffers
    group = comm.group if comm.group is not None else dist.group.WORLD
    right, left = (comm.rank + 1) % comm.world_size, (comm.rank - 1) % comm.world_size
    module = load()
    comm.barrier()
    marks = module.chain_marks(group, outgoing, incoming, right, left, rounds, tag)
    return marks, (incoming if rounds % 2 else outgoing)
