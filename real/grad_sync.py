"""Gradient synchronisation for data-parallel SGD: four ways to average gradients across ranks.

=============  ===========================================================================
``per-param``  after backward, one all-reduce per parameter (the tutorial way)
``flat``       after backward, one all-reduce of all gradients in one flat buffer
``bucketed``   gradients live in buckets (reverse parameter order, ``bucket_bytes`` each, the
               first one 1 MiB as in DDP); a bucket's all-reduce starts from an autograd hook
               the moment its last gradient is accumulated, overlapping the rest of backward
``ddp``        torch's ``DistributedDataParallel`` itself, the baseline
=============  ===========================================================================

Every strategy is used the same way each step::

    sync.zero_grad(); loss = loss_fn(sync.module(x), y); loss.backward(); sync.finish()

after which every parameter's ``.grad`` holds the average over ranks. ``finish`` returns the
communication spans of the step (label, start, end in ``time.perf_counter`` seconds) for traces;
the time ``finish`` blocks is the communication that backward did not hide. The all-reduce itself
is pluggable (``real.allreduce.ALGORITHMS``): ``backend`` runs asynchronously inside the
communication library; the hand-written ones run on one background thread so they, too, overlap.
A buffer that stays from step to step (``flat``, ``bucketed``) is planned once
(``real.allreduce.plan_all_reduce``): the ring's chunks, segments and scratch are laid out then.
Adding a strategy means one subclass and one line in ``STRATEGIES``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

MiB = 2**20
FIRST_BUCKET_BYTES = 1 * MiB  # DDP's first bucket: communication starts early in backward


class GradSync:
    """Base class: holds the model and the all-reduce; subclasses average the gradients."""

    name = ""

    def __init__(self, comm, model: nn.Module, algorithm: str = "backend",
                 bucket_bytes: int = 25 * MiB):
        from .allreduce import ALGORITHMS, plan_all_reduce  # late: the layer is optional
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown all-reduce {algorithm!r} (choose from {', '.join(ALGORITHMS)})")
        self.comm, self.model, self.algorithm = comm, model, algorithm
        self.plan = lambda tensor: plan_all_reduce(algorithm, comm, tensor)  # -> run(op)
        self.bucket_bytes = bucket_bytes
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.module: nn.Module = model

    def zero_grad(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    def forward(self, inputs):
        """The model's output, and any communication that runs inside its forward pass."""
        return self.module(inputs)

    def backward(self, loss) -> None:
        """``loss.backward()``: the gradients, and any communication that runs inside it."""
        loss.backward()

    def finish(self) -> list[tuple[str, float, float]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release background threads and hooks."""

    @staticmethod
    def _reduce_now(label: str, run, op: str = "avg") -> tuple[str, float, float]:
        """``run(op)`` (a planned all-reduce: ``plan``) as a labelled span."""
        start = time.perf_counter()
        run(op)
        return label, start, time.perf_counter()


class PerParamSync(GradSync):
    """One blocking all-reduce per parameter after backward."""

    name = "per-param"

    def finish(self):
        return [self._reduce_now(f"all-reduce param {i}", self.plan(p.grad))
                for i, p in enumerate(self.params)]


def _flat_buffer(params: list[nn.Parameter]) -> torch.Tensor:
    """A zeroed buffer for ``params``' gradients; each ``.grad`` becomes a view into it."""
    first = params[0]
    buffer = torch.zeros(sum(p.numel() for p in params), dtype=first.dtype, device=first.device)
    offset = 0
    for p in params:
        p.grad = buffer[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return buffer


class FlatSync(GradSync):
    """All gradients are views of one buffer; one blocking all-reduce of it after backward."""

    name = "flat"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.buffer = _flat_buffer(self.params)
        self.reduce_buffer = self.plan(self.buffer)  # planned once: the buffer stays

    def zero_grad(self):
        self.buffer.zero_()

    def finish(self):
        return [self._reduce_now("all-reduce flat", self.reduce_buffer)]


def assign_buckets(params: list[nn.Parameter], bucket_bytes: int,
                   first_bucket_bytes: int = FIRST_BUCKET_BYTES) -> list[list[int]]:
    """Parameter indices per bucket: reverse parameter order, a bucket closes once it holds at
    least its cap (``first_bucket_bytes`` for the first, ``bucket_bytes`` after), as in DDP."""
    buckets, current, size = [], [], 0
    for index in reversed(range(len(params))):
        current.append(index)
        size += params[index].numel() * params[index].element_size()
        cap = min(first_bucket_bytes, bucket_bytes) if not buckets else bucket_bytes
        if size >= cap:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


class BucketedSync(GradSync):
    """Buckets all-reduced as soon as backward has produced all their gradients.

    A post-accumulate-grad hook on each parameter counts down its bucket; buckets are launched
    strictly in bucket order (every rank must issue collectives in the same order), so a bucket
    that fills early waits for its predecessors.
    """

    name = "bucketed"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.buckets = assign_buckets(self.params, self.bucket_bytes)
        self.buffers = [_flat_buffer([self.params[i] for i in bucket]) for bucket in self.buckets]
        self.reduce_buffers = [self.plan(buffer) for buffer in self.buffers]  # planned once
        self.bucket_of = {i: b for b, bucket in enumerate(self.buckets) for i in bucket}
        self.executor = None if self.algorithm == "backend" else ThreadPoolExecutor(1)
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i))
                        for i, p in enumerate(self.params)]
        self._reset()

    def _reset(self):
        self.pending = [len(bucket) for bucket in self.buckets]
        self.next_to_launch = 0
        self.in_flight: list[tuple[str, float, object]] = []

    def _hook(self, index: int):
        def on_grad_ready(_param):
            bucket = self.bucket_of[index]
            self.pending[bucket] -= 1
            if self.pending[bucket] == 0:
                self._launch_ready()
        return on_grad_ready

    def _launch_ready(self):
        while self.next_to_launch < len(self.buckets) and self.pending[self.next_to_launch] == 0:
            self._launch(self.next_to_launch)
            self.next_to_launch += 1

    def _launch(self, bucket: int):
        buffer, label, start = self.buffers[bucket], f"all-reduce bucket {bucket}", time.perf_counter()
        # Divide before summing, as DDP does: the pass over the bucket happens while backward is
        # still running instead of after it.
        buffer.div_(self.comm.world_size)
        if self.executor is None:
            work = self.comm.all_reduce(buffer, op="sum", async_op=True)
            self.in_flight.append((label, start, work))
        else:
            self.in_flight.append((label, start, self.executor.submit(
                self._reduce_now, label, self.reduce_buffers[bucket], "sum")))

    def zero_grad(self):
        for buffer in self.buffers:
            buffer.zero_()
        self._reset()

    def finish(self):
        if self.next_to_launch != len(self.buckets):
            raise RuntimeError(f"backward left buckets {self.next_to_launch}..{len(self.buckets) - 1}"
                               " without gradients (a parameter was not used?)")
        spans = []
        for label, start, handle in self.in_flight:
            if self.executor is None:
                handle.wait()
                spans.append((label, start, time.perf_counter()))
            else:
                spans.append(handle.result())
        self._reset()
        return spans

    def close(self):
        for handle in self.handles:
            handle.remove()
        if self.executor is not None:
            self.executor.shutdown()


