"""Training data for the real trainers, and which samples each rank reads at each step.

Two sources, named by ``--dataset``:

``synthetic`` (default)
    ``num_samples`` smooth Gaussian 1×28×28 images (a 7×7 field of independent normals, upsampled
    bilinearly, each pixel scaled to unit variance), labelled by a fixed random "teacher" network
    (the arg-max of a small tanh MLP on the image). Needs no download, is a pure function of the
    seed, and every model in ``real/models.py`` learns it. The images must be smooth: with
    independent pixels the teacher reads white-noise projections of the image, which an MLP
    learns but LeNet's 5×5 convolutions and max-pooling cannot represent (it stays at the label
    entropy, loss 2.27, at any learning rate).
``mnist:DIR``
    MNIST from the IDX files in ``DIR`` (``train-images-idx3-ubyte`` and
    ``train-labels-idx1-ubyte``, optionally ``.gz``). The images are memory-mapped, so a rank
    reads only the samples of its own shard.

Batches: epoch ``e`` visits the samples in a permutation drawn from ``(seed, e)``; step ``s`` of
the run takes the next ``world_size · batch_size`` samples of it (the global batch; a short
remainder at the end of an epoch is dropped) and rank ``r`` takes the ``r``-th slice of
``batch_size``. So N ranks with batch B see exactly the samples one process with batch N·B sees,
and the data position of a run is its step number alone: resuming needs no other state.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from .local_launch import machine_memory_bytes
from .models import INPUT_SHAPE, NUM_CLASSES

MNIST_FILES = {"images": "train-images-idx3-ubyte", "labels": "train-labels-idx1-ubyte"}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
IDX_UBYTE = 0x08
TEACHER_HIDDEN = 32
SYNTHETIC_FIELD_SIDE = 7  # independent normals per image side before upsampling to 28


class DataError(ValueError):
    """The data named by the user cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class DatasetSpec:
    """What ``--dataset`` named: ``kind`` is ``"synthetic"`` or ``"mnist"``; ``path`` for MNIST."""

    kind: str
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> "DatasetSpec":
        if text == "synthetic":
            return cls("synthetic")
        if text.startswith("mnist:") and len(text) > len("mnist:"):
            return cls("mnist", text[len("mnist:"):])
        raise ValueError(f"unknown dataset {text!r} (use 'synthetic' or 'mnist:DIR')")

    def __str__(self) -> str:
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


