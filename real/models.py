"""The models the real trainers train, by name: ``lenet`` (default), ``mlp`` and ``mlp-large``.

All take 1×28×28 images (MNIST-shaped) and return logits for 10 classes. ``mlp-large`` is sized so
that its fp32 gradients are about 25 MB (6.25 M parameters): one DDP-sized bucket, enough traffic
that communication, not compute, dominates a CPU run. Adding a model means one function and one
line in ``MODELS``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
# 784·h + h² + 10·h + biases ≈ 6.25 M parameters = 25.0 MB of fp32 gradients.
MLP_LARGE_HIDDEN = 2134


class LeNet(nn.Module):
    """LeNet-5 style CNN: two 5×5 conv + max-pool stages, then three fully connected layers."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class MLP(nn.Module):
    """Fully connected ReLU network on the flattened image: 784 → hidden… → classes."""

    def __init__(self, hidden: tuple[int, ...], num_classes: int = NUM_CLASSES):
        super().__init__()
        widths = [INPUT_SHAPE[0] * INPUT_SHAPE[1] * INPUT_SHAPE[2], *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for width_in, width_out in zip(widths, widths[1:]):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "lenet": LeNet,
    "mlp": lambda: MLP((256, 128)),
    "mlp-large": lambda: MLP((MLP_LARGE_HIDDEN, MLP_LARGE_HIDDEN)),
}


def build_model(name: str, seed: int) -> nn.Module:
    """A freshly initialised model ``name``, its weights drawn from ``seed`` alone.

    Raises ``ValueError`` naming the model when ``name`` is not in ``MODELS``.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (choose from {', '.join(MODELS)})")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[name]()


def grad_bytes(model: nn.Module) -> int:
    """Bytes of gradient one replica exchanges per step (all trainable parameters)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
