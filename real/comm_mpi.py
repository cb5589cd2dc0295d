"""The MPI engine of :mod:`real.comm`, through mpi4py's buffer (uppercase) methods.

Torch tensors go to MPI as buffers: a CPU tensor's memory is handed over as a NumPy view of
the same bytes, never pickled or converted. Data movement uses ``MPI.BYTE``; reductions use the
MPI datatype of the tensor's dtype. MPI collectives take one contiguous buffer, so a list of
tensors (scatter, gather, all_gather, reduce_scatter) is passed as is when its tensors lie back
to back in one storage (``list(big.chunk(p))``) and staged through one buffer otherwise, as Gloo
does internally.

MPI has no timeouts, so a watchdog thread (one per process) watches every blocking call: if one
outlasts ``timeout_s`` it prints which rank waited for what and calls ``MPI_Abort``, which ends
the whole job with a non-zero status. A rank whose process exits makes ``mpiexec`` end the job
by itself; a rank ending on an error nothing handled aborts the job first (``_abort_after``),
since its ``MPI_Finalize`` would wait for the others. MPI errors (e.g. a message larger than the
receive buffer) become ``CommError``.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np
import torch

from .comm import (CommError, Communicator, JobError, Work, check_op, divide_for_avg,
                   mpi_launch_size)
from .local_launch import env_int

try:
    from mpi4py import MPI
except ImportError as error:  # pragma: no cover - depends on the environment
    raise CommError("the mpi engine needs mpi4py and an MPI library: pip install mpi4py mpich "
                    "(or ./install.sh mpi)") from error

WATCHDOG_POLL_S = 0.1  # how often the watchdog looks at the clock
# After writing its message a rank waits this long before MPI_Abort (``abort_job``): the abort
# makes mpiexec kill every rank and its own output forwarders, and a line still in a
# forwarder's pipe is then lost (seen under Hydra: a job that ended with an empty stderr, and
# one whose traceback ended after its first line).
ABORT_GRACE_S = 0.5

_MPI_TYPES = {torch.float32: MPI.FLOAT, torch.float64: MPI.DOUBLE, torch.int8: MPI.INT8_T,
              torch.int16: MPI.INT16_T, torch.int32: MPI.INT32_T, torch.int64: MPI.INT64_T,
              torch.uint8: MPI.UINT8_T, torch.bool: MPI.C_BOOL,
              torch.complex64: MPI.C_FLOAT_COMPLEX, torch.complex128: MPI.C_DOUBLE_COMPLEX}
_MPI_OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


def mpi_error_text(error) -> str:
    """One line for an MPI error: its class's words and the innermost line of MPICH's error
    stack, where the detail is (the whole stack is several lines)."""
    short = MPI.Get_error_string(error.Get_error_class())
    lines = [line.strip() for line in error.Get_error_string().splitlines() if line.strip()]
    detail = lines[-1].split(":", 1)[-1].strip() if len(lines) > 1 else ""
    return f"{short}: {detail}" if detail and detail != short else short


def abort_job(message: str) -> None:
    """Write ``message`` (one line) to stderr, give mpiexec's forwarders ``ABORT_GRACE_S`` to
    pass it and whatever this rank wrote before it on, then ``MPI_Abort`` the whole job."""
    sys.stderr.write(f"{message}; aborting the MPI job\n")
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    MPI.COMM_WORLD.Abort(1)
    os._exit(1)  # MPICH's Abort can return where a peer has already left: go all the same


def _abort_after(excepthook):
    """``excepthook``, then ``MPI_Abort`` for an error nothing handled. Python prints such an
    error's traceback and exits, but an exiting rank does not end the job while its
    ``MPI_Finalize`` waits for the others, and they would wait for it until their timeout."""
    def hook(kind, error, trace):
        excepthook(kind, error, trace)
        if issubclass(kind, Exception) and MPI.Is_initialized() and not MPI.Is_finalized():
            abort_job(f"rank {MPI.COMM_WORLD.Get_rank()}: {kind.__name__}")
    return hook


class Watchdog:
    """A daemon thread that aborts the MPI job when a watched call outlasts its deadline."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active: dict[int, tuple[float, str]] = {}  # token -> (deadline, message)
        self.tokens = itertools.count()
        threading.Thread(target=self.run, name="mpi-watchdog", daemon=True).start()

    @contextmanager
    def watch(self, message: str, timeout_s: float):
        """Abort with ``message`` unless the ``with`` body finishes within ``timeout_s``."""
        token = next(self.tokens)
        with self.lock:
            self.active[token] = (time.monotonic() + timeout_s, message)
        try:
            yield
        finally:
            with self.lock:
                del self.active[token]

    def run(self) -> None:
        while True:
            time.sleep(WATCHDOG_POLL_S)
            now = time.monotonic()
            with self.lock:
                expired = [msg for deadline, msg in self.active.values() if deadline < now]
            if expired:
                abort_job(expired[0])


