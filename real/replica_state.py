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
import reprlib
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from .checkpoint import checkpoint_path, load_latest_checkpoint, save_checkpoint

RESTORED_KEYS = ("run", "world_size", "model", "optimizer", "rng")  # what a restart reads
_BRIEF = reprlib.Repr()  # how _brief shortens a value read from a file
_BRIEF.maxstring = _BRIEF.maxother = 160


class RestoreError(ValueError):
    """A checkpoint exists but belongs to a different run, or is malformed; the message says
    what differs, or names the file and what is wrong with it."""


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

    Rank 0 loads the newest complete checkpoint in ``directory`` (if any), checks that ``run``
    (model, dataset, seed, global batch) matches it and that its content fits ``model`` and
    ``optimizer``, and loads it; its model, optimizer and the ranks' RNG states are then sent to
    every rank. Without a checkpoint, rank 0's freshly initialised weights are broadcast. Raises
    ``RestoreError`` on every rank when the checkpoint belongs to another run or is malformed;
    the file is left as it is.
    """
    found, problem = None, ""
    if comm.rank == 0 and directory:
        try:
            found = load_latest_checkpoint(directory)
        except OSError as error:  # said to every rank below, so that none waits for rank 0
            problem = f"cannot read the checkpoints in {directory}: {error}"
    if found:
        problem = _restore_locally(checkpoint_path(directory, found[0]), found[1], model,
                                   optimizer, run)
    header = torch.tensor([found[0] if found else 0, int(bool(found)), int(bool(problem)),
                           int(bool(found) and not problem
                               and found[1]["world_size"] == comm.world_size)],
                          device=comm.device)
    comm.broadcast(header, src=0)
    step, have_checkpoint, refused, same_world = (int(v) for v in header.tolist())
    if refused:
        raise RestoreError(problem or "rank 0 cannot resume from its checkpoint (see its error)")
    broadcast_model(comm, model)
    if have_checkpoint:
        _broadcast_momentum(comm, optimizer)
        if same_world:
            set_rng_state(scatter_bytes(comm, found[1]["rng"] if found else None))
    return step


def _restore_locally(path: str, state: dict, model: nn.Module,
                     optimizer: torch.optim.Optimizer, run: dict) -> str:
    """Rank 0: load checkpoint ``path`` (its content ``state``) into ``model`` and ``optimizer``
    after checking it; what is wrong with it in one line, or ``""``."""
    missing = [repr(key) for key in RESTORED_KEYS if key not in state]
    if missing:
        return f"checkpoint {path} is incomplete: it has no {', '.join(missing)}"
    if not isinstance(state["run"], dict):
        return f"checkpoint {path}: its 'run' is a {type(state['run']).__name__}, not a dict"
    mismatch = _mismatch(state, run)
    if mismatch:
        return mismatch
    problem = (_world_size_problem(state["world_size"])
               or _model_problem(model, state["model"])
               or _optimizer_problem(optimizer, state["optimizer"])
               or _rng_problem(state["rng"], state["world_size"]))
    return f"checkpoint {path}: {problem}" if problem else ""


def _mismatch(state: dict, run: dict) -> str:
    stored = state["run"]
    differing = [f"{k} {_brief(stored.get(k))} there, {v!r} here" for k, v in run.items()
                 if _differs(stored.get(k), v)]
    if not differing:
        return ""
    return f"checkpoint of step {state['step']} belongs to another run: " + "; ".join(differing)


def _differs(stored, value) -> bool:
    """``stored != value`` for a value read from a file, which may not compare to a bool."""
    try:
        return bool(stored != value)
    except Exception:  # a tensor of several elements, say: not the setting of this run
        return True


def _world_size_problem(world_size) -> str:
    if type(world_size) is not int or world_size < 1:  # not a bool either
        return f"its 'world_size' {_brief(world_size)} is not a number of ranks"
    return ""


def _model_problem(model: nn.Module, saved) -> str:
    """Load ``saved`` into ``model`` unless its names or shapes differ; what differs, or ``""``."""
    if not isinstance(saved, Mapping):
        return f"its 'model' is a {type(saved).__name__}, not a state_dict"
    expected = model.state_dict()
    missing = [name for name in expected if name not in saved]
    unexpected = [name for name in saved if name not in expected]
    misshapen = [name for name, tensor in expected.items() if name in saved and not (
        isinstance(saved[name], torch.Tensor) and saved[name].shape == tensor.shape)]
    for what, names in [("lacks", missing), ("has unknown", unexpected),
                        ("has misshapen", misshapen)]:
        if names:
            return f"its 'model' {what} weights {_names(names)} for this model"
    try:
        model.load_state_dict(saved)
    except Exception as error:  # tensors of a kind that cannot be copied in, say
        return f"its 'model' does not load: {_one_line(error)}"
    return ""


def _optimizer_problem(optimizer: torch.optim.Optimizer, saved) -> str:
    """Load ``saved`` into ``optimizer`` if it is a state_dict of the same parameters with the
    same settings (lr, momentum, ...: numbers and flags); what is wrong, or ``""``."""
    if not (isinstance(saved, dict) and isinstance(saved.get("state"), dict)
            and isinstance(saved.get("param_groups"), list)
            and all(isinstance(g, dict) and isinstance(g.get("params"), list)
                    for g in saved["param_groups"])):
        return "its 'optimizer' is not an optimizer's state_dict ('state' and 'param_groups')"
    settings = [{key: value for key, value in group.items() if isinstance(value, (int, float))}
                for group in optimizer.param_groups]
    try:
        optimizer.load_state_dict(saved)
    except Exception as error:  # torch's own checks: groups or parameters that do not match
        return f"its 'optimizer' does not fit this model: {_one_line(error)}"
    for group, ours in zip(optimizer.param_groups, settings):
        for key, value in ours.items():
            if not (isinstance(group.get(key), (int, float)) and group.get(key) == value):
                return f"its 'optimizer' has {key} {_brief(group.get(key))}, this run {value!r}"
        for p in group["params"]:
            buffer = optimizer.state[p].get("momentum_buffer")
            if buffer is not None and not (isinstance(buffer, torch.Tensor)
                                           and buffer.shape == p.shape):
                return "its 'optimizer' holds a momentum buffer unlike its parameter"
    return ""


def _rng_problem(rng, world_size: int) -> str:
    """``""`` if ``rng`` holds ``world_size`` states as ``rng_state`` pickles them."""
    if not (isinstance(rng, list) and len(rng) == world_size):
        return f"its 'rng' is not a list of random-number states, one per rank of {world_size}"
    for rank, blob in enumerate(rng):
        try:
            _check_rng_state(blob)
        except Exception:  # anything else than what rng_state() wrote
            return f"its 'rng' of rank {rank} is not a random-number state"
    return ""


def _check_rng_state(blob: bytes) -> None:
    """Raise unless ``set_rng_state(blob)`` would succeed; sets fresh generators, not ours."""
    state = pickle.loads(blob)
    torch.Generator().set_state(state["torch"])
    np.random.RandomState().set_state(state["numpy"])
    random.Random().setstate(state["python"])
    if "cuda" in state and not (isinstance(state["cuda"], torch.Tensor)
                                and state["cuda"].dtype == torch.uint8):
        raise ValueError("not a CUDA generator state")


def _names(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(_brief(name) for name in names[:shown]) + more


def _brief(value) -> str:
    """``repr(value)`` shortened and on one line, for an error message about a file's content."""
    return " ".join(_BRIEF.repr(value).split())


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


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
