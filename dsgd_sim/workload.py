"""What one replica does per step: its gradient (per layer) and its compute time.

A ``Workload`` comes from a preset (``presets.py``), from a profile file measured by the real
trainer (``python real/sync.py --profile-out FILE``), and can be adjusted by ``--grad-bytes`` /
``--params`` (gradient size, layer proportions kept) and ``--compute`` (time distribution).

Profile format (JSON; more keys allowed)::

    {"format": "dsgd-profile/1", "model": "lenet", "batch_size": 32,
     "layers": [{"name": "conv1.weight", "grad_bytes": 600, "backward_s": 0.0004}, ...],
     "compute_s": [0.0121, 0.0118, ...]}

``layers`` are in forward (parameter) order; ``compute_s`` are measured forward + backward times
of whole steps. ``layers`` may be omitted when ``grad_bytes`` is given; ``compute_s`` is required.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .argparse_oneline import MAX_INPUT_BYTES, read_json
from .compute import MAX_TIME_S, MIN_MEAN_S, ComputeModel, Constant, Empirical
from .presets import BYTES_PER_PARAM, DEFAULT_PRESET, PRESETS

MAX_BATCH = 10**9  # samples per replica per step: beyond, no machine
MAX_GRAD_BYTES = 10**15  # 1 PB of gradients


@dataclass(frozen=True)
class Layer:
    """One gradient tensor (or group): its size and its share of a step's compute spent in backward."""

    name: str
    grad_bytes: int
    backward_share: float


