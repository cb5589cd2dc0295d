"""A worker of the parameter server: compute a gradient, push it, take the reply, repeat.

Every worker starts from version 0 (the model built from the seed, the same on every rank)
without a pull, as in the simulator (``dsgd_sim/parameter_server.py``). Each cycle:

1. compute a gradient on the weights it holds, on its next batch (``ShardedBatches`` over the
   workers: worker ``i`` of ``W`` reads slice ``i`` of each global batch of ``W × batch_size``);
2. post the receives for the server's reply (its header and the weights), then push the
   header and the flat gradient;
3. the reply is ``WEIGHTS`` (applied: next batch), ``RETRY`` (dropped as too stale: compute again
   on the fresh weights, same batch), ``STOP`` (the run is over) or ``ERROR``.

The reply receives are posted before the push, so a worker never blocks on a send the server
will not take, and the server's reply leaves at once, without a handshake: when the run ends
the server sends ``STOP`` (no weights) to every worker at once, and the worker's unanswered push
and its weights receive are simply dropped. A dead server surfaces as a ``CommError`` at once (the TCP
connection closes) or after ``timeout_s`` at the latest.
"""

from __future__ import annotations

import time

import numpy as np
import torch.nn.functional as F

from .data import ShardedBatches
from .flat_params import flatten_parameters
from .models import build_model
from .ps_protocol import (ERROR, PUSH, PUSH_TAG, REPLY_DATA_TAG, REPLY_TAG, RETRY, STOP, WEIGHTS,
                          Header, check_reply, empty_header, payload_tag)

SERVER_RANK = 0


class ServerStopped(RuntimeError):
    """The server ended the job because of an error (its own message says which)."""


def run_worker(config, comm, dataset) -> dict:
    """One worker's whole run; returns its counts. Raises ``CommError`` if the server is lost."""
    rank, workers = comm.rank, comm.world_size - 1
    batches = ShardedBatches(len(dataset), config.batch_size, workers, rank - 1, config.seed)
    model = build_model(config.model, config.seed)
    weights, grads = flatten_parameters(model)
    rng = np.random.default_rng([config.seed, rank])
    version = step = pushes = 0
    reply = empty_header()
    while True:
        start_s = time.perf_counter()
        loss = compute_gradient(config, model, grads, dataset, batches, step, rng)
        compute_s = time.perf_counter() - start_s
        header = Header(PUSH, rank, version, grads.numel(), step, loss, compute_s).encode()
        answer = comm.irecv(reply, SERVER_RANK, REPLY_TAG)
        new_weights = comm.irecv(weights, SERVER_RANK, REPLY_DATA_TAG)
        sends = [comm.isend(header, SERVER_RANK, PUSH_TAG),
                 comm.isend(grads, SERVER_RANK, payload_tag(rank))]
        answer.wait()
        pushes += 1
        got = Header.decode(reply)
        check_reply(got, SERVER_RANK, weights.numel())
        if got.kind == STOP:
            return {"pushes": pushes, "applied": step}
        if got.kind == ERROR:
            raise ServerStopped(f"rank {rank}: the server stopped the job after a protocol error "
                                f"(its output names it)")
        new_weights.wait()
        for work in sends:
            work.wait()
        version = got.version
        if got.kind == WEIGHTS:
            step += 1
        elif got.kind != RETRY:
            raise AssertionError(f"unhandled reply kind {got.kind}")


def compute_gradient(config, model, grads, dataset, batches, step, rng) -> float:
    """Fill ``grads`` with the gradient of this worker's batch ``step``; the batch loss.

    With ``--emulate-compute`` sleep one draw of that distribution instead and leave a zero
    gradient of full size (as ``real/emulate.py`` does for sync SGD); the loss is then NaN. With
    ``--real-gradients`` as well, compute the real gradient and sleep what is left of the draw.
    """
    grads.zero_()
    if config.emulate_compute is None:
        return real_gradient(model, dataset, batches, step)
    draw_s = float(config.emulate_compute.sample(rng, 1)[0])
    if not config.real_gradients:
        time.sleep(draw_s)
        return float("nan")
    start_s = time.perf_counter()
    loss = real_gradient(model, dataset, batches, step)
    time.sleep(max(0.0, draw_s - (time.perf_counter() - start_s)))
    return loss


def real_gradient(model, dataset, batches, step) -> float:
    """Forward and backward on batch ``step`` (gradients land in the flat buffer); the loss."""
    images, labels = dataset.batch(batches.indices(step))
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    return loss.item()

