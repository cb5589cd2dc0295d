"""The parameter server's wire protocol: a fixed numeric header, then at most one flat tensor.

Every message is two point-to-point sends: an int64 header of ``HEADER_FIELDS`` numbers, then
(when ``length`` > 0) a float32 payload of ``length`` elements: the whole gradient or the whole
weight vector, one message whatever the number of parameters. Nothing is pickled.

Header fields (``int64``; ``loss`` and ``compute_s`` travel as the bits of a float64)::

    magic  kind  sender  version  length  step  loss  compute_s

* ``kind``: ``PUSH`` (worker → server: a gradient), ``WEIGHTS`` (server → worker: the gradient was
  applied; here are the new weights), ``RETRY`` (it was too stale and dropped; here are the
  current weights, compute again), ``STOP`` (the run is over) and ``ERROR`` (the server stopped
  the job because of a bad message).
* ``version``: in a push, the version of the weights the gradient was computed on; in a reply,
  the version of the weights that follow (the number of gradients applied before the copy).
* ``step``: in a push, how many of this worker's gradients the server has applied before (so
  the server can prove that every update is applied exactly once).

Keeping workers' messages apart by construction: a worker sends its header with ``PUSH_TAG``
and its payload with ``payload_tag(rank)``. The server keeps one header receive posted per
worker, so it knows each header's sender from the receive it arrived on (never from the header
alone), and receives the payload from that rank only, with that rank's tag: two workers'
payloads can never be confused, and the server serves whoever is ready first. Replies go to one rank with ``REPLY_TAG``/``REPLY_DATA_TAG``.

``check_push`` validates a header before anything of it is used; a bad one raises
:class:`ProtocolError` with one line naming the sender, the field and the values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MAGIC = 0x5053_4744  # "PSGD": a header that does not start with it is not ours
HEADER_FIELDS = 8
PUSH, WEIGHTS, RETRY, STOP, ERROR = 1, 2, 3, 4, 5
KIND_NAMES = {PUSH: "push", WEIGHTS: "weights", RETRY: "retry", STOP: "stop", ERROR: "error"}
PUSH_TAG = 1  # worker → server headers (one receive posted per worker)
REPLY_TAG = 2  # server → worker headers
REPLY_DATA_TAG = 3  # server → worker weights
PAYLOAD_TAG_BASE = 16  # worker r's gradient travels with tag PAYLOAD_TAG_BASE + r
MAX_COMPUTE_S = 86_400.0  # a push's compute time: finite, from 0 to a day


class ProtocolError(RuntimeError):
    """A message broke the protocol (wrong size, version, sender, ...); the text says which."""


def payload_tag(rank: int) -> int:
    """The tag of rank ``rank``'s gradient payloads."""
    return PAYLOAD_TAG_BASE + rank


@dataclass(frozen=True)
class Header:
    """One decoded header. ``loss`` and ``compute_s`` are NaN/0 when the sender has none."""

    kind: int
    sender: int
    version: int
    length: int
    step: int = 0
    loss: float = float("nan")
    compute_s: float = 0.0
    magic: int = MAGIC

    def encode(self) -> torch.Tensor:
        """The header as the int64 tensor that goes on the wire."""
        floats = torch.tensor([self.loss, self.compute_s], dtype=torch.float64).view(torch.int64)
        ints = torch.tensor([self.magic, self.kind, self.sender, self.version, self.length,
                             self.step], dtype=torch.int64)
        return torch.cat([ints, floats])

    @classmethod
    def decode(cls, wire: torch.Tensor) -> Header:
        """The header in ``wire`` (as received; nothing is checked here: see ``check_push``)."""
        magic, kind, sender, version, length, step = (int(v) for v in wire[:6].tolist())
        loss, compute_s = wire[6:8].clone().view(torch.float64).tolist()
        return cls(kind, sender, version, length, step, loss, compute_s, magic)

    def describe(self) -> str:
        return KIND_NAMES.get(self.kind, f"message of unknown kind {self.kind}")


def empty_header() -> torch.Tensor:
    """A receive buffer for one header."""
    return torch.zeros(HEADER_FIELDS, dtype=torch.int64)


def check_push(header: Header, source: int, expected_version: int, expected_step: int,
               server_version: int, num_params: int) -> None:
    """Raise :class:`ProtocolError` unless ``header`` is the push the server expects from
    ``source``: ours, a push, from that rank, on the weights it last received
    (``expected_version``), with the next step of that worker, a full-size gradient and a
    compute time a run can have (its loss may be anything: a diverging worker's is inf or NaN)."""
    who = f"rank {source}"
    if header.magic != MAGIC:
        raise ProtocolError(f"{who} sent a header without the protocol's magic number "
                            f"({header.magic:#x}, expected {MAGIC:#x})")
    if header.kind != PUSH:
        raise ProtocolError(f"{who} sent a {header.describe()} where the server expects a push")
    if header.sender != source:
        raise ProtocolError(f"{who} sent a push that claims to come from rank {header.sender}")
    if not 0 <= header.version <= server_version or header.version != expected_version:
        raise ProtocolError(f"{who} pushed a gradient of weights version {header.version}, but "
                            f"the server sent it version {expected_version} (now at "
                            f"{server_version})")
    if header.step != expected_step:
        raise ProtocolError(f"{who} pushed its step {header.step}, but the server has applied "
                            f"{expected_step} of its gradients (each is applied exactly once)")
    if header.length != num_params:
        raise ProtocolError(f"{who} pushed a gradient of {header.length} elements; the model "
                            f"has {num_params} parameters")
    if not (math.isfinite(header.compute_s) and 0 <= header.compute_s <= MAX_COMPUTE_S):
        raise ProtocolError(f"{who} pushed a gradient whose compute time is {header.compute_s!r} s "
                            f"(a push's is from 0 to {MAX_COMPUTE_S:g} s)")


def check_reply(header: Header, server: int, num_params: int) -> None:
    """Raise :class:`ProtocolError` unless ``header`` is a sane reply from rank ``server``."""
    if header.magic != MAGIC or header.kind not in (WEIGHTS, RETRY, STOP, ERROR):
        raise ProtocolError(f"rank {server} (the server) sent a {header.describe()} with magic "
                            f"{header.magic:#x}, not a reply of this protocol")
    if header.kind in (WEIGHTS, RETRY) and (header.length != num_params or header.version < 0):
        raise ProtocolError(f"the server sent weights version {header.version} of "
                            f"{header.length} elements; the model has {num_params} parameters")