class DDPSync(GradSync):
    """torch's DistributedDataParallel: its own buckets, hooks and all-reduce (backend only)."""

    name = "ddp"

    def __init__(self, comm, model, algorithm="backend", bucket_bytes=25 * MiB, device_ids=None):
        if getattr(comm, "engine", "torch") != "torch":
            raise ValueError("--sync ddp needs torch.distributed (use --backend gloo or nccl)")
        if algorithm != "backend":
            raise ValueError(f"--sync ddp uses the backend's all-reduce, not {algorithm!r}")
        super().__init__(comm, model, algorithm, bucket_bytes)
        # DDP runs its collectives itself (the weights' broadcast here, the all-reduces inside
        # backward), not through comm: the guard turns a lost peer into the CommError, one
        # line, that every other strategy gives
        self.module = comm.guard("DDP's broadcast of the weights", lambda: (
            nn.parallel.DistributedDataParallel(
                model, device_ids=device_ids, bucket_cap_mb=bucket_bytes / MiB,
                gradient_as_bucket_view=True)))

    def forward(self, inputs):
        return self.comm.guard("DDP's forward (its buffers' broadcast)",
                               lambda: self.module(inputs))

    def backward(self, loss) -> None:
        self.comm.guard("DDP's all-reduce in backward", loss.backward)

    def zero_grad(self):
        self.model.zero_grad(set_to_none=False)

    def finish(self):
        return []  # DDP waits for its all-reduces inside backward


STRATEGIES: dict[str, type[GradSync]] = {
    "per-param": PerParamSync,
    "flat": FlatSync,
    "bucketed": BucketedSync,
    "ddp": DDPSync,
}


def make_grad_sync(name: str, comm, model: nn.Module, algorithm: str = "backend",
                   bucket_bytes: int = 25 * MiB, **kwargs) -> GradSync:
    """The strategy ``name`` over ``comm`` for ``model``; ``ValueError`` if unknown or unusable."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown --sync {name!r} (choose from {', '.join(STRATEGIES)})")
    return STRATEGIES[name](comm, model, algorithm, bucket_bytes, **kwargs)
