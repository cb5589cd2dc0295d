"""Measured convolution times as a simulator profile (per-step compute).

``python cuda/bench.py --profile FILE`` writes one; ``dsgd-sim --profile FILE``
reads it (format ``dsgd-profile/1``, see dsgd_sim/workload.py). A "step" here
is one forward convolution of one image by one kernel variant, L2 flushed
before it: ``compute_s`` holds every timed repeat, so the simulator resamples
the real spread of the kernel's run time. ``grad_bytes`` is the size of the
masks (the layer's weights, fp32), the gradient a data-parallel replica of
this one-layer "model" would all-reduce; scale it with ``--grad-bytes`` in
the simulator to model a real network.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile

PROFILE_FORMAT = "dsgd-profile/1"


def conv_profile(samples_s: list[float], *, variant: str, mask_size: int, height: int,
                 width: int, channels: int, gpu: str, command: str) -> dict:
    """The profile dict for the given timed runs; ValueError on an unusable sample."""
    if not samples_s:
        raise ValueError("a profile needs at least one timed run")
    for s in samples_s:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ValueError(f"compute time must be a positive number of seconds, got {s!r}")
    k = mask_size
    return {
        "format": PROFILE_FORMAT,
        "model": f"conv2d {variant} {k}x{k} on {channels}x{height}x{width} fp32",
        "batch_size": 1,
        "grad_bytes": 4 * channels * k * k,
        "compute_s": [float(s) for s in samples_s],
        "source": command,
        "gpu": gpu,
        "note": "compute_s: one forward convolution per step (no backward), L2 flushed, "
                "CUDA-event times",
    }


def write_profile(path: str, profile: dict) -> None:
    """Writes profile as JSON to path."""
    write_json(path, profile)


def written_in_place(path: str) -> bool:
    """Whether ``path`` is written where it is, not replaced by a new file beside it: a device,
    a pipe, or this process's own descriptors (``/dev/stdout``, ``/dev/fd/N``)."""
    if path.startswith(("/dev/std", "/dev/fd/", "/proc/self/fd/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:  # not there yet: a new file
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_json(path: str, document: dict) -> None:
    """``document`` as JSON in ``path``, put in place whole: a write that fails leaves what
    was there (this folder runs without the dsgd package, whose ``write_atomically`` it mirrors:
    a link's target is written; a device, a pipe or /dev/stdout appended to in place)."""
    if written_in_place(path):
        with open(path, "a") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
        return
    path = os.path.realpath(path)
    folder, name = os.path.split(path)
    fd, part = tempfile.mkstemp(dir=folder, prefix=f".{name[:64]}.", suffix=".part")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=1)
            handle.write("\n")
        os.chmod(part, 0o644)
        os.replace(part, path)
    except BaseException:
        os.unlink(part)
        raise