class Dataset:
    """Samples addressable by index: ``batch(indices)`` returns ``(images, labels)`` tensors.

    ``images`` is float32 of shape ``(len(indices), 1, 28, 28)``, ``labels`` int64 class ids.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, scale: float = 1.0,
                 shift: float = 0.0):
        self.images, self.labels = images, labels
        self.scale, self.shift = scale, shift

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        order = np.sort(indices)  # memory-mapped files read fastest in file order
        restore = np.argsort(np.argsort(indices))
        images = np.asarray(self.images[order], dtype=np.float32)[restore]
        images = (images * self.scale + self.shift).reshape(len(indices), *INPUT_SHAPE)
        labels = np.asarray(self.labels[order], dtype=np.int64)[restore]
        return torch.from_numpy(images), torch.from_numpy(labels)


def check_synthetic_fits(num_samples: int) -> None:
    """``ValueError`` where ``num_samples`` synthetic images would not fit in this machine's
    memory (all of it: a process that tries would be stopped by the kernel or fail to start)."""
    if num_samples * int(np.prod(INPUT_SHAPE)) * 4 > machine_memory_bytes():
        raise ValueError(_does_not_fit(num_samples))


def _does_not_fit(num_samples: int) -> str:
    needed = num_samples * int(np.prod(INPUT_SHAPE)) * 4
    return (f"{num_samples} synthetic samples ({needed / 1e9:.3g} GB) do not fit in this "
            f"machine's memory ({machine_memory_bytes() / 1e9:.3g} GB)")


def synthetic_dataset(num_samples: int, seed: int) -> Dataset:
    """``num_samples`` smooth Gaussian images labelled by a random teacher MLP; a function of
    ``seed``. The teacher does not depend on ``num_samples``: a smaller dataset is a prefix of a
    larger one."""
    features = int(np.prod(INPUT_SHAPE))
    teacher = np.random.default_rng([seed, 0x7EAC4E5, 1])
    w1 = teacher.standard_normal((features, TEACHER_HIDDEN), dtype=np.float32) / np.sqrt(features)
    w2 = teacher.standard_normal((TEACHER_HIDDEN, NUM_CLASSES), dtype=np.float32)
    try:
        images = smooth_gaussian_images(np.random.default_rng([seed, 0x7EAC4E5, 2]), num_samples)
    except MemoryError:  # fits in the machine, not in what its other jobs leave free
        raise ValueError(_does_not_fit(num_samples)) from None
    labels = np.argmax(np.tanh(images @ w1) @ w2, axis=1).astype(np.int64)
    return Dataset(images, labels)


def smooth_gaussian_images(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` flattened images whose pixels are each standard normal and correlated with their
    neighbours: a ``SYNTHETIC_FIELD_SIDE``² field of normals upsampled bilinearly to 28×28."""
    side = INPUT_SHAPE[1]
    up = _bilinear_upsampling(SYNTHETIC_FIELD_SIDE, side)  # (side, field side)
    fields = rng.standard_normal((count, SYNTHETIC_FIELD_SIDE, SYNTHETIC_FIELD_SIDE),
                                 dtype=np.float32)
    images = up @ fields @ up.T
    pixel_std = np.sqrt(np.outer((up ** 2).sum(1), (up ** 2).sum(1)))  # exact, per pixel
    return (images / pixel_std.astype(np.float32)).reshape(count, side * side)


def _bilinear_upsampling(size_in: int, size_out: int) -> np.ndarray:
    """The ``(size_out, size_in)`` matrix of 1-D linear interpolation with pixel centres aligned
    (as ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``)."""
    matrix = np.zeros((size_out, size_in), dtype=np.float32)
    centres = np.clip((np.arange(size_out) + 0.5) * size_in / size_out - 0.5, 0, size_in - 1)
    low = np.floor(centres).astype(int)
    high = np.minimum(low + 1, size_in - 1)
    weight = (centres - low).astype(np.float32)
    np.add.at(matrix, (np.arange(size_out), low), 1 - weight)
    np.add.at(matrix, (np.arange(size_out), high), weight)
    return matrix


MAX_IDX_BYTES = 1 << 30  # a gzipped IDX file unpacking to more is not MNIST (a gzip bomb)


def _gunzip(path: str) -> bytes:
    """The unpacked bytes of ``path``, read a piece at a time: ``DataError`` past
    ``MAX_IDX_BYTES``, before holding more than that."""
    pieces, total = [], 0
    with gzip.open(path, "rb") as handle:
        while piece := handle.read(1 << 22):
            total += len(piece)
            if total > MAX_IDX_BYTES:
                raise DataError(f"{path} unpacks to more than {MAX_IDX_BYTES:,} bytes: not an "
                                f"MNIST file (the largest is 47 MB)")
            pieces.append(piece)
    return b"".join(pieces)


def read_idx(path: str) -> np.ndarray:
    """An IDX file (the MNIST format) as an array of unsigned bytes, memory-mapped when plain.

    Raises ``DataError`` for a missing, truncated or malformed file.
    """
    if not os.path.isfile(path):
        raise DataError(f"MNIST file not found: {path}")
    if path.endswith(".gz"):
        try:
            raw = _gunzip(path)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"corrupt gzip file {path}: {exc}") from None
        data = np.frombuffer(raw, dtype=np.uint8)
    else:
        try:
            data = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) \
                else np.zeros(0, np.uint8)
        except OSError as exc:  # no permission to read it, a file that cannot be mapped
            raise DataError(f"cannot read MNIST file {path}: {exc.strerror or exc}") from None
    return _parse_idx(data, path)


