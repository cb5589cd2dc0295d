"""The torch.distributed engine of :mod:`real.comm`: Gloo on CPU, NCCL on GPUs.

Every operation is issued asynchronously and waited on with the communicator's timeout, so a
stuck peer raises :class:`~real.comm.CommError` after ``timeout_s`` and a peer whose process died
raises at once (Gloo sees the TCP connection close). Ranks passed in and returned are this
communicator's; a group translates them to the world ranks torch.distributed wants.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import itertools
import os
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

from .comm import (CommError, Communicator, DoneWork, JobError, Work, check_op, divide_for_avg,
                   launched_by_mpi, mpi_launch_size)
from .local_launch import check_master_port, placement_from_env

_TORCH_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM,
              "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def contiguous_output(tensor: torch.Tensor):
    """``tensor`` and None where it is contiguous; else a contiguous buffer of its shape and
    what copies that buffer into it once the operation is done. Gloo's scatter and
    reduce_scatter write a tensor's memory in order whatever its strides: a column of a matrix
    came back holding its neighbours' elements, with no error (the mpi engine refuses such a
    tensor)."""
    if tensor.is_contiguous():
        return tensor, None
    buffer = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return buffer, lambda: tensor.copy_(buffer)


class TorchWork(Work):
    """A torch ``Work`` waited on with a timeout; ``then`` runs after completion (avg's division).

    Gloo completes a point-to-point operation only inside ``wait()`` (it has no futures and no
    wait-any), so :meth:`TorchCommunicator.wait_any` hands each work to a *watcher* thread that
    waits for it; ``finished`` is then set, in order of completion, and ``wait()`` joins the
    watcher and reports its outcome.
    """

    def __init__(self, comm: TorchCommunicator, work, what: str, then=None, any_source=False):
        self.comm, self.work, self.what, self.then = comm, work, what, then
        self.any_source = any_source
        self.source = None
        self.done = False
        self.error: CommError | None = None
        self.watcher: threading.Thread | None = None
        self.finished: int | None = None  # completion order, set by the watcher

    def wait(self) -> None:
        if self.watcher is not None:
            self.watcher.join()
        if self.error is not None:
            raise self.error
        if self.done:
            return
        self.comm.guard(self.what, lambda: self.work.wait(self.comm.timeout))
        self.done = True
        if self.any_source:
            self.source = self.work._source_rank()  # the process group's own (group) rank
        if self.then is not None:
            self.then()

    def watch(self) -> None:
        """Start a watcher thread for this work, unless it has one or is done."""
        if self.watcher is None and not self.done and self.error is None:
            self.watcher = threading.Thread(target=self._watch, daemon=True,
                                            name=f"watch {self.what}")
            self.watcher.start()
            watchers = self.comm.watchers  # the live ones, for close(): as many as works pending
            watchers[:] = [t for t in watchers if t.is_alive()] + [self.watcher]

    def _watch(self) -> None:
        error = None
        try:
            self.comm.guard(self.what, lambda: self.work.wait(self.comm.timeout))
            if self.any_source:
                self.source = self.work._source_rank()
            if self.then is not None:
                self.then()
        except CommError as failure:
            error = failure
        with self.comm.completions:  # the outcome and its order appear together
            self.done, self.error = error is None, error
            self.finished = next(self.comm.completion_order)
            self.comm.completions.notify_all()

    def has_finished(self) -> bool:
        return self.done or self.error is not None


@contextlib.contextmanager
def stderr_kept_unless_failed():
    """Hold what this process writes to its stderr (file descriptor 2, so torch's C++ log too)
    inside the block: written out after it when it succeeds, dropped when it raises. A join that
    fails has torch log the error with dozens of C++ stack frames before it raises; the caller
    says it in one line. With ``TORCH_CPP_LOG_LEVEL`` set, nothing is held (the user asked for
    torch's log)."""
    if "TORCH_CPP_LOG_LEVEL" in os.environ:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        text = memoryview(held.read())
        while text:
            text = text[os.write(2, text):]


JOIN_GRACE_S = 5.0  # beyond twice --timeout, before a join that never returns is given up


@contextlib.contextmanager
def join_deadline(timeout_s: float, rank: int, backend: str):
    """Inside the block this process joins the job; if it has not come back 2 ``timeout_s`` +
    ``JOIN_GRACE_S`` later (torch's own timeout applies to each of its steps), say so in one
    line and end the process (status 1). torch's store client waits for ever on a server that
    takes the connection and never answers, whatever the timeout it was given; the main thread
    is then inside C++ and only another thread can act."""
    stderr = os.dup(2)  # before stderr_kept_unless_failed holds file descriptor 2
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    prog = os.path.basename(sys.argv[0]) or "python"
    deadline_s = 2 * timeout_s + JOIN_GRACE_S

    def give_up():
        line = (f"{prog}: error: rank {rank}: could not join the torch.distributed job "
                f"({backend}): no answer from the store at {where} in {deadline_s:g} s\n")
        os.write(stderr, line.encode())
        os._exit(1)

    timer = threading.Timer(deadline_s, give_up)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        os.close(stderr)


def gpus_here() -> int:
    """The CUDA GPUs torch can use on this node (0 where it has none or no CUDA build)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class TorchCommunicator(Communicator):
    """A :class:`~real.comm.Communicator` over a torch.distributed process group."""

    engine = "torch"

    def __init__(self, group, backend: str, timeout_s: float, check_sizes: bool,
                 is_world: bool):
        self.group, self.backend, self.timeout_s = group, backend, timeout_s
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.check_sizes, self.is_world = check_sizes, is_world
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = torch.device("cpu")
        if backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.closed = False
        self.completions = threading.Condition()  # notified by TorchWork watchers
        self.completion_order = itertools.count()
        self.watchers: list[threading.Thread] = []
        self.groups: list[TorchCommunicator] = []  # made by new_group; closed before this one

    @classmethod
    def create(cls, backend: str | None, timeout_s: float, check_sizes: bool) -> TorchCommunicator:
        placement, gpus = placement_from_env(), gpus_here()
        if backend is None:  # NCCL where every process of this node can have a GPU of its own
            backend = "nccl" if gpus >= placement.local_world_size else "gloo"
        if backend not in ("gloo", "nccl"):
            raise JobError(f"the torch engine has backends gloo and nccl, not {backend!r}")
        launched = mpi_launch_size() if launched_by_mpi() else None  # mpiexec, not torchrun
        if launched and launched > 1:
            raise JobError(f"mpiexec started {launched} processes, but backend {backend} joins "
                           f"a torch.distributed job, which needs torchrun (RANK, WORLD_SIZE, "
                           f"MASTER_ADDR, MASTER_PORT): under mpiexec use --backend mpi")
        timeout = datetime.timedelta(seconds=timeout_s)
        if backend == "nccl":
            if not gpus:
                raise ValueError("backend nccl needs a CUDA GPU, and torch sees none here")
            if placement.local_world_size > gpus:
                raise ValueError(f"backend nccl needs a GPU for each process: this node runs "
                                 f"{placement.local_world_size} (LOCAL_WORLD_SIZE) and torch sees "
                                 f"{gpus}; use --backend gloo, or fewer processes per node")
            torch.cuda.set_device(placement.local_rank)
        if "RANK" in os.environ:  # torchrun's rendezvous: MASTER_ADDR and MASTER_PORT
            check_master_port()
        try:
            with join_deadline(timeout_s, placement.rank, backend), stderr_kept_unless_failed():
                if "RANK" in os.environ:
                    dist.init_process_group(backend, timeout=timeout)
                else:  # not launched by torchrun: a job of one rank
                    dist.init_process_group(backend, store=dist.HashStore(), rank=0,
                                            world_size=1, timeout=timeout)
        except (RuntimeError, ValueError) as error:
            raise CommError(f"could not join the torch.distributed job ({backend}, timeout "
                            f"{timeout_s:g} s): {error}") from error
        return cls(None, backend, timeout_s, check_sizes, is_world=True)

    # -- plumbing ------------------------------------------------------------------------
    def guard(self, what: str, action):
        """Run ``action``; turn the library's error into a :class:`CommError` naming ``what``."""
        start = time.monotonic()
        try:
            return action()
        except CommError:
            raise
        except (RuntimeError, dist.DistError) as error:
            waited_s = time.monotonic() - start
            raise CommError(f"rank {self.rank}: {what} failed after {waited_s:.1f} s (a peer "
                            f"died, hung past the {self.timeout_s:g} s timeout, or called another "
                            f"operation): {error}",
                            timed_out=waited_s >= 0.99 * self.timeout_s) from error

    def world(self, rank: int) -> int:
        """This communicator's ``rank`` as a rank of the default (world) group."""
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def run(self, what: str, start, then=None, async_op: bool = False) -> Work | None:
        """Start an asynchronous torch op with ``start()``; wait for it unless ``async_op``."""
        work = self.guard(what, start)
        handle = TorchWork(self, work, what, then) if work is not None else DoneWork()
        if async_op:
            return handle
        handle.wait()
        return None

    def exchange_signatures(self, mine: list[int], operation: str) -> list[list[int]]:
        sig = torch.tensor(mine, dtype=torch.int64, device=self.device)
        every = [torch.empty_like(sig) for _ in range(self.world_size)]
        self.run(f"size check before {operation}",
                 lambda: dist.all_gather(every, sig, group=self.group, async_op=True))
        return [t.tolist() for t in every]

    # -- point to point ------------------------------------------------------------------
    def isend(self, tensor, dst, tag=0):
        self.check_rank(dst, "send: destination")
        what = f"send of {tensor.numel()} elements to rank {dst}"
        work = self.guard(what, lambda: dist.isend(
            tensor, self.world(dst), group=self.group, tag=tag))
        return TorchWork(self, work, what)

    def irecv(self, tensor, src=None, tag=0):
        self.check_rank(src, "recv: source", allow_any=True)
        what = f"recv of {tensor.numel()} elements from {'any rank' if src is None else f'rank {src}'}"
        global_src = None if src is None else self.world(src)
        work = self.guard(what, lambda: dist.irecv(
            tensor, global_src, group=self.group, tag=tag))
        handle = TorchWork(self, work, what, any_source=src is None)
        if src is not None:
            handle.source = src
        return handle

    def wait_any(self, works, within_s=None):
        if not works:
            raise ValueError("wait_any needs at least one operation")
        for work in works:
            if not isinstance(work, TorchWork):
                raise ValueError(f"wait_any takes this communicator's operations, not {work!r}")
        with self.completions:
            for work in works:
                work.watch()
            # every watcher gives up after the timeout itself; the margin only guards a bug
            limit_s = 2 * self.timeout_s + 10 if within_s is None else within_s
            if not self.completions.wait_for(lambda: any(w.has_finished() for w in works),
                                             timeout=limit_s):
                if within_s is not None:
                    return None
                raise CommError(f"rank {self.rank}: none of {len(works)} operations finished "
                                f"within {self.timeout_s:g} s")
            finished = [i for i, w in enumerate(works) if w.has_finished()]
            # a work waited on directly before (no completion order) counts as the first
            return min(finished, key=lambda i: -1 if works[i].finished is None
                       else works[i].finished)

    # -- collectives ---------------------------------------------------------------------
    def broadcast(self, tensor, src):
        self.check_rank(src, "broadcast: source")
        self.check_signature("broadcast", tensor, src)
        self.run("broadcast", lambda: dist.broadcast(
            tensor, self.world(src), group=self.group, async_op=True))

    def reduce(self, tensor, dst, op="sum"):
        check_op(op)
        self.check_rank(dst, "reduce: destination")
        self.check_signature("reduce", tensor, dst)
        then = (lambda: divide_for_avg(tensor, self.world_size)) if op == "avg" and \
            self.rank == dst else None
        self.run(f"reduce({op})", lambda: dist.reduce(
            tensor, self.world(dst), op=_TORCH_OPS[op], group=self.group, async_op=True), then)

    def all_reduce(self, tensor, op="sum", async_op=False):
        check_op(op)
        self.check_signature("all_reduce", tensor)
        then = (lambda: divide_for_avg(tensor, self.world_size)) if op == "avg" else None
        return self.run(f"all_reduce({op})", lambda: dist.all_reduce(
            tensor, op=_TORCH_OPS[op], group=self.group, async_op=True), then, async_op)

    def scatter(self, tensor, scatter_list=None, src=0):
        self.check_rank(src, "scatter: source")
        if self.rank == src:
            self.check_list(scatter_list, tensor, "scatter_list")
        self.check_signature("scatter", tensor, src)
        chunks = [t.contiguous() for t in scatter_list] if self.rank == src else None
        out, copy_back = contiguous_output(tensor)
        self.run("scatter", lambda: dist.scatter(
            out, chunks, self.world(src), group=self.group, async_op=True), copy_back)

    def gather(self, tensor, gather_list=None, dst=0):
        self.check_rank(dst, "gather: destination")
        if self.rank == dst:
            self.check_list(gather_list, tensor, "gather_list")
        self.check_signature("gather", tensor, dst)
        slots = gather_list if self.rank == dst else None
        self.run("gather", lambda: dist.gather(
            tensor, slots, self.world(dst), group=self.group, async_op=True))

    def all_gather(self, tensor_list, tensor):
        self.check_list(tensor_list, tensor, "all_gather tensor_list")
        self.check_signature("all_gather", tensor)
        self.run("all_gather", lambda: dist.all_gather(
            tensor_list, tensor, group=self.group, async_op=True))

    def reduce_scatter(self, output, input_list, op="sum"):
        check_op(op)
        self.check_list(input_list, output, "reduce_scatter input_list")
        self.check_signature("reduce_scatter", output)
        out, copy_back = contiguous_output(output)

        def then():
            if op == "avg":
                divide_for_avg(out, self.world_size)
            if copy_back is not None:
                copy_back()
        inputs = [t.contiguous() for t in input_list]
        self.run(f"reduce_scatter({op})", lambda: dist.reduce_scatter(
            out, inputs, op=_TORCH_OPS[op], group=self.group, async_op=True), then)

    def barrier(self):
        self.run("barrier", lambda: dist.barrier(self.group, async_op=True))

    # -- groups and teardown -------------------------------------------------------------
    def new_group(self, ranks):
        members = sorted(set(ranks))
        if len(members) != len(ranks) or not members:
            raise ValueError(f"new_group: ranks {ranks!r} must be distinct and not empty")
        for r in members:
            self.check_rank(r, "new_group:")
        world_members = [self.world(r) for r in members]
        group = self.guard("new_group", lambda: dist.new_group(
            world_members, timeout=self.timeout, use_local_synchronization=not self.is_world))
        if self.rank not in members:
            return None
        child = TorchCommunicator(group, self.backend, self.timeout_s, self.check_sizes, False)
        self.groups.append(child)
        return child

    def close(self):
        if self.closed:
            return
        self.closed = True
        # a group left open when the world goes down: one rank's Gloo aborted at exit
        # (std::terminate) in 2 of 12 two-rank runs whose rank 0 had not closed its group
        for group in self.groups:
            group.close()
        # A watcher still inside Gloo's wait when the interpreter exits is killed in C++ code
        # (std::terminate, the process aborts): let each finish first. Its wait ends when its
        # peer sends or exits, or after the timeout at the latest.
        deadline = time.monotonic() + self.timeout_s
        for watcher in self.watchers:
            watcher.join(max(0.0, deadline - time.monotonic()))
        if dist.is_initialized():
            if self.is_world:
                dist.destroy_process_group()
            elif self.group is not None:
                dist.destroy_process_group(self.group)
        # Gloo's work objects left in reference cycles would otherwise be freed only in the
        # interpreter's teardown, which then aborted a rank now and then (std::terminate,
        # "terminate called without an active exception": 4 in 10 two-rank runs of the sync
        # trainer's backend modes, none with this collection)
        gc.collect()
