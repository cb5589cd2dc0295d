"""The configuration of a synchronous-SGD run (``real/sync.py``): one typed, validated dataclass.

Every default lives here with what it means. ``parse_args`` turns the command line into a
``SyncConfig``; an invalid value becomes one ``error:`` line and exit status 2, as argparse does.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, fields

import torch

from dsgd_sim.argparse_oneline import check_output_dir, check_output_files, parse_flag
from dsgd_sim.compute import MAX_TIME_S
from dsgd_sim.units import parse_time

from .comm import launched_by_mpi
from .data import MNIST_FILES, DatasetSpec
from .local_launch import RankArgumentParser, add_task_and_launch_flags, check_launch_settings
from .grad_sync import STRATEGIES
from .models import MODELS

ALLREDUCE_CHOICES = ("backend", "ring", "naive")
BACKENDS = ("gloo", "nccl", "mpi")
MAX_LR = float(torch.finfo(torch.float32).max)  # SGD scales float32 gradients by it (sync, async)
MAX_STEPS = 100_000_000  # a run's steps beyond this are a typo, not a plan
MAX_BUCKET_MB = 2**20  # a 1 TiB bucket is a typo; 1e308 overflowed turning into bytes


@dataclass
class SyncConfig:
    """One run of synchronous data-parallel SGD. Sizes per rank unless the name says global."""

    model: str = "lenet"             # lenet | mlp | mlp-large (about 25 MB of fp32 gradients)
    dataset: str = "synthetic"       # synthetic | mnist:DIR (IDX files in DIR)
    num_samples: int = 16384         # size of the synthetic dataset (ignored for MNIST)
    batch_size: int = 32             # per rank; the global batch is world_size × batch_size
    steps: int = 200                 # optimizer steps in the whole run (restarts included)
    lr: float = 0.05                 # SGD learning rate, at most MAX_LR
    momentum: float = 0.9            # SGD momentum
    sync: str = "bucketed"           # per-param | flat | bucketed | ddp
    allreduce: str = "backend"       # backend (the library's own) | ring | naive (hand-written)
    bucket_mb: float = 25.0          # bucket capacity in MiB (as DDP's bucket_cap_mb)
    seed: int = 0                    # model init, synthetic data and the data order
    warmup_steps: int = 5            # steps left out of the timing statistics
    emulate_compute_s: float = 0.0   # >0: sleep this long instead of forward+backward
    real_gradients: bool = False     # with emulate_compute_s: real forward+backward, padded to it
    emulate_comm_s: float = 0.0      # >0: wait this long after the gradients' exchange (counted
                                     # as communication: a slower network, or, in one process
                                     # alone, a step whose CPU work follows a pause)
    checkpoint_dir: str | None = None
    checkpoint_every: int = 50       # steps between checkpoints (with --checkpoint-dir)
    keep_checkpoints: int = 2        # complete checkpoints kept on disk
    device: str = "cpu"              # cpu | cuda (one GPU per rank)
    backend: str | None = None       # gloo | nccl | mpi; default nccl on cuda, mpi under
                                     # mpiexec, else gloo
    timeout_s: float = 30.0          # a dead peer fails the job after this long, not 30 minutes
    threads: int = 0                 # torch threads per rank; 0: OMP_NUM_THREADS, else cores / ranks on this node
    check_replicas: bool = False     # compare weight hashes across ranks after every step
    json: str | None = None          # rank 0 writes the run summary here
    trace: str | None = None         # rank 0 writes a Chrome trace of all ranks here
    profile_out: str | None = None   # rank 0 writes a compute profile for the simulator here
    progress: bool = True            # tqdm bar on rank 0
    nproc_per_node: int = 0          # >0: launch this many local ranks ourselves (no torchrun)
    master_addr: str | None = None   # self-launch rendezvous address (default: $MASTER_ADDR)
    master_port: int = 0             # self-launch rendezvous port; 0: $MASTER_PORT or a free one

    def __post_init__(self):
        for name, low in [("batch_size", 1), ("steps", 1), ("num_samples", 1), ("warmup_steps", 0),
                          ("checkpoint_every", 1), ("keep_checkpoints", 1), ("threads", 0),
                          ("nproc_per_node", 0), ("master_port", 0)]:
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be at least {low}, "
                                 f"got {getattr(self, name)}")
        if self.steps > MAX_STEPS:
            raise ValueError(f"--steps must be at most {MAX_STEPS:,}, got {self.steps:,}")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r} (choose from {', '.join(MODELS)})")
        DatasetSpec.parse(self.dataset)
        if self.sync not in STRATEGIES:
            raise ValueError(f"unknown --sync {self.sync!r} (choose from {', '.join(STRATEGIES)})")
        if self.allreduce not in ALLREDUCE_CHOICES:
            raise ValueError(f"unknown --allreduce {self.allreduce!r}")
        if self.sync == "ddp" and self.allreduce != "backend":
            raise ValueError(f"--sync ddp uses the backend's all-reduce, not {self.allreduce!r}")
        if not 0 < self.bucket_mb < math.inf:
            raise ValueError(f"--bucket-mb must be positive and finite, got {self.bucket_mb}")
        if self.bucket_mb > MAX_BUCKET_MB:  # in bytes it overflowed, into a traceback
            raise ValueError(f"--bucket-mb must be at most {MAX_BUCKET_MB:,} (1 TiB), got "
                             f"{self.bucket_mb:g}")
        if not (0 < self.lr < math.inf) or not 0 <= self.momentum < 1:
            raise ValueError(f"need a finite lr > 0 and 0 <= momentum < 1, got {self.lr}, "
                             f"{self.momentum}")
        if self.lr > MAX_LR:
            raise ValueError(f"--lr must be at most {MAX_LR:.7g} (the largest float32), "
                             f"got {self.lr:g}")
        check_launch_settings(self.seed, self.master_port, self.nproc_per_node, self.threads,
                              self.timeout_s, self.master_addr)
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"unknown --device {self.device!r} (cpu or cuda)")
        if self.backend is None:  # under mpiexec, its engine: a gloo rank would train alone
            self.backend = ("nccl" if self.device == "cuda" else
                            "mpi" if launched_by_mpi() and self.sync != "ddp" else "gloo")
        self._check_backend()
        if self.real_gradients and not self.emulate_compute_s:
            raise ValueError("--real-gradients pads real compute to --emulate-compute; "
                             "give --emulate-compute too")
        if self.emulate_compute_s and self.profile_out:
            raise ValueError("--profile-out measures real compute; drop --emulate-compute")
        for flag, seconds in (("--emulate-compute", self.emulate_compute_s),
                              ("--emulate-comm", self.emulate_comm_s)):
            if not 0 <= seconds <= MAX_TIME_S:
                raise ValueError(f"{flag} must be 0 to {MAX_TIME_S:g} s, got {seconds:g} s")

    def _check_backend(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown --backend {self.backend!r} (choose from {', '.join(BACKENDS)})")
        if self.backend == "nccl" and self.device != "cuda":
            raise ValueError("--backend nccl needs --device cuda")
        if self.backend == "mpi" and self.sync == "ddp":
            raise ValueError("--sync ddp needs torch.distributed (--backend gloo or nccl), not mpi")
        if self.backend == "mpi" and self.device != "cpu":
            raise ValueError("--backend mpi exchanges CPU tensors; use --device cpu")
        if self.backend == "mpi" and self.nproc_per_node:
            raise ValueError("--backend mpi is launched by mpiexec, not --nproc-per-node")

    @property
    def engine(self) -> str:
        return "mpi" if self.backend == "mpi" else "torch"

    @property
    def dataset_spec(self) -> DatasetSpec:
        return DatasetSpec.parse(self.dataset)


CHECKPOINT_FLAGS = ("checkpoint_every", "keep_checkpoints")  # meaningful with --checkpoint-dir


BUCKETED_SYNCS = ("bucketed", "ddp")  # the --sync strategies --bucket-mb sizes


def build_parser() -> argparse.ArgumentParser:
    defaults = SyncConfig()
    p = RankArgumentParser(prog="sync.py", description="Synchronous data-parallel SGD.")
    add_task_and_launch_flags(p, defaults,
                              "samples per rank a step; the global batch is this times the ranks",
                              "model initialisation, the synthetic data, the order of the "
                              "samples")
    p.add_argument("--steps", type=int, default=defaults.steps,
                   help="optimizer steps of the whole run, restarts included (default "
                   "%(default)s)")
    p.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps,
                   help="steps left out of the timing statistics (default %(default)s)")
    p.add_argument("--lr", type=float, default=defaults.lr,
                   help="SGD learning rate (default %(default)s)")
    p.add_argument("--momentum", type=float, default=defaults.momentum,
                   help="SGD momentum (default %(default)s)")
    p.add_argument("--sync", default=defaults.sync,
                   help="per-param, flat, bucketed or ddp (default %(default)s)")
    p.add_argument("--allreduce", default=defaults.allreduce,
                   help="backend (the engine's own), ring or naive (hand-written) (default "
                   "%(default)s)")
    p.add_argument("--bucket-mb", type=float, default=None,  # None: not typed
                   help=f"with --sync bucketed or ddp: bucket capacity in MiB (default "
                        f"{defaults.bucket_mb:g})")
    p.add_argument("--emulate-compute", default="0", help="e.g. 80ms: sleep instead of compute")
    p.add_argument("--real-gradients", action="store_true",
                   help="with --emulate-compute: real forward and backward, padded with a sleep "
                   "to the emulated time (the run learns; a step takes max(emulated, real))")
    p.add_argument("--emulate-comm", default="0",
                   help="e.g. 40ms: wait this long after each step's gradient exchange, counted "
                   "as communication (a slower network; one process alone: its CPU work after "
                   "a pause)")
    p.add_argument("--timeout", default="30s",
                   help="how long any communication waits for a peer before the job fails "
                   "(default %(default)s)")
    p.add_argument("--device", default=defaults.device, help="cpu or cuda (default %(default)s)")
    p.add_argument("--backend", default=None,
                   help="gloo, nccl or mpi (default: nccl on cuda, mpi under mpiexec "
                        "unless --sync ddp, else gloo)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="write checkpoints here and resume from the newest complete one")
    checkpoint_help = {"checkpoint_every": "steps between checkpoints",
                       "keep_checkpoints": "complete checkpoints kept on disk"}
    for name in CHECKPOINT_FLAGS:  # None: not typed (refused without --checkpoint-dir if typed)
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                       help=f"with --checkpoint-dir: {checkpoint_help[name]} (default "
                       f"{getattr(defaults, name)})")
    p.add_argument("--check-replicas", action="store_true",
                   help="fail unless all ranks hold bit-identical weights after every step")
    p.add_argument("--json", default=None, help="write the run summary (rank 0) to FILE")
    p.add_argument("--trace", default=None, help="write a Chrome trace (all ranks) to FILE")
    p.add_argument("--profile-out", default=None, help="write a compute profile to FILE")
    return p


def check_outputs(config: SyncConfig) -> None:
    """ValueError naming an output rank 0 could not write: a file in a missing folder, a folder
    that is a file, an input the run reads (MNIST's files), the checkpoint folder."""
    outputs = {"--json": config.json, "--trace": config.trace, "--profile-out": config.profile_out}
    spec = DatasetSpec.parse(config.dataset)
    check_output_files(outputs)
    if spec.kind == "mnist":  # either of the names each file may have
        for what, name in MNIST_FILES.items():
            for candidate in (name, name + ".gz"):
                check_output_files(outputs, {f"the MNIST {what} file":
                                             os.path.join(spec.path, candidate)})
    check_output_dir("--checkpoint-dir", config.checkpoint_dir)
    if config.checkpoint_dir is not None:
        folder = os.path.realpath(config.checkpoint_dir)
        for flag, path in outputs.items():
            if path is not None and os.path.realpath(path) == folder:
                raise ValueError(f"{flag} {path!r} is the --checkpoint-dir, where the run "
                                 f"writes its checkpoints")


def parse_args(argv: list[str] | None = None) -> SyncConfig:
    """``SyncConfig`` from the command line; exits with status 2 and one line on bad input
    (printed by rank 0 alone: ``RankArgumentParser``)."""
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    try:
        args["emulate_compute_s"] = parse_flag("--emulate-compute", parse_time,
                                               args.pop("emulate_compute"))
        args["emulate_comm_s"] = parse_flag("--emulate-comm", parse_time,
                                            args.pop("emulate_comm"))
        args["timeout_s"] = parse_flag("--timeout", parse_time, args.pop("timeout"))
        typed = [name for name in CHECKPOINT_FLAGS if args[name] is not None]
        if typed and args["checkpoint_dir"] is None:
            raise ValueError(f"--{typed[0].replace('_', '-')} sets how --checkpoint-dir is "
                             f"written; give --checkpoint-dir too")
        for name in CHECKPOINT_FLAGS:
            if args[name] is None:
                args[name] = getattr(SyncConfig, name)
        if args["bucket_mb"] is None:
            args["bucket_mb"] = SyncConfig.bucket_mb
        elif args["sync"] not in BUCKETED_SYNCS:
            raise ValueError(f"--bucket-mb sizes the buckets of --sync "
                             f"{' or '.join(BUCKETED_SYNCS)}; --sync {args['sync']} has none")
        known = {f.name for f in fields(SyncConfig)}
        config = SyncConfig(**{k: v for k, v in args.items() if k in known})
        # Rank 0 writes the outputs (other nodes need not have its folders) and checks them once
        # every rank has joined (sync.load_data_together); a self-launching job checks them here
        # too, before it starts any process.
        if config.nproc_per_node:
            check_outputs(config)
        return config
    except ValueError as exc:
        parser.exit(2, f"sync.py: error: {exc}\n")