def _parse_idx(data: np.ndarray, path: str) -> np.ndarray:
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != IDX_UBYTE or data[3] == 0:
        raise DataError(f"not an IDX file of unsigned bytes: {path}")
    ndim = int(data[3])
    header_bytes = 4 + 4 * ndim
    if len(data) < header_bytes:
        raise DataError(f"truncated IDX header in {path}")
    dims = tuple(int(d) for d in np.frombuffer(bytes(data[4:header_bytes]), dtype=">u4"))
    expected = header_bytes + math.prod(dims)  # exact: numpy's product could wrap around
    if len(data) != expected:
        raise DataError(f"IDX file {path} holds {len(data)} bytes, its header {dims} "
                        f"says {expected}")
    return data[header_bytes:].reshape(dims)


def _find(directory: str, name: str) -> str:
    for candidate in (name, name + ".gz"):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            return path
    raise DataError(f"MNIST directory {directory} has no {name} (or {name}.gz)")


def mnist_dataset(directory: str) -> Dataset:
    """MNIST training images and labels from the IDX files in ``directory``, checked for sense."""
    if not os.path.isdir(directory):
        raise DataError(f"MNIST directory not found: {directory}")
    images_path = _find(directory, MNIST_FILES["images"])
    images = read_idx(images_path)
    labels = read_idx(_find(directory, MNIST_FILES["labels"]))
    if images.ndim != 3 or images.shape[1:] != INPUT_SHAPE[1:]:
        raise DataError(f"MNIST images in {directory} have shape {images.shape}, "
                        f"expected (n, {INPUT_SHAPE[1]}, {INPUT_SHAPE[2]})")
    if len(images) == 0:
        raise DataError(f"MNIST file {images_path} holds no images")
    if labels.ndim != 1 or len(labels) != len(images):
        raise DataError(f"MNIST in {directory}: {len(images)} images but labels of shape "
                        f"{labels.shape}")
    if int(labels.max()) >= NUM_CLASSES:
        raise DataError(f"MNIST labels in {directory} go up to {int(labels.max())}, "
                        f"expected < {NUM_CLASSES}")
    images = images.reshape(len(images), -1)
    return Dataset(images, labels, scale=1 / (255 * MNIST_STD), shift=-MNIST_MEAN / MNIST_STD)


def load_dataset(spec: DatasetSpec, num_samples: int, seed: int) -> Dataset:
    """The dataset ``spec`` names; ``num_samples`` sizes the synthetic one."""
    if spec.kind == "synthetic":
        return synthetic_dataset(num_samples, seed)
    return mnist_dataset(spec.path)


@dataclass(frozen=True)
class ShardedBatches:
    """Which samples rank ``rank`` of ``world_size`` trains on at each step.

    ``batch_size`` is per rank. Raises ``ValueError`` when the data cannot feed one global batch.
    """

    num_samples: int
    batch_size: int
    world_size: int
    rank: int
    seed: int

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {self.batch_size}")
        if self.world_size > self.num_samples:
            raise ValueError(f"{self.world_size} ranks but only {self.num_samples} samples: "
                             "every rank needs at least one")
        if self.global_batch_size > self.num_samples:
            raise ValueError(f"global batch {self.world_size}×{self.batch_size} = "
                             f"{self.global_batch_size} exceeds the {self.num_samples} samples")

    @property
    def global_batch_size(self) -> int:
        return self.world_size * self.batch_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.global_batch_size

    def indices(self, step: int) -> np.ndarray:
        """Sample indices this rank reads at ``step`` (0-based, counted over the whole run)."""
        epoch, batch_in_epoch = divmod(step, self.steps_per_epoch)
        start = batch_in_epoch * self.global_batch_size + self.rank * self.batch_size
        return _epoch_order(self.num_samples, self.seed, epoch)[start:start + self.batch_size]

    def position(self, step: int) -> dict:
        """The data position before ``step``, as stored in checkpoints."""
        epoch, batch_in_epoch = divmod(step, self.steps_per_epoch)
        return {"epoch": epoch, "batch_in_epoch": batch_in_epoch,
                "global_batch_size": self.global_batch_size}


@lru_cache(maxsize=2)
def _epoch_order(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(num_samples)
