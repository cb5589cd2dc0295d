"""A model's parameters and gradients as two flat buffers, so one message carries all of them.

``flatten_parameters(model)`` copies the parameters into one contiguous float32 vector and makes
every parameter (and its ``.grad``) a view into it: receiving a message into the flat weights
updates the model in place, and backward writes the gradient straight into the flat gradient
buffer that is then sent, with no packing or unpacking per step.
"""

from __future__ import annotations

import torch
from torch import nn


def flatten_parameters(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, grads)``: flat float32 vectors that ``model``'s parameters and gradients view.

    Keep gradients in place with ``grads.zero_()`` (not ``model.zero_grad()``, which would
    replace the views with ``None``); backward then accumulates into the views.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if any(p.dtype != torch.float32 for p in params):
        raise ValueError("flat buffers hold float32 parameters only")
    total = sum(p.numel() for p in params)
    weights = torch.empty(total, dtype=torch.float32)
    grads = torch.zeros(total, dtype=torch.float32)
    offset = 0
    for p in params:
        n = p.numel()
        weights[offset:offset + n].copy_(p.detach().reshape(-1))
        p.data = weights[offset:offset + n].view_as(p)
        p.grad = grads[offset:offset + n].view_as(p)
        offset += n
    return weights, grads