_watchdog: Watchdog | None = None


def mpi_op(op: str, tensor: torch.Tensor):
    """The MPI reduction for ``op`` on ``tensor``'s dtype. MPI defines only logical reductions
    on booleans: sum and max are OR, min is AND, as Gloo reduces them."""
    if tensor.dtype == torch.bool:
        return MPI.LAND if op == "min" else MPI.LOR
    return _MPI_OPS[op]


def byte_view(tensor: torch.Tensor) -> np.ndarray:
    """The bytes of a contiguous CPU tensor as a NumPy array sharing its memory (no copy)."""
    if tensor.device.type != "cpu":
        raise ValueError(f"the mpi engine needs CPU tensors, got one on {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError("the mpi engine needs contiguous tensors (call .contiguous() first)")
    return tensor.detach().reshape(-1).view(torch.uint8).numpy()


def typed(tensor: torch.Tensor) -> list:
    """An mpi4py message ``[buffer, count, datatype]`` for reducing ``tensor``."""
    if tensor.dtype not in _MPI_TYPES:
        raise ValueError(f"the mpi engine cannot reduce {tensor.dtype} tensors")
    return [byte_view(tensor), tensor.numel(), _MPI_TYPES[tensor.dtype]]


def back_to_back(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """One uint8 tensor over ``tensors`` if they lie back to back in one storage, else ``None``."""
    first = tensors[0]
    if not all(t.is_contiguous() and t.device.type == "cpu" for t in tensors):
        return None
    step = first.numel() * first.element_size()
    start = first.data_ptr()
    if any(t.data_ptr() != start + i * step or t.untyped_storage().data_ptr() !=
           first.untyped_storage().data_ptr() for i, t in enumerate(tensors)):
        return None
    offset = start - first.untyped_storage().data_ptr()
    return torch.empty(0, dtype=torch.uint8).set_(first.untyped_storage(), offset,
                                                  (step * len(tensors),))


UNFINISHED: list = []  # sends (and unwaited collectives) still pending at close (see settle)


class MpiWork(Work):
    """A pending MPI request; ``wait()`` runs under the watchdog and checks received sizes."""

    def __init__(self, comm: MpiCommunicator, request, what: str, expect_bytes: int | None = None,
                 then=None):
        self.comm, self.request, self.what = comm, request, what
        self.expect_bytes, self.then = expect_bytes, then
        self.source = None
        self.done = False
        self.error: CommError | None = None
        comm.pending.add(self)

    def wait(self) -> None:
        if self.error is not None:
            raise self.error
        if self.done:
            return
        status = MPI.Status()
        try:
            self.comm.call(self.what, lambda: self.request.Wait(status))
        except CommError as error:  # the request is spent: settle() must not touch it again
            self.error = error
            self.comm.pending.discard(self)
            raise
        self.finish(status)

    def finish(self, status) -> None:
        """The request has completed with ``status``: check the size, run ``then``."""
        self.done = True
        self.comm.pending.discard(self)
        if self.expect_bytes is not None:
            self.source = status.Get_source()
            got = status.Get_count(MPI.BYTE)
            if got != self.expect_bytes:
                self.comm.broken = True
                self.error = CommError(f"rank {self.comm.rank}: {self.what}: expected "
                                       f"{self.expect_bytes} bytes, rank {self.source} sent {got} "
                                       f"(sizes differ)")
                raise self.error
        if self.then is not None:
            self.then()


class MpiCommunicator(Communicator):
    """A :class:`~real.comm.Communicator` over an MPI communicator (``MPI.COMM_WORLD`` or a split)."""

    engine = "mpi"
    backend = "mpi"

    def __init__(self, mpi_comm, timeout_s: float, check_sizes: bool, is_world: bool):
        self.mpi, self.timeout_s, self.check_sizes = mpi_comm, timeout_s, check_sizes
        self.is_world = is_world
        self.mpi.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank, self.world_size = self.mpi.Get_rank(), self.mpi.Get_size()
        self.world_rank = MPI.COMM_WORLD.Get_rank()
        self.tag_ub = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB)
        self.device = torch.device("cpu")
        self.broken = self.closed = False
        self.groups: list[MpiCommunicator] = []  # made by new_group; closed before this one
        self.pending: set[MpiWork] = set()  # requests not yet completed (see close)

    @classmethod
    def create(cls, timeout_s: float, check_sizes: bool) -> MpiCommunicator:
        global _watchdog
        world_size = env_int("WORLD_SIZE", 1) if "RANK" in os.environ else 1
        if MPI.COMM_WORLD.Get_size() == 1 and world_size > 1:
            raise JobError(f"torchrun started this process as one of {world_size} ranks, but "
                           f"backend mpi joins the job mpiexec started, and there is none: "
                           f"launch with mpiexec, or use --backend gloo under torchrun")
        launched = mpi_launch_size()
        if launched is not None and launched != MPI.COMM_WORLD.Get_size():
            # every such process is alone: each says it (a JobError only rank 0 would say)
            raise ValueError(f"mpiexec's variables say {launched} processes (PMI_SIZE or "
                           f"OMPI_COMM_WORLD_SIZE), but MPI started "
                           f"{MPI.COMM_WORLD.Get_size()}: launch with mpiexec, not by setting them")
        if _watchdog is None:
            _watchdog = Watchdog()
            sys.excepthook = _abort_after(sys.excepthook)
        return cls(MPI.COMM_WORLD.Dup(), timeout_s, check_sizes, is_world=True)

    # -- plumbing ------------------------------------------------------------------------
    def call(self, what: str, action):
        """Run a blocking MPI call under the watchdog; MPI errors become :class:`CommError`."""
        message = (f"rank {self.world_rank}: {what} did not complete within {self.timeout_s:g} s "
                   f"(a peer died, hangs, or called another operation)")
        try:
            with _watchdog.watch(message, self.timeout_s):
                return action()
        except MPI.Exception as error:
            self.broken = True
            raise CommError(f"rank {self.rank}: {what} failed: {mpi_error_text(error)}") \
                from error

    def check_tag(self, tag: int) -> None:
        if not isinstance(tag, int) or not 0 <= tag <= self.tag_ub:
            raise ValueError(f"tag {tag!r} is not in 0..{self.tag_ub}")

    def exchange_signatures(self, mine: list[int], operation: str) -> list[list[int]]:
        every = np.empty((self.world_size, len(mine)), dtype=np.int64)
        self.call(f"size check before {operation}",
                  lambda: self.mpi.Allgather(np.asarray(mine, np.int64), every))
        return every.tolist()

    # -- point to point ------------------------------------------------------------------
    def isend(self, tensor, dst, tag=0):
        self.check_rank(dst, "send: destination")
        self.check_tag(tag)
        what = f"send of {tensor.numel()} elements to rank {dst}"
        buf = byte_view(tensor)
        return MpiWork(self, self.call(what, lambda: self.mpi.Isend(buf, dst, tag)), what)

    def irecv(self, tensor, src=None, tag=0):
        self.check_rank(src, "recv: source", allow_any=True)
        self.check_tag(tag)
        what = f"recv of {tensor.numel()} elements from {'any rank' if src is None else f'rank {src}'}"
        buf = byte_view(tensor)
        source = MPI.ANY_SOURCE if src is None else src
        request = self.call(what, lambda: self.mpi.Irecv(buf, source, tag))
        return MpiWork(self, request, what, expect_bytes=buf.nbytes)

    def wait_any(self, works, within_s=None):
        if not works:
            raise ValueError("wait_any needs at least one operation")
        for index, work in enumerate(works):
            if not isinstance(work, MpiWork):
                raise ValueError(f"wait_any takes this communicator's operations, not {work!r}")
            if work.done or work.error is not None:
                return index
        status = MPI.Status()
        requests = [w.request for w in works]
        if within_s is None:
            index = self.call(f"wait for the first of {len(works)} operations",
                              lambda: MPI.Request.Waitany(requests, status))
        else:
            index = self.first_within(requests, status, within_s)
            if index is None:
                return None
        try:
            works[index].finish(status)
        except CommError:
            pass  # a size mismatch, kept in the work: its wait() raises it
        return index

    def first_within(self, requests, status, within_s: float) -> int | None:
        """The index of the first of ``requests`` to complete within ``within_s`` (tested
        every 50 µs), or None."""
        deadline = time.monotonic() + within_s
        while True:
            index, done = self.call("test for a finished operation",
                                    lambda: MPI.Request.Testany(requests, status))
            if done and index != MPI.UNDEFINED:
                return index
            if time.monotonic() >= deadline:
                return None
            time.sleep(50e-6)

    # -- collectives ---------------------------------------------------------------------
    def broadcast(self, tensor, src):
        self.check_rank(src, "broadcast: source")
        self.check_signature("broadcast", tensor, src)
        self.call("broadcast", lambda: self.mpi.Bcast(byte_view(tensor), src))

    def reduce(self, tensor, dst, op="sum"):
        check_op(op)
        self.check_rank(dst, "reduce: destination")
        self.check_signature("reduce", tensor, dst)
        if self.rank == dst:
            self.call(f"reduce({op})", lambda: self.mpi.Reduce(MPI.IN_PLACE, typed(tensor),
                                                               mpi_op(op, tensor), dst))
            if op == "avg":
                divide_for_avg(tensor, self.world_size)
        else:
            self.call(f"reduce({op})", lambda: self.mpi.Reduce(typed(tensor), None,
                                                               mpi_op(op, tensor), dst))

    def all_reduce(self, tensor, op="sum", async_op=False):
        check_op(op)
        self.check_signature("all_reduce", tensor)
        then = (lambda: divide_for_avg(tensor, self.world_size)) if op == "avg" else None
        what = f"all_reduce({op})"
        if not async_op:
            self.call(what, lambda: self.mpi.Allreduce(MPI.IN_PLACE, typed(tensor),
                                                       mpi_op(op, tensor)))
            if then is not None:
                then()
            return None
        request = self.call(what, lambda: self.mpi.Iallreduce(MPI.IN_PLACE, typed(tensor),
                                                              mpi_op(op, tensor)))
        return MpiWork(self, request, what, then=then)

    def scatter(self, tensor, scatter_list=None, src=0):
        self.check_rank(src, "scatter: source")
        send = None
        if self.rank == src:
            self.check_list(scatter_list, tensor, "scatter_list")
            send = self.stage(scatter_list, copy_in=True).numpy()
        self.check_signature("scatter", tensor, src)
        self.call("scatter", lambda: self.mpi.Scatter(send, byte_view(tensor), src))

    def gather(self, tensor, gather_list=None, dst=0):
        self.check_rank(dst, "gather: destination")
        slots = None
        if self.rank == dst:
            self.check_list(gather_list, tensor, "gather_list")
            slots = self.stage(gather_list, copy_in=False)
        self.check_signature("gather", tensor, dst)
        self.call("gather", lambda: self.mpi.Gather(
            byte_view(tensor), None if slots is None else slots.numpy(), dst))
        if slots is not None:
            self.unstage(slots, gather_list)

    def all_gather(self, tensor_list, tensor):
        self.check_list(tensor_list, tensor, "all_gather tensor_list")
        self.check_signature("all_gather", tensor)
        slots = self.stage(tensor_list, copy_in=False)
        self.call("all_gather", lambda: self.mpi.Allgather(byte_view(tensor), slots.numpy()))
        self.unstage(slots, tensor_list)

    def reduce_scatter(self, output, input_list, op="sum"):
        check_op(op)
        self.check_list(input_list, output, "reduce_scatter input_list")
        self.check_signature("reduce_scatter", output)
        recv = typed(output)  # rejects dtypes MPI cannot reduce, before any communication
        send = [self.stage(input_list, copy_in=True).numpy(), recv[2]]
        self.call(f"reduce_scatter({op})", lambda: self.mpi.Reduce_scatter_block(
            send, recv, mpi_op(op, output)))
        if op == "avg":
            divide_for_avg(output, self.world_size)

    def barrier(self):
        self.call("barrier", self.mpi.Barrier)

    @staticmethod
    def stage(tensors: list[torch.Tensor], copy_in: bool) -> torch.Tensor:
        """One uint8 buffer holding ``tensors`` back to back: theirs if they already are."""
        joined = back_to_back(tensors)
        if joined is not None:
            return joined
        step = tensors[0].numel() * tensors[0].element_size()
        joined = torch.empty(step * len(tensors), dtype=torch.uint8)
        if copy_in:
            for i, t in enumerate(tensors):
                joined[i * step:(i + 1) * step].copy_(t.detach().contiguous().reshape(-1)
                                                      .view(torch.uint8))
        return joined

    @staticmethod
    def unstage(joined: torch.Tensor, tensors: list[torch.Tensor]) -> None:
        if back_to_back(tensors) is not None:
            return  # received in place
        step = joined.numel() // len(tensors)
        for i, t in enumerate(tensors):
            t.copy_(joined[i * step:(i + 1) * step].view(t.dtype).view(t.shape))

    # -- groups and teardown -------------------------------------------------------------
    def new_group(self, ranks):
        members = sorted(set(ranks))
        if len(members) != len(ranks) or not members:
            raise ValueError(f"new_group: ranks {ranks!r} must be distinct and not empty")
        for r in members:
            self.check_rank(r, "new_group:")
        inside = self.rank in members
        color = 0 if inside else MPI.UNDEFINED
        key = members.index(self.rank) if inside else 0
        sub = self.call("new_group", lambda: self.mpi.Split(color, key))
        if not inside:
            return None
        child = MpiCommunicator(sub, self.timeout_s, self.check_sizes, is_world=False)
        self.groups.append(child)
        return child

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.broken:
            # Peers may still wait on this rank; ending the job beats leaving them to time out.
            abort_job(f"rank {self.world_rank}: communication failed")
        for group in self.groups:
            group.close()
        self.settle()
        self.mpi.Free()

    def settle(self) -> None:
        """Cancel the receives still posted; keep the sends still leaving alive to the end.

        A request left behind keeps MPI pointed at its buffer. A receive would write a late
        message (a worker's push the server no longer wants) into memory Python has freed by
        then, so it is cancelled and completed here. A send may wait for a peer that is done
        (its receive cancelled): it is not waited for, but its buffer is kept until the process
        ends (``UNFINISHED``), so MPI never reads freed memory either."""
        for work in list(self.pending):
            if work.expect_bytes is None:
                UNFINISHED.append(work)
                continue
            if work.request == MPI.REQUEST_NULL:  # completed and freed by a failed wait
                continue
            self.call(f"cancel the {work.what}", work.request.Cancel)
            status = MPI.Status()
            self.call(work.what, lambda: work.request.Wait(status))
            work.done = True
        self.pending.clear()
