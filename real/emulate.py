"""Emulated compute: sleep instead of forward and backward, but exchange real, full-size gradients.

``--emulate-compute 80ms`` puts a CPU host at an accelerator's ratio of compute to communication.
``EmulatedModel`` wraps the real model and takes its place in the step: its forward sleeps one
third of the step, and its output is a chain through every parameter (in parameter order) whose
backward sleeps the other two thirds, shared between parameters in proportion to their size, and
then hands each parameter a zero gradient of its full size. Backward thus walks the parameters in
reverse order as a real one does, firing the same autograd hooks (so ``bucketed`` and ``ddp``
overlap communication with it), and the weights stay as initialised.

Every sleep runs to a deadline counted from when forward began, not for a length: forward ends
``forward_s`` after it began, and each parameter's gradient is ready when the forward and the
backward shares up to its own have passed. A sleep wakes late (0.1-0.2 ms on a quiet Linux host,
more on a busy one), and the rest takes time too (autograd's start, the zero gradients, the
hooks); lengths would add every one of those to the step, deadlines only the last wake-up's and
what follows it. An emulated 50 ms step of the ``mlp`` took 53.6 ms with lengths and 50.7 ms with
deadlines on one quiet host (the ``compute_time_s``, which holds the gradient hooks too, of
``python real/sync.py --nproc-per-node 1 --model mlp --steps 30 --threads 1
--emulate-compute 50ms --json s.json``); with lengths the test bed's replicas took 51.5-52.9 ms.
"""

from __future__ import annotations

import itertools
import time

import torch
from torch import nn

FORWARD_SHARE = 1 / 3  # backward costs about twice the forward pass


def sleep_until(deadline_s: float) -> None:
    """Sleep until ``time.perf_counter()`` reaches ``deadline_s`` (at once if it has)."""
    time.sleep(max(0.0, deadline_s - time.perf_counter()))


class _SleepInBackward(torch.autograd.Function):
    """Forward: ``chain`` passed on (a copy), with ``param`` as an input so that backward
    reaches it. Backward: a zero gradient of ``param``'s size made, then a sleep until
    ``deadline_s`` (``time.perf_counter``), then both passed on, so the parameter's gradient
    is ready at its deadline and the work of making it is inside its share of the step."""

    @staticmethod
    def forward(ctx, chain, param, deadline_s):
        ctx.param, ctx.deadline_s = param, deadline_s
        return chain.clone()

    @staticmethod
    def backward(ctx, grad):
        zero = torch.zeros_like(ctx.param)
        sleep_until(ctx.deadline_s)
        return grad, zero, None


class EmulatedModel(nn.Module):
    """``model``'s parameters with a sleep of ``step_s`` seconds for forward plus backward.

    ``forward(x)`` ignores ``x`` and returns a scalar "loss" to call ``backward()`` on.
    """

    def __init__(self, model: nn.Module, step_s: float):
        super().__init__()
        self.model = model
        self.forward_s = step_s * FORWARD_SHARE
        params = [p for p in model.parameters() if p.requires_grad]
        total = sum(p.numel() for p in params)
        self.backward_s = [step_s * (1 - FORWARD_SHARE) * p.numel() / total for p in params]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        started_s = time.perf_counter()
        params = [p for p in self.model.parameters() if p.requires_grad]
        chain = torch.zeros((), device=params[0].device)
        # backward runs the chain last link first: a link's gradient is due when the forward
        # and the shares of the links after it in the chain, its own included, have passed
        ends_s = itertools.accumulate(reversed(self.backward_s), initial=self.forward_s)
        deadlines_s = [started_s + end_s for end_s in list(ends_s)[1:]][::-1]
        for p, deadline_s in zip(params, deadlines_s):
            chain = _SleepInBackward.apply(chain, p, deadline_s)
        sleep_until(started_s + self.forward_s)
        return chain


class ComputeFloor:
    """Real forward and backward padded to about ``step_s`` seconds together (``--emulate-compute
    T --real-gradients``): ``pad`` sleeps, between forward and backward, what is left of ``step_s``
    after the forward so far and the previous step's backward (the estimate of this one's, so a
    step is off by the difference between the two; no sleep when the real compute exceeds
    ``step_s``). Sleeping before backward, not after, keeps the gradient exchange (started by
    backward's hooks) after the whole step's compute, as with ``EmulatedModel``."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        self.backward_s = 0.0  # the last step's backward, the estimate of this one's

    def pad(self, started_s: float) -> None:
        """Sleep the rest of the step; ``started_s``: ``perf_counter`` when the forward began."""
        time.sleep(max(0.0, self.step_s - (time.perf_counter() - started_s) - self.backward_s))

    def backward_done(self, backward_s: float) -> None:
        self.backward_s = backward_s
