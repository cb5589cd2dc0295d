"""One communicator interface over two engines: torch.distributed and MPI (mpi4py).

Every program in ``real/`` talks to its peers through a :class:`Communicator`, so the same
code runs under ``torchrun`` (torch.distributed: Gloo on CPU, NCCL on GPUs) and under
``mpiexec`` (MPI through mpi4py; PyPI torch wheels have no MPI backend of their own)::

    comm = init("torch")            # or init("mpi"); reads the launcher's environment
    try:
        comm.all_reduce(tensor, op="avg")
    finally:
        comm.close()

Operations (the same on both engines; ranks are always this communicator's ranks):

- point to point: ``send``, ``recv``, ``isend``, ``irecv`` (non-blocking, returning a :class:`Work`
  whose ``wait()`` blocks; ``Work.source`` names the sender of a receive after ``wait()``), and
  ``wait_any(works)``, the first of several pending operations to finish (a server's receives
  from each of its workers);
- collectives: ``broadcast``, ``reduce``, ``all_reduce``, ``scatter``, ``gather``,
  ``all_gather``, ``reduce_scatter``, ``barrier``, with ``op`` one of ``sum``, ``avg``,
  ``max``, ``min``;
- groups: ``new_group(ranks)`` gives a communicator over a subset, ranks renumbered 0..k-1 in
  sorted order. Every rank of the parent calls it; ranks outside ``ranks`` get ``None``.

Two guarantees the libraries alone do not give:

- *Mismatched sizes are an error, not a hang or a crash.* With ``check_sizes`` on (the
  default) every collective first all-gathers a 4-number signature (operation, element count,
  dtype, root) and raises :class:`CommError` on every rank, naming what each rank passed. It
  costs one tiny all-gather per call; turn it off for timing runs.
- *A dead or stuck peer fails the job within ``timeout_s``*, not after Gloo's 30-minute
  default. torch: the process-group timeout, and every wait carries the same timeout; errors
  come back as :class:`CommError`. MPI: a watchdog thread (``real/comm_mpi.py``) aborts the
  job with a message if one blocking call outlasts ``timeout_s``; a rank that exits makes
  ``mpiexec`` end the whole job at once.

``avg`` is ``sum`` followed by a division by the number of ranks on every engine (Gloo and
MPI have no average); integer tensors are divided with truncation toward zero, as in C.
"""

from __future__ import annotations

import os

import torch

OPS = ("sum", "avg", "max", "min")

# Codes for the signature exchanged by the size check; the order never changes meaning.
OPERATIONS = ("broadcast", "reduce", "all_reduce", "scatter", "gather", "all_gather",
              "reduce_scatter", "ring_all_reduce", "naive_all_reduce")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)
ENGINES = ("torch", "mpi")
BACKENDS = ("gloo", "nccl", "mpi")
MAX_TIMEOUT_S = 1e6  # 11 days: longer is a typo; far longer overflows datetime and stalls Gloo


class JobError(ValueError):
    """Bad input that every rank of a job meets alike (its flags, its launcher), so rank 0 alone
    need say it; other ``ValueError``s met while joining may be one node's own (a device it
    lacks)."""


def check_timeout(timeout_s: float, name: str = "timeout_s", given: str | None = None) -> None:
    """``ValueError`` unless ``timeout_s`` is positive and at most ``MAX_TIMEOUT_S``; the message
    names ``name`` and shows ``given`` (what the user typed) or the number of seconds."""
    shown = repr(given) if given is not None else f"{timeout_s:g} s"
    if not timeout_s > 0:
        raise JobError(f"{name} must be positive, got {shown}")
    if timeout_s > MAX_TIMEOUT_S:
        raise JobError(f"{name} must be at most {MAX_TIMEOUT_S:g} s, got {shown}")


