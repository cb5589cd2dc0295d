"""The hand-written all-reduces (real/allreduce.py) against the engine's own, and the benchmark.

One launch of 4 ranks per engine checks p = 4, 3, 2 and 1 (the world and groups of its first
ranks): ``ring`` (default and small segments, and planned once then run again) and ``naive``
must equal the engine's all_reduce exactly for integers and to rounding for floats, for odd
lengths, lengths below p, every op."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from dist_helpers import REPO, have_mpiexec, run_function, run_script
from real.allreduce import (ALGORITHMS, RingAllReduce, chunk_bounds, main, naive_all_reduce,
                            plan_all_reduce, ring_all_reduce, segment_bounds)
from real.comm import init

needs_mpi = pytest.mark.skipif(not have_mpiexec(), reason="mpi4py/mpiexec not installed "
                               "(./install.sh dev installs mpi4py and mpich)")
ENGINES = ["torch", pytest.param("mpi", marks=needs_mpi)]
SIZES_P = (4, 3, 2, 1)
LENGTHS = (1, 7, 1001)  # below p, odd, long and odd
DTYPES = (torch.float32, torch.float64, torch.int64)


class PlannedRing:
    """The ring planned once per communicator, shape, strides and dtype (``RingAllReduce``), on
    a buffer of its own, and run again for every later call of that kind: each call copies its
    data in and the result out, so one plan serves every op and every sample."""

    def __init__(self):
        self.plans: dict = {}

    def __call__(self, comm, t: torch.Tensor, op: str) -> None:
        key = (comm, t.dtype, tuple(t.shape), t.stride())
        if key not in self.plans:
            buffer = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
            self.plans[key] = buffer, RingAllReduce(comm, buffer, segment_bytes=64)
        buffer, plan = self.plans[key]
        buffer.copy_(t)
        plan(op)
        t.copy_(buffer)


VARIANTS = {
    "ring": lambda comm, t, op: ring_all_reduce(comm, t, op),
    "ring_small_segments": lambda comm, t, op: ring_all_reduce(comm, t, op, segment_bytes=64),
    "ring_planned_once": PlannedRing(),
    "naive": naive_all_reduce,
}


def sample(rank: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 100 + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1000, (n,), generator=g).to(dtype)


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.dtype.is_floating_point:
        return torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    return torch.equal(got, want)


def compare_on(comm, failures: dict) -> None:
    """Every variant, dtype, length and op on ``comm``; failures keyed by (p, variant)."""
    p = comm.world_size
    for seed, (dtype, n, op) in enumerate((d, n, o) for d in DTYPES for n in LENGTHS
                                          for o in ("sum", "avg", "max", "min")):
        x = sample(comm.rank, n, dtype, seed)
        want = x.clone()
        comm.all_reduce(want, op)
        for name, fn in VARIANTS.items():
            got = x.clone()
            fn(comm, got, op)
            if not same(got, want):
                failures.setdefault((p, name), f"{dtype} n={n} {op}: {got[:4]} != {want[:4]}")
            if name.startswith("ring"):
                check_identical_everywhere(comm, got, failures, (p, "ring_identical_bits"))


def check_identical_everywhere(comm, got, failures, key) -> None:
    every = [torch.empty_like(got) for _ in range(comm.world_size)]
    comm.all_gather(every, got)
    if not all(torch.equal(e, got) for e in every):
        failures.setdefault(key, f"ranks hold different bits for {got.dtype} n={got.numel()}")


def compare_shapes_on(comm, failures) -> None:
    """A non-contiguous 2-D tensor and an empty one go through unchanged in shape."""
    p = comm.world_size
    for name, fn in VARIANTS.items():
        for scale in (1, 2):  # twice: a plan's second call reads the tensor afresh
            base = torch.arange(12.0).reshape(3, 4) * (comm.rank + 1) * scale
            t = base.t()  # non-contiguous view
            fn(comm, t, "sum")
            if not torch.equal(t, torch.arange(12.0).reshape(3, 4).t() * (p * (p + 1) // 2)
                               * scale):
                failures.setdefault((p, name), f"non-contiguous tensor reduced wrongly ({scale})")
        empty = torch.empty(0)
        fn(comm, empty, "sum")
        if empty.shape != (0,):
            failures.setdefault((p, name), f"empty tensor came back with shape {empty.shape}")


def algorithm_battery(engine: str) -> dict:
    comm = init(engine, timeout_s=60, check_sizes=False)  # the size check has its own tests
    failures: dict = {}
    try:
        for p in SIZES_P:
            group = comm if p == comm.world_size else comm.new_group(list(range(p)))
            if group is not None:
                compare_on(group, failures)
                compare_shapes_on(group, failures)
                if group is not comm:
                    group.close()
            comm.barrier()
    finally:
        comm.close()
    return {f"{p}:{name}": msg for (p, name), msg in failures.items()}


@pytest.fixture(scope="module", params=ENGINES)
def battery(request):
    launcher = "mpi" if request.param == "mpi" else "gloo"
    outcomes = run_function(algorithm_battery, 4, request.param, launcher=launcher, timeout_s=240)
    return request.param, outcomes


@pytest.mark.parametrize("p", SIZES_P)
@pytest.mark.parametrize("variant", [*VARIANTS, "ring_identical_bits"])
def test_hand_written_all_reduce_matches_engine_for_any_p_length_dtype_op(battery, variant, p):
    engine, outcomes = battery
    failures = [f"rank {r}: {o[f'{p}:{variant}']}" for r, o in enumerate(outcomes)
                if f"{p}:{variant}" in o]
    assert not failures, f"{engine}, p={p}: " + "; ".join(failures)


# -- pieces that need no peers ----------------------------------------------------------------------
@pytest.mark.parametrize("numel,parts", [(10, 3), (2, 4), (0, 2), (12, 4), (1001, 4)])
def test_chunk_bounds_cover_the_buffer_in_near_equal_pieces(numel, parts):
    bounds = chunk_bounds(numel, parts)
    assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == numel
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_segment_bounds_split_a_chunk_into_capped_pieces():
    assert segment_bounds(3, 10, 3) == [(3, 6), (6, 9), (9, 10)]
    assert segment_bounds(5, 5, 4) == []


def test_algorithms_table_names_ring_naive_and_backend():
    assert set(ALGORITHMS) == {"ring", "naive", "backend"}


def test_ring_rejects_unknown_op_and_bad_segment_size():
    comm = init("torch", timeout_s=5)
    try:
        with pytest.raises(ValueError, match="'prod'"):
            ring_all_reduce(comm, torch.ones(3), "prod")
        with pytest.raises(ValueError, match="segment_bytes"):
            ring_all_reduce(comm, torch.ones(3), "sum", segment_bytes=0)
        with pytest.raises(ValueError, match="segment_bytes"):
            RingAllReduce(comm, torch.ones(3), segment_bytes=-4)
        with pytest.raises(ValueError, match="'prod'"):
            RingAllReduce(comm, torch.ones(3))("prod")
    finally:
        comm.close()


def test_plan_all_reduce_plans_the_ring_and_wraps_the_others():
    comm = init("torch", timeout_s=5)
    try:
        t = torch.tensor([1.0, 2.0, 3.0])
        plans = {name: plan_all_reduce(name, comm, t, segment_bytes=4) for name in ALGORITHMS}
        assert isinstance(plans["ring"], RingAllReduce) and plans["ring"].tensor is t
        for name, run in plans.items():  # one rank: every all-reduce leaves the buffer as it is
            run("sum")
            run("avg")
            assert torch.equal(t, torch.tensor([1.0, 2.0, 3.0])), name
        with pytest.raises(ValueError, match="unknown all-reduce 'tree'"):
            plan_all_reduce("tree", comm, t)
    finally:
        comm.close()


def test_a_planned_ring_refuses_a_tensor_whose_memory_changed_since_its_plan():
    comm = init("torch", timeout_s=5)
    try:
        for change in (lambda t: t.resize_(8), lambda t: t.resize_(1),  # its size
                       lambda t: t.set_(torch.zeros(3))):                # its memory
            t = torch.ones(3)
            plan = RingAllReduce(comm, t)
            plan("sum")  # as planned: fine
            change(t)
            with pytest.raises(ValueError, match="plan it again"):
                plan("sum")
    finally:
        comm.close()


# -- the benchmark ----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,named", [
    (["--sizes", "64KB,lots"], "'lots'"),
    (["--algorithms", "ring,tree"], "'tree'"),
    (["--sizes", "3B"], "3 bytes"),
    (["--timeout", "soon"], "'soon'"),
    (["--threads", "-1"], "-1"),
    (["--threads", "100000000"], "100000000"),
    (["--timeout", "1e300s"], "'1e300s'"),
    (["--iters", "1000000000000"], "1000000000000"),
    (["--seed", "-1"], "-1"),
    (["--seed", "100000000000000000000"], "100000000000000000000"),
])
def test_benchmark_rejects_bad_flags_with_one_line_and_status_2(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert named in err[-1] and "Traceback" not in "".join(err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_nccl_without_a_gpu_is_one_line_and_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--backend", "nccl"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nccl needs a CUDA GPU" in err[0]


@pytest.mark.parametrize("launcher", ["gloo", pytest.param("mpi", marks=needs_mpi)])
def test_benchmark_writes_nccl_tests_rows(launcher, tmp_path):
    out, trace = tmp_path / "bench.json", tmp_path / "trace.json"
    run = run_script(["real/allreduce.py", "--sizes", "4KB,40KB", "--iters", "2", "--warmup", "1",
                      "--json", str(out), "--trace", str(trace)], 2, launcher=launcher,
                     timeout_s=120)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["results"]
    assert {(r["algorithm"], r["bytes"]) for r in rows} == {
        (a, s) for a in ("ring", "naive", "backend") for s in (4000, 40000)}
    for r in rows:
        assert r["world_size"] == 2 and r["time_s"] > 0
        assert r["algbw_Bps"] == pytest.approx(r["bytes"] / r["time_s"])
        assert r["busbw_Bps"] == pytest.approx(r["algbw_Bps"] * 2 * (2 - 1) / 2)
    assert "busbw" in run.stdout and "ring" in run.stdout
    assert json.loads(out.read_text())["threads_per_rank"] >= 1
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    # one span per timed call: 2 ranks x 3 algorithms x 2 sizes x 2 iterations
    assert len(spans) == 24 and {e["tid"] for e in spans} == {0, 1}
    assert {e["args"]["bytes"] for e in spans} == {4000, 40000}


def test_benchmark_on_one_rank_prints_its_table(tmp_path):
    run = run_script(["real/allreduce.py", "--sizes", "4KB", "--iters", "2"], 1,
                     launcher="gloo", timeout_s=120)
    assert run.returncode == 0, run.stderr
    assert "busbw/backend" in run.stdout and "Traceback" not in run.stderr


def test_default_threads_follow_omp_num_threads_else_share_the_cores_among_local_ranks(monkeypatch):
    from real.comm_cli import default_threads
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert default_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == max(1, cores // 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert default_threads() == cores


def test_an_omp_num_threads_past_the_cap_is_one_line_and_status_2():
    # torch would start them all, or die trying without a word
    env = {**os.environ, "OMP_NUM_THREADS": "100000"}
    done = subprocess.run([sys.executable, "real/allreduce.py", "--sizes", "64KB", "--iters", "2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "OMP_NUM_THREADS=100000: at most 1024 threads a rank" in done.stderr


def test_omp_num_threads_may_list_a_count_a_level_of_nesting(monkeypatch):
    # OpenMP takes "4,1" (4 threads, then 1 in each nested region): refusing it stopped the
    # trainers and every test bed that inherits it
    from real.comm_cli import default_threads
    monkeypatch.setenv("OMP_NUM_THREADS", "4,1")
    assert default_threads() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "4,0")
    with pytest.raises(ValueError, match="OMP_NUM_THREADS='4,0': give a whole number"):
        default_threads()


@pytest.mark.parametrize("command", [["real/allreduce.py", "--iters", "2"],
                                     ["real/sync.py", "--nproc-per-node", "2", "--steps", "2"],
                                     ["real/async_ps.py", "--nproc-per-node", "2"]])
@pytest.mark.parametrize("value", ["abc", "0", ""])
def test_an_omp_num_threads_that_is_no_number_of_threads_is_one_line_and_status_2(command, value):
    # OpenMP, loaded with torch, only warned about it (twice) and the run went on
    env = {**os.environ, "OMP_NUM_THREADS": value}
    done = subprocess.run([sys.executable, *command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"OMP_NUM_THREADS={value!r}: give a whole number of threads" in done.stderr


@pytest.mark.parametrize("local_vars", [{"PMI_RANK": "0", "MPI_LOCALRANKID": "0",
                                         "MPI_LOCALNRANKS": "4"},
                                        {"OMPI_COMM_WORLD_RANK": "0",
                                         "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}])
def test_default_threads_share_the_cores_among_the_ranks_mpiexec_started_here(monkeypatch,
                                                                              local_vars):
    # mpiexec sets no LOCAL_WORLD_SIZE: each of its ranks once took every core's worth of
    # threads, and 2 ranks on 2 cores ran the MPI ring 30 times slower
    from real.comm_cli import default_threads
    from real.local_launch import launcher_local_ranks
    for name in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in local_vars.items():
        monkeypatch.setenv(name, value)
    assert launcher_local_ranks() == 4
    assert default_threads() == max(1, len(os.sched_getaffinity(0)) // 4)


class ClockedComm:
    """One rank on a fake clock: a barrier takes ``barrier_s``, an all-reduce ``call_s`` (the
    benchmark's own max-reductions of its timings take no time)."""

    device = torch.device("cpu")

    def __init__(self, clock: list[float], barrier_s: float, call_s: float):
        self.clock, self.barrier_s, self.call_s = clock, barrier_s, call_s

    def barrier(self) -> None:
        self.clock[0] += self.barrier_s

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> None:
        if op == "sum":
            self.clock[0] += self.call_s


def test_stream_gaps_are_start_to_start_less_the_call(monkeypatch):
    import real.allreduce as bench
    clock = [0.0]
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    gaps = bench.stream_gaps(ClockedComm(clock, barrier_s=1e-3, call_s=0.5e-3), count=5, warmup=2)
    assert gaps == pytest.approx([1e-3] * 4)  # 5 timed calls, 4 gaps: each the barrier alone


def test_stream_gaps_refill_a_buffer_of_the_size_given_and_reduce_one_element(monkeypatch):
    import real.allreduce as bench
    clock, copied, reduced = [0.0], [], []
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src: copied.append(
        (self.numel(), src.numel())) or self, raising=False)

    class Recording(ClockedComm):
        def all_reduce(self, tensor, op="sum"):
            if op == "sum":
                reduced.append(tensor.numel())
            super().all_reduce(tensor, op)

    gaps = bench.stream_gaps(Recording(clock, barrier_s=1e-3, call_s=0.5e-3), count=4,
                             warmup=1, copy_bytes=64_000)
    assert gaps == pytest.approx([1e-3] * 3)
    assert copied == [(16_000, 16_000)] * 5 and reduced == [1] * 5
    for bad in (0, 6, -4):
        with pytest.raises(ValueError, match="positive multiple of 4"):
            bench.stream_gaps(Recording(clock, 1e-3, 0.5e-3), count=4, copy_bytes=bad)
    # with whole calls, each call reduces the whole buffer, as the benchmark's do
    copied.clear(), reduced.clear()
    gaps = bench.stream_gaps(Recording(clock, barrier_s=1e-3, call_s=0.5e-3), count=4,
                             warmup=0, copy_bytes=64_000, whole_calls=True)
    assert gaps == pytest.approx([1e-3] * 3)
    assert copied == [(16_000, 16_000)] * 4 and reduced == [16_000] * 4