@dataclass(frozen=True)
class Workload:
    """A replica's step: layers in forward order, a compute distribution, samples per step."""

    name: str
    layers: tuple[Layer, ...]
    compute: ComputeModel
    batch_size: int
    source: str = ""

    def __post_init__(self):
        if not self.layers:
            raise ValueError(f"workload {self.name!r} has no layers")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if self.backward_share > 1.0 + 1e-9:
            raise ValueError(f"workload {self.name!r}: layer backward times exceed the step time")

    @property
    def grad_bytes(self) -> int:
        return sum(layer.grad_bytes for layer in self.layers)

    @property
    def backward_share(self) -> float:
        return sum(layer.backward_share for layer in self.layers)

    def with_grad_bytes(self, grad_bytes: int) -> "Workload":
        """The same workload with its gradient scaled to ``grad_bytes`` (layer proportions kept)."""
        if grad_bytes < 0:
            raise ValueError(f"gradient size must be >= 0 bytes, got {grad_bytes}")
        total = self.grad_bytes
        sizes = [(layer.grad_bytes * grad_bytes) // total if total else 0 for layer in self.layers]
        biggest = max(range(len(sizes)), key=lambda i: self.layers[i].grad_bytes)
        sizes[biggest] += grad_bytes - sum(sizes)
        layers = tuple(replace(layer, grad_bytes=size) for layer, size in zip(self.layers, sizes))
        return replace(self, layers=layers)

    def with_compute(self, compute: ComputeModel) -> "Workload":
        return replace(self, compute=compute)


def from_preset(name: str = DEFAULT_PRESET) -> Workload:
    """The workload of a preset model (see ``presets.py`` for sources and assumptions)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    preset = PRESETS[name]
    total_flops = sum(layer.forward_flops for layer in preset.layers)
    layers = tuple(Layer(spec.name, spec.params * BYTES_PER_PARAM,
                         (2.0 / 3.0) * spec.forward_flops / total_flops)
                   for spec in preset.layers)
    return Workload(preset.name, layers, Constant(preset.step_time_s), preset.batch_size,
                    preset.source)


def _number(value, what: str, path: str, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= maximum or not math.isfinite(value):  # a huge int: the bound
        raise ValueError(f"profile {path}: {what} must be a number from 0 to {maximum:g}, "
                         f"got {value!r}")
    return float(value)


def _byte_count(value, what: str, path: str) -> int:
    """A whole number of gradient bytes (0.5 B is no size a tensor has)."""
    size = _number(value, what, path, MAX_GRAD_BYTES)
    if size != int(size):
        raise ValueError(f"profile {path}: {what} must be a whole number of bytes, got {value!r}")
    return int(size)


def _profile_layers(data: dict, path: str, mean_compute_s: float) -> tuple[Layer, ...]:
    raw = data.get("layers")
    if raw is None:
        return (Layer("gradient", _byte_count(data.get("grad_bytes"), "grad_bytes (or layers)",
                                              path), 0.0),)
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"profile {path}: 'layers' must be a non-empty list")
    layers = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise ValueError(f"profile {path}: layers[{i}] must be an object")
        size = _byte_count(entry.get("grad_bytes"), f"layers[{i}].grad_bytes", path)
        backward = _number(entry.get("backward_s", 0.0), f"layers[{i}].backward_s", path,
                           MAX_TIME_S)
        layers.append(Layer(str(entry.get("name", f"layer{i}")), size,
                            backward / mean_compute_s))
    total_bytes = sum(layer.grad_bytes for layer in layers)
    if total_bytes > MAX_GRAD_BYTES:
        raise ValueError(f"profile {path}: the layers' gradients come to {total_bytes:,} B, over "
                         f"{MAX_GRAD_BYTES:g}")
    total_share = sum(layer.backward_share for layer in layers)
    if total_share > 1.0:  # per-layer timings (with their overhead) exceed a whole step: rescale
        layers = [replace(layer, backward_share=layer.backward_share / total_share)
                  for layer in layers]
    return tuple(layers)


def load_profile(path: str) -> Workload:
    """Read a profile JSON file; ``ValueError`` with the path and the problem if it is bad."""
    try:
        data = read_json(path, MAX_INPUT_BYTES)
    except OSError as error:
        raise ValueError(f"cannot read profile {path!r}: {error.strerror}") from None
    except ValueError as error:  # also: bad UTF-8, numbers, nesting
        raise ValueError(f"profile {path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"profile {path}: expected a JSON object")
    samples = data.get("compute_s")
    if not isinstance(samples, list) or not samples:
        raise ValueError(f"profile {path}: 'compute_s' must be a non-empty list of seconds")
    samples = tuple(_number(s, "compute_s entries", path, MAX_TIME_S) for s in samples)
    if 0.0 in samples:  # an iteration of no time: a run drawing only these would divide by 0
        raise ValueError(f"profile {path}: compute_s entry {samples.index(0.0)} is 0; every "
                         f"measured compute time is more than 0 s")
    compute = Empirical(samples)
    if compute.mean_s < MIN_MEAN_S:
        raise ValueError(f"profile {path}: compute times must average at least {MIN_MEAN_S:g} s, "
                         f"got {compute.mean_s:g}")
    batch = data.get("batch_size", 1)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"profile {path}: batch_size must be an integer from 1 to "
                         f"{MAX_BATCH:g}, got {batch!r}")
    layers = _profile_layers(data, path, compute.mean_s)
    return Workload(_model_name(data, path), layers, compute, batch,
                    f"profile {_source(data, path)}")


MAX_NAME_CHARS = 200  # a model's name, as the report's header shows it


def _model_name(data: dict, path: str) -> str:
    """The profile's ``model``, the workload's name in the report's header (the profile's path
    where it has none); ``ValueError`` where it is no one-line string of at most
    ``MAX_NAME_CHARS``."""
    if "model" not in data:
        return path
    value = data["model"]
    if not isinstance(value, str) or not value.strip() or not value.isprintable() \
            or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"profile {path}: 'model' must be a name on one line, at most "
                         f"{MAX_NAME_CHARS} characters, got {str(value)[:40]!r}")
    return value


def _source(data: dict, path: str) -> str:
    """Where the profile came from (its ``source``: cuda/bench.py writes its whole command line,
    which may be long), on one line (the workload keeps it; no report prints it); the profile's
    path where it has none. ``ValueError`` where it is no string."""
    if "source" not in data:
        return path
    if not isinstance(data["source"], str):
        raise ValueError(f"profile {path}: 'source' must be a string, got "
                         f"{str(data['source'])[:40]!r}")
    return " ".join(data["source"].split()) or path
