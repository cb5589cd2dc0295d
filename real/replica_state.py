"""Keeping replicas identical: rank 0's state broadcast at start, checkpoints, weight hashes.

Rank 0 alone reads and writes checkpoints; every other rank receives the state over the
communicator, so a restart needs no shared file system. What a checkpoint holds (see
``real/checkpoint.py`` for how it is written): the step, the model's ``state_dict``, the
optimizer's, every rank's RNG states (torch, CUDA, numpy, Python), the data position and the
settings that must not change across a restart (model, dataset, seed, global batch).
"""

from __future__ import annotations

import hashlib
import pickle
import random

import numpy as np
import torch
from torch import nn

from .checkpoint import load_latest_checkpoint, save_checkpoint


class RestoreError(ValueError):
    """A checkpoint exists but belongs to a different run; the message says what differs."""


def weights_sha256(model: nn.Module) -> str:
    """SHA-256 of the bytes of every tensor of ``model.state_dict()``, in its order."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def broadcast_model(comm, model: nn.Module) -> None:
    """Overwrite every rank's parameters and buffers with rank 0's."""
    for tensor in model.state_dict().values():
        comm.broadcast(tensor.data, src=0)


def replicas_agree(comm, model: nn.Module) -> bool:
    """True when every rank's weights hash to the same value (compared with a max and a min)."""
    value = int.from_bytes(bytes.fromhex(weights_sha256(model))[:7], "big")
    high = torch.tensor([value], dtype=torch.int64, device=comm.device)
    low = high.clone()
    comm.all_reduce(high, op="max")
    comm.all_reduce(low, op="min")
    return bool(high.item() == low.item())


def gather_bytes(comm, payload: bytes) -> list[bytes] | None:
    """Every rank's ``payload`` on rank 0 (in rank order); ``None`` on other ranks."""
    length = torch.tensor([len(payload)], dtype=torch.int64, device=comm.device)
    lengths = [torch.zeros_like(length) for _ in range(comm.world_size)]
    comm.all_gather(lengths, length)
    size = max(int(n.item()) for n in lengths)
    mine = torch.zeros(size, dtype=torch.uint8)
    mine[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    mine = mine.to(comm.device)
    slots = [torch.zeros_like(mine) for _ in range(comm.world_size)] if comm.rank == 0 else None
    comm.gather(mine, slots, dst=0)
    if comm.rank != 0:
        return None
    return [slot[:int(n.item())].cpu().numpy().tobytes() for slot, n in zip(slots, lengths)]


def scatter_bytes(comm, payloads: list[bytes] | None) -> bytes:
    """Rank 0's ``payloads[r]`` delivered to rank ``r``."""
    lengths = torch.zeros(comm.world_size, dtype=torch.int64, device=comm.device)
    if comm.rank == 0:
        lengths = torch.tensor([len(p) for p in payloads], dtype=torch.int64, device=comm.device)
    comm.broadcast(lengths, src=0)
    size = int(lengths.max().item())
    slots = None
    if comm.rank == 0:
        slots = [torch.zeros(size, dtype=torch.uint8) for _ in payloads]
        for slot, payload in zip(slots, payloads):
            slot[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        slots = [slot.to(comm.device) for slot in slots]
    mine = torch.zeros(size, dtype=torch.uint8, device=comm.device)
    comm.scatter(mine, slots, src=0)
    return mine[:int(lengths[comm.rank].item())].cpu().numpy().tobytes()


def rng_state() -> bytes:
    """This process's random-number generator states, pickled."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return pickle.dumps(state)


def set_rng_state(blob: bytes) -> None:
    state = pickle.loads(blob)
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def write_checkpoint(comm, directory: str, step: int, model: nn.Module,
                     optimizer: torch.optim.Optimizer, run: dict, data_position: dict,
                     keep: int) -> None:
    """Collective: rank 0 writes the checkpoint of ``step`` (every rank sends its RNG states)."""
    rng = gather_bytes(comm, rng_state())
    if comm.rank == 0:
        state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "rng": rng, "world_size": comm.world_size, "data": data_position, "run": run}
        save_checkpoint(directory, step, state, keep)


def restore_or_start(comm, directory: str | None, model: nn.Module,
                     optimizer: torch.optim.Optimizer, run: dict) -> int:
    """Collective: the step to start from, with every rank's state set to rank 0's.

    Rank 0 loads the newest complete checkpoint in ``directory`` (if any) and checks that
    ``run`` (model, dataset, seed, global batch) matches it; its model, optimizer and the
    ranks' RNG states are then sent to every rank. Without a checkpoint, rank 0's freshly
    initialised weights are broadcast. Raises ``RestoreError`` on every rank on a mismatch.
    """
    found = load_latest_checkpoint(directory) if comm.rank == 0 and directory else None
    problem = _mismatch(found[1], run) if found else ""
    header = torch.tensor([found[0] if found else 0, int(bool(found)), int(bool(problem)),
                           int(bool(found) and found[1]["world_size"] == comm.world_size)],
                          device=comm.device)
    comm.broadcast(header, src=0)
    step, have_checkpoint, mismatched, same_world = (int(v) for v in header.tolist())
    if mismatched:
        raise RestoreError(problem or "the checkpoint belongs to a different run (see rank 0)")
    if have_checkpoint and comm.rank == 0:
        model.load_state_dict(found[1]["model"])
        optimizer.load_state_dict(found[1]["optimizer"])
    broadcast_model(comm, model)
    if have_checkpoint:
        _broadcast_momentum(comm, optimizer)
        if same_world:
            set_rng_state(scatter_bytes(comm, found[1]["rng"] if found else None))
    return step


def _mismatch(state: dict, run: dict) -> str:
    stored = state.get("run", {})
    differing = [f"{k} {stored.get(k)!r} there, {v!r} here" for k, v in run.items()
                 if stored.get(k) != v]
    if not differing:
        return ""
    return f"checkpoint of step {state['step']} belongs to another run: " + "; ".join(differing)


def _broadcast_momentum(comm, optimizer: torch.optim.Optimizer) -> None:
    """Give every rank rank 0's momentum buffers (SGD's only optimizer state)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            buffer = state.get("momentum_buffer")
            flag = torch.tensor([int(buffer is not None)], device=comm.device)
            comm.broadcast(flag, src=0)
            if flag.item():
                if buffer is None:
                    buffer = torch.zeros_like(p)
                comm.broadcast(buffer, src=0)
                state["momentum_buffer"] = buffer