@pytest.mark.parametrize("call_s, calls", [(1e-3, 20), (0.1, 5), (2.0, 4)])
def test_a_sized_stream_of_whole_calls_makes_as_many_as_fit_in_its_budget(monkeypatch, call_s,
                                                                           calls):
    import real.allreduce as bench
    from experiments.ring_probe import SIZED_GAP_BUDGET_S, SIZED_GAP_LEAST_CALLS, sized_gaps
    assert (SIZED_GAP_BUDGET_S, SIZED_GAP_LEAST_CALLS) == (0.5, 4)  # the cases below assume so
    clock = [0.0]
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    record = sized_gaps(ClockedComm(clock, barrier_s=1e-3, call_s=call_s), 64_000, most=20)
    # one call timed to count them (0.5 s / its time, at least 4, at most the 20 asked for),
    # then that many: a gap between each two, each the barrier alone on this clock
    assert record["bytes"] == 64_000 and record["calls"] == "whole"
    assert record["gaps_s"] == pytest.approx([1e-3] * (calls - 1))
    element = sized_gaps(ClockedComm(clock, barrier_s=1e-3, call_s=call_s), 64_000, most=20,
                         calls="element")
    assert element["calls"] == "element" and len(element["gaps_s"]) == 19
    with pytest.raises(ValueError, match="calls must be one of whole, element"):
        sized_gaps(ClockedComm(clock, barrier_s=1e-3, call_s=call_s), 64_000, 20, calls="half")
