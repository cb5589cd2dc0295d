"""Emulated compute: sleep instead of forward and backward, but exchange real, full-size gradients.

``--emulate-compute 80ms`` puts a CPU host at an accelerator's ratio of compute to communication.
``EmulatedModel`` wraps the real model and takes its place in the step: its forward sleeps one
third of the step, and its output is a chain through every parameter (in parameter order) whose
backward sleeps the other two thirds, shared between parameters in proportion to their size, and
then hands each parameter a zero gradient of its full size. Backward thus walks the parameters in
reverse order as a real one does, firing the same autograd hooks (so ``bucketed`` and ``ddp``
overlap communication with it), and the weights stay as initialised.
"""

from __future__ import annotations

import time

import torch
from torch import nn

FORWARD_SHARE = 1 / 3  # backward costs about twice the forward pass


class _SleepInBackward(torch.autograd.Function):
    """Identity forward; backward sleeps ``seconds`` before passing the gradient on."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


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
        time.sleep(self.forward_s)
        params = [p for p in self.model.parameters() if p.requires_grad]
        chain = torch.zeros((), device=params[0].device)
        for p, seconds in zip(params, self.backward_s):
            chain = _SleepInBackward.apply(chain + (p * 0).sum(), seconds)
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