class CommError(RuntimeError):
    """A communication failed: a peer died or timed out, or ranks passed mismatched tensors.
    ``timed_out`` is True when it failed because the communicator's timeout ran out."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class Work:
    """Handle of a non-blocking operation. ``wait()`` blocks until it is complete (or raises
    :class:`CommError` after the communicator's timeout); for a receive, ``source`` is then the
    sender's rank."""

    source: int | None = None

    def wait(self) -> None:
        raise NotImplementedError


class DoneWork(Work):
    """A :class:`Work` for an operation that already completed (e.g. on a one-rank communicator)."""

    def __init__(self, source: int | None = None):
        self.source = source

    def wait(self) -> None:
        return None


class Communicator:
    """The operations every engine provides. Subclasses: ``TorchCommunicator`` (``real/comm_torch.py``)
    and ``MpiCommunicator`` (``real/comm_mpi.py``).

    Attributes: ``rank`` and ``world_size`` (of this communicator), ``engine`` (``"torch"`` or
    ``"mpi"``), ``backend`` (``"gloo"``, ``"nccl"`` or ``"mpi"``), ``device`` (where tensors must
    live: ``cuda:<local rank>`` for NCCL, else CPU), ``timeout_s`` (how long any one operation may
    wait for peers) and ``check_sizes`` (exchange signatures before each collective).
    """

    rank: int
    world_size: int
    engine: str
    backend: str
    device: torch.device = torch.device("cpu")
    timeout_s: float
    check_sizes: bool = True

    # -- point to point ------------------------------------------------------------------
    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        """Send ``tensor`` to rank ``dst``; returns once the buffer may be reused."""
        self.isend(tensor, dst, tag).wait()

    def recv(self, tensor: torch.Tensor, src: int | None = None, tag: int = 0) -> int:
        """Receive into ``tensor`` from ``src`` (any rank when ``None``); returns the sender."""
        work = self.irecv(tensor, src, tag)
        work.wait()
        return work.source

    def isend(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> Work:
        raise NotImplementedError

    def irecv(self, tensor: torch.Tensor, src: int | None = None, tag: int = 0) -> Work:
        raise NotImplementedError

    def wait_any(self, works: list[Work], within_s: float | None = None) -> int | None:
        """Block until one of ``works`` (from this communicator's ``isend``/``irecv``) has
        finished, successfully or not; its index (the first to finish, when several have).
        Its ``wait()`` then returns at once, or raises the :class:`CommError` it failed with
        (its peer died): one dead peer fails its own operation only. The others stay pending.
        With ``within_s``, wait that long at most (0: only look) and return ``None`` if none
        has finished by then."""
        raise NotImplementedError

    # -- collectives ---------------------------------------------------------------------
    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank."""
        raise NotImplementedError

    def reduce(self, tensor: torch.Tensor, dst: int, op: str = "sum") -> None:
        """Combine every rank's ``tensor`` with ``op`` into ``tensor`` on rank ``dst`` only."""
        raise NotImplementedError

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum",
                   async_op: bool = False) -> Work | None:
        """Combine every rank's ``tensor`` with ``op``, result in place on every rank."""
        raise NotImplementedError

    def scatter(self, tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None,
                src: int = 0) -> None:
        """Rank ``src`` sends ``scatter_list[i]`` to rank ``i``, which receives it in ``tensor``."""
        raise NotImplementedError

    def gather(self, tensor: torch.Tensor, gather_list: list[torch.Tensor] | None = None,
               dst: int = 0) -> None:
        """Rank ``dst`` receives rank ``i``'s ``tensor`` in ``gather_list[i]``."""
        raise NotImplementedError

    def all_gather(self, tensor_list: list[torch.Tensor], tensor: torch.Tensor) -> None:
        """Every rank receives rank ``i``'s ``tensor`` in ``tensor_list[i]``."""
        raise NotImplementedError

    def reduce_scatter(self, output: torch.Tensor, input_list: list[torch.Tensor],
                       op: str = "sum") -> None:
        """Rank ``i`` receives the ``op``-combination of every rank's ``input_list[i]``."""
        raise NotImplementedError

    def barrier(self) -> None:
        """Return once every rank has entered the barrier."""
        raise NotImplementedError

    def new_group(self, ranks: list[int]) -> Communicator | None:
        """A communicator over ``ranks`` (renumbered in sorted order); ``None`` on other ranks.
        Every rank of this communicator must call it, in the same order as other groups."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the communicator, and first every group made from it that is still open
        (the world one also shuts the engine down). Idempotent."""
        raise NotImplementedError

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, "
                f"backend={self.backend!r}, timeout_s={self.timeout_s})")

    # -- helpers shared by the engines -----------------------------------------------------
    def check_signature(self, operation: str, tensor: torch.Tensor, root: int = -1) -> None:
        """Raise :class:`CommError` on every rank unless all ranks called ``operation`` with the
        same element count, dtype and root. A no-op when ``check_sizes`` is off."""
        if not self.check_sizes or self.world_size == 1:
            return
        mine = signature(operation, tensor, root)
        every = self.exchange_signatures(mine, operation)
        if any(sig != mine for sig in every):
            raise CommError(f"rank {self.rank}: ranks disagree on a collective: "
                            + "; ".join(f"rank {r} called {describe_signature(s)}"
                                        for r, s in enumerate(every)))

    def exchange_signatures(self, mine: list[int], operation: str) -> list[list[int]]:
        """All-gather one short list of integers per rank (used by :meth:`check_signature`)."""
        raise NotImplementedError

    def check_rank(self, rank: int | None, what: str, allow_any: bool = False) -> None:
        if rank is None and allow_any:
            return
        if not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"{what} rank {rank!r} is not in 0..{self.world_size - 1}")

    def check_list(self, tensors, like: torch.Tensor, what: str) -> None:
        """``tensors`` must be ``world_size`` tensors shaped and typed like ``like``."""
        if tensors is None or len(tensors) != self.world_size:
            count = "None" if tensors is None else f"{len(tensors)} tensors"
            raise ValueError(f"{what} needs {self.world_size} tensors (one per rank), got {count}")
        for i, t in enumerate(tensors):
            if t.numel() != like.numel() or t.dtype != like.dtype:
                raise ValueError(f"{what}[{i}] has {t.numel()} x {dtype_name(t.dtype)}, expected "
                                 f"{like.numel()} x {dtype_name(like.dtype)}")


