"""The configuration of an asynchronous parameter-server run (``real/async_ps.py``).

One typed, validated dataclass with every default and what it means; ``parse_args`` turns the
command line into it, and an invalid value into one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, fields

from dsgd_sim.argparse_oneline import check_output_files, parse_flag
from dsgd_sim.compute import ComputeModel, Constant, parse_compute
from dsgd_sim.parameter_server import leaves_a_round
from dsgd_sim.units import parse_time

from .comm import launched_by_mpi
from .data import DatasetSpec
from .local_launch import RankArgumentParser, add_task_and_launch_flags, check_launch_settings
from .models import MODELS
from .sync_config import MAX_LR

BACKENDS = ("gloo", "mpi")
STALENESS_LR = ("none", "inverse")  # inverse: lr / (1 + staleness)
MAX_UPDATES = 100_000_000  # a run's updates beyond this are a typo, not a plan
MAX_TIME_S = 30 * 86400  # ... and so is a --time beyond 30 days


@dataclass
class AsyncConfig:
    """One asynchronous SGD run: rank 0 serves the parameters, ranks 1..N-1 compute gradients."""

    model: str = "lenet"             # lenet | mlp | mlp-large (~25 MB), as real/sync.py
    dataset: str = "synthetic"       # synthetic | mnist:DIR
    num_samples: int = 16384         # size of the synthetic dataset
    batch_size: int = 32             # samples per gradient (per worker)
    updates: int = 1000              # stop once the server applied this many gradients (0: no limit)
    warmup_updates: int | None = None  # updates left out of updates_per_s (None: the first round)
    time_s: float = 0.0              # stop after this many seconds of training (0: no limit)
    lr: float = 0.1                  # the server's SGD learning rate, at most MAX_LR
    momentum: float = 0.0            # the server's SGD momentum (applied in arrival order)
    max_staleness: int | None = None  # drop (and have recomputed) gradients staler than this
    push_window: int = 0             # gradients the server receives at once (0: every worker's)
    staleness_lr: str = "none"       # none | inverse (lr / (1 + staleness) for each update)
    seed: int = 0                    # model init, data, data order, emulated compute draws
    emulate_compute: ComputeModel | None = None  # sleep a draw of this instead of computing
    emulate_spec: str = ""           # the text --emulate-compute was given
    real_gradients: bool = False     # with emulate_compute: real gradient and loss, padded to the draw
    backend: str | None = None       # gloo (torch.distributed) | mpi (mpi4py); default mpi
                                     # under mpiexec, else gloo
    timeout_s: float = 30.0          # a silent peer is declared dead after this long
    threads: int = 0                 # torch threads per process; 0: OMP_NUM_THREADS, else cores / processes
    json: str | None = None          # the server writes the run summary here
    trace: str | None = None         # the server writes a Chrome trace here
    trace_updates: int = 500         # updates drawn in the trace (the first ones)
    progress: bool = True            # tqdm bar on the server
    nproc_per_node: int = 0          # >0: start this many local processes ourselves
    master_addr: str | None = None   # self-launch rendezvous address (default: $MASTER_ADDR)
    master_port: int = 0             # self-launch port; 0: $MASTER_PORT or a free one

    def __post_init__(self):
        for name, low in [("batch_size", 1), ("num_samples", 1), ("updates", 0), ("threads", 0),
                          ("push_window", 0),
                          ("nproc_per_node", 0), ("master_port", 0), ("trace_updates", 0)]:
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be at least {low}, "
                                 f"got {getattr(self, name)}")
        if self.nproc_per_node == 1:
            raise ValueError("--nproc-per-node must be at least 2 (one server and a worker)")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r} (choose from {', '.join(MODELS)})")
        DatasetSpec.parse(self.dataset)
        if not (math.isfinite(self.time_s) and 0 <= self.time_s <= MAX_TIME_S):
            raise ValueError(f"--time must be from 0 to {MAX_TIME_S / 86400:g} days, got "
                             f"{self.time_s:g} s")
        if self.updates > MAX_UPDATES:
            raise ValueError(f"--updates must be at most {MAX_UPDATES:,}, got {self.updates:,}")
        if self.updates == 0 and self.time_s == 0:
            raise ValueError("no stop condition: give --updates N or --time T")
        if self.warmup_updates is not None and self.warmup_updates < 0:
            raise ValueError(f"--warmup-updates must be at least 0, got {self.warmup_updates}")
        if not (self.lr > 0 and math.isfinite(self.lr)) or not 0 <= self.momentum < 1:
            raise ValueError(f"need lr > 0 and 0 <= momentum < 1, got {self.lr}, {self.momentum}")
        if self.lr > MAX_LR:
            raise ValueError(f"--lr must be at most {MAX_LR:.7g} (the largest float32), "
                             f"got {self.lr:g}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"--max-staleness must be at least 0, got {self.max_staleness}")
        if self.staleness_lr not in STALENESS_LR:
            raise ValueError(f"unknown --staleness-lr {self.staleness_lr!r} "
                             f"(choose from {', '.join(STALENESS_LR)})")
        if self.real_gradients and self.emulate_compute is None:
            raise ValueError("--real-gradients pads real compute to --emulate-compute's draw; "
                             "give --emulate-compute too")
        if self.backend is None:  # under mpiexec, its engine: a gloo rank would be alone
            self.backend = "mpi" if launched_by_mpi() else "gloo"
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown --backend {self.backend!r} (choose from {', '.join(BACKENDS)})")
        if self.backend == "mpi" and self.nproc_per_node:
            raise ValueError("--backend mpi is launched by mpiexec, not --nproc-per-node")
        check_launch_settings(self.seed, self.master_port, self.nproc_per_node, self.threads,
                              self.timeout_s, self.master_addr)

    def check_outputs(self) -> None:
        """ValueError naming an output the server (rank 0, which writes them) could not write."""
        check_output_files({"--json": self.json, "--trace": self.trace})

    def check_warmup(self, workers: int) -> None:
        """ValueError where ``--warmup-updates`` would leave a round or less of ``--updates`` to
        time with ``workers`` workers (a round: one update each). A run stopped by ``--time``
        before that many updates times all of them and reports ``warmup_updates`` 0."""
        warmup = self.warmup_updates
        if warmup is not None and self.updates and not leaves_a_round(warmup, workers,
                                                                      self.updates):
            raise ValueError(f"--warmup-updates {warmup} leaves a round or less of --updates "
                             f"{self.updates} to time with {workers} workers (need warm-up + "
                             f"workers < updates)")

    @property
    def engine(self) -> str:
        return "mpi" if self.backend == "mpi" else "torch"

    @property
    def dataset_spec(self) -> DatasetSpec:
        return DatasetSpec.parse(self.dataset)


def build_parser() -> argparse.ArgumentParser:
    d = AsyncConfig()
    p = RankArgumentParser(prog="async_ps.py",
                           description="Asynchronous SGD with a parameter server.")
    add_task_and_launch_flags(p, d, "samples a worker's gradient is computed on",
                              "model initialisation, the synthetic data, the order of the "
                              "samples, the draws of --emulate-compute")
    p.add_argument("--updates", type=int, default=d.updates,
                   help="stop once the server has applied this many gradients (default "
                   "%(default)s; 0: no limit, with --time)")
    p.add_argument("--time", default=None, help="stop after this long, e.g. 30s (then --updates "
                   "is no limit unless given)")
    p.add_argument("--lr", type=float, default=d.lr,
                   help="the server's SGD learning rate (default %(default)s)")
    p.add_argument("--momentum", type=float, default=d.momentum,
                   help="the server's SGD momentum, applied in arrival order (default "
                   "%(default)s)")
    p.add_argument("--warmup-updates", type=int, default=None,
                   help="updates left out of updates/s, the start-up (default: the first round, "
                   "one update per worker)")
    p.add_argument("--max-staleness", type=int, default=None,
                   help="drop gradients staler than this; the worker recomputes on fresh weights "
                   "(default: none dropped)")
    p.add_argument("--staleness-lr", default=d.staleness_lr,
                   help="none, or inverse: lr / (1 + staleness) for each update (default "
                   "%(default)s)")
    p.add_argument("--push-window", type=int, default=d.push_window,
                   help="gradients the server receives at once, the rest waiting their turn in "
                   "arrival order: its link rate over a worker's (default 0: every worker's at "
                   "once, sharing the link as TCP shares it)")
    p.add_argument("--emulate-compute", default=None,
                   help="sleep instead of compute: 80ms, exp:80ms, shifted-exp:60ms,20ms, ... "
                   "or 0 (no compute: the server's ceiling)")
    p.add_argument("--real-gradients", action="store_true",
                   help="with --emulate-compute: compute the real gradient and loss too and sleep "
                   "only the rest of the draw (the run learns; a step takes max(draw, compute))")
    p.add_argument("--backend", default=d.backend,
                   help="gloo or mpi (default: mpi under mpiexec, else gloo)")
    p.add_argument("--timeout", default="30s",
                   help="a silent peer counts as dead after this long (default %(default)s)")
    p.add_argument("--json", default=None, help="write the run summary (server) to FILE")
    p.add_argument("--trace", default=None, help="write a Chrome trace (server's view) to FILE")
    p.add_argument("--trace-updates", type=int, default=None,  # None: not typed
                   help=f"with --trace, the updates it draws (default {d.trace_updates})")
    return p


def parse_emulate(spec: str) -> ComputeModel:
    """A ``--emulate-compute`` value: a compute distribution, or zero (workers compute nothing,
    which measures the server's own ceiling)."""
    try:
        if parse_time(spec) == 0:
            return Constant(0.0)
    except ValueError:
        pass  # not a plain time: a distribution such as exp:80ms
    return parse_compute(spec)


def parse_args(argv: list[str] | None = None) -> AsyncConfig:
    """``AsyncConfig`` from the command line; exits with status 2 and one line on bad input."""
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    try:
        time_text = args.pop("time")
        if time_text is not None:
            args["time_s"] = parse_flag("--time", parse_time, time_text)
            if not args["time_s"] > 0:
                raise ValueError(f"--time {time_text}: give a positive time, or leave --time "
                                 f"out for no time limit")
            given = sys.argv[1:] if argv is None else argv
            if not any(a == "--updates" or a.startswith("--updates=") for a in given):
                args["updates"] = 0
        args["timeout_s"] = parse_flag("--timeout", parse_time, args.pop("timeout"))
        spec = args.pop("emulate_compute")
        if spec is not None:
            args["emulate_compute"] = parse_flag("--emulate-compute", parse_emulate, spec)
            args["emulate_spec"] = spec
        if args["trace_updates"] is None:
            args["trace_updates"] = AsyncConfig.trace_updates
        elif args["trace"] is None:
            raise ValueError("--trace-updates sets how much --trace draws; give --trace too")
        known = {f.name for f in fields(AsyncConfig)}
        config = AsyncConfig(**{k: v for k, v in args.items() if k in known})
        # The server writes the outputs (other nodes need not have its folders) and checks them
        # once every rank has joined (async_ps.load_data_together); a self-launching job checks
        # them here too, before it starts any process.
        if config.nproc_per_node:
            config.check_outputs()
        return config
    except ValueError as exc:
        parser.exit(2, f"async_ps.py: error: {exc}\n")
