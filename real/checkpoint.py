"""Checkpoints that survive a process killed at any instant.

A checkpoint is one file, ``ckpt-<step>.pt`` (step zero-padded to 9 digits), holding whatever
state dict the trainer hands in (model, optimizer, RNG states, data position, step). It is written
to a temporary name in the same directory, flushed and ``fsync``-ed, then renamed into place and
the directory ``fsync``-ed: a reader sees either the whole new file or none of it. Temporary files
left by a killed writer are never read (and are cleaned up by the next writer); a complete-looking
file that fails to load is skipped with a warning in favour of the next older one.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tempfile

import torch

CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{9})\.pt$")
UNREADABLE_SUFFIX = ".unreadable"  # a file that did not load, set aside
TEMP_PREFIX = ".ckpt-tmp-"


def checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"ckpt-{step:09d}.pt")


def save_checkpoint(directory: str, step: int, state: dict, keep: int = 2) -> str:
    """Write ``state`` as the checkpoint of ``step`` atomically; keep the newest ``keep`` files.

    Returns the final path. Raises ``OSError`` if the directory cannot be written.
    """
    os.makedirs(directory, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    fd, temp_path = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getbuffer())
            handle.flush()
            os.fsync(handle.fileno())
        final_path = checkpoint_path(directory, step)
        os.replace(temp_path, final_path)
    except BaseException:
        _remove_quietly(temp_path)
        raise
    _fsync_directory(directory)
    _prune(directory, keep)
    return final_path


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """Complete checkpoints in ``directory`` as ``(step, path)``, newest first."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = CHECKPOINT_NAME.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found, reverse=True)


def load_latest_checkpoint(directory: str) -> tuple[int, dict] | None:
    """``(step, state)`` of the newest checkpoint that loads, or ``None`` when there is none.

    A newer file that does not load is renamed ``*.unreadable`` (kept to look at, no longer a
    checkpoint): left as it was, it would count among the ones pruning keeps, and a good older
    one would be removed in its place."""
    for step, path in list_checkpoints(directory):
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # a damaged file of any kind: fall back to an older one
            _set_aside(path, f"unreadable checkpoint {path}: {exc}")
            continue
        if isinstance(state, dict) and isinstance(state.get("step"), int) and state["step"] == step:
            return step, state
        _set_aside(path, f"checkpoint {path}: its step does not match its name")
    return None


def _set_aside(path: str, why: str) -> None:
    try:
        os.replace(path, path + UNREADABLE_SUFFIX)
        print(f"warning: skipping {why} (renamed {os.path.basename(path)}{UNREADABLE_SUFFIX})",
              file=sys.stderr)
    except OSError:  # a read-only folder: skip it all the same
        print(f"warning: skipping {why}", file=sys.stderr)


def _prune(directory: str, keep: int) -> None:
    for _, path in list_checkpoints(directory)[keep:]:
        _remove_quietly(path)
    for name in os.listdir(directory):
        if name.startswith(TEMP_PREFIX):
            _remove_quietly(os.path.join(directory, name))


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