def check_op(op: str) -> str:
    if op not in OPS:
        raise ValueError(f"unknown reduction op {op!r} (choose from {', '.join(OPS)})")
    return op


def divide_for_avg(tensor: torch.Tensor, world_size: int) -> None:
    """Turn a sum into an average in place; integer tensors truncate toward zero, as in C."""
    if world_size == 1:
        return
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        tensor.div_(world_size)
    else:
        tensor.div_(world_size, rounding_mode="trunc")


def combine_into(target: torch.Tensor, other: torch.Tensor, op: str) -> None:
    """``target = target (op) other`` in place, for op in ``sum``/``avg`` (both add), ``max``, ``min``."""
    if op in ("sum", "avg"):
        target.add_(other)
    elif op == "max":
        torch.maximum(target, other, out=target)
    elif op == "min":
        torch.minimum(target, other, out=target)
    else:
        raise ValueError(f"unknown reduction op {op!r}")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def signature(operation: str, tensor: torch.Tensor, root: int = -1) -> list[int]:
    code = DTYPES.index(tensor.dtype) if tensor.dtype in DTYPES else len(DTYPES)
    return [OPERATIONS.index(operation), tensor.numel(), code, root]


def describe_signature(sig: list[int]) -> str:
    operation, numel, code, root = sig
    dtype = dtype_name(DTYPES[code]) if code < len(DTYPES) else "another dtype"
    where = f" (root {root})" if root >= 0 else ""
    return f"{OPERATIONS[operation]} with {numel} x {dtype}{where}"


def launched_by_mpi() -> bool:
    """True under ``mpiexec`` (MPICH/Hydra, Open MPI or PMIx set these) and not under torchrun."""
    markers = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
    return "RANK" not in os.environ and any(m in os.environ for m in markers)


def mpi_launch_size() -> int | None:
    """How many processes mpiexec started (MPICH/Hydra or Open MPI set it), or None."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if name in os.environ:
            try:
                return int(os.environ[name])
            except ValueError:
                return None
    return None


MPI_LAUNCH_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")


def check_mpi_variables() -> None:
    """``JobError`` naming a variable of mpiexec's that holds no whole number."""
    for name in MPI_LAUNCH_VARIABLES:
        text = os.environ.get(name)
        if text is not None and not text.strip().isdigit():
            raise JobError(f"environment variable {name}={text!r} is not a whole number "
                           f"(mpiexec sets it)")


def init(engine: str = "torch", backend: str | None = None, timeout_s: float = 30.0,
         check_sizes: bool = True) -> Communicator:
    """Join the job this process was launched into and return the world communicator.

    ``engine``: ``"torch"`` reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` as
    set by torchrun (single-node or multi-node c10d rendezvous); without them it starts a
    one-rank job. ``"mpi"`` uses ``MPI.COMM_WORLD``. ``"auto"`` picks ``"mpi"`` under mpiexec.
    ``backend``: ``"gloo"`` or ``"nccl"`` for torch (default: NCCL where this node has a GPU for
    each of its processes, else Gloo); ``"mpi"`` selects the MPI engine. ``timeout_s``: the
    longest any operation waits for its peers before raising (torch) or aborting the job (MPI).
    """
    if engine == "auto":
        engine = "mpi" if backend == "mpi" or (backend is None and launched_by_mpi()) else "torch"
    if backend == "mpi":
        engine = "mpi"
    if engine not in ENGINES:
        raise JobError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)}, auto)")
    if backend is not None and backend not in BACKENDS:
        raise JobError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    check_timeout(timeout_s)
    if engine == "mpi":
        check_mpi_variables()  # before MPI_Init, which aborts in many lines on a bad one
        from .comm_mpi import MpiCommunicator
        return MpiCommunicator.create(timeout_s, check_sizes)
    from .comm_torch import TorchCommunicator
    return TorchCommunicator.create(backend, timeout_s, check_sizes)
