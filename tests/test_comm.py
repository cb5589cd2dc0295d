"""The communicator (real/comm.py) on both engines: every operation gives the values its definition
says, groups renumber ranks, mismatched sizes raise on every rank, and a dead or stuck peer fails
the job with a message within the timeout instead of hanging.

Each engine runs all operation checks in one launch of 3 ranks (odd, so nothing relies on
pairs), and each check is reported as its own test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import torch

from dist_helpers import REPO, child_env, have_mpiexec, run_function, run_script
from real.allreduce import ring_all_reduce
from real.comm import CommError, init
from real.local_launch import own_error

WORLD = 3
needs_mpi = pytest.mark.skipif(not have_mpiexec(), reason="mpi4py/mpiexec not installed "
                               "(./install.sh dev installs mpi4py and mpich)")
ENGINES = ["torch", pytest.param("mpi", marks=needs_mpi)]


def full(value, n=4, dtype=torch.float32):
    return torch.full((n,), float(value), dtype=dtype)


def check_send_recv(comm):
    """Blocking send/recv around the ring; even ranks send first so nothing deadlocks."""
    p, r = comm.world_size, comm.rank
    got = torch.zeros(4)
    if r % 2 == 0:
        comm.send(full(r), (r + 1) % p)
        source = comm.recv(got, (r - 1) % p)
    else:
        source = comm.recv(got, (r - 1) % p)
        comm.send(full(r), (r + 1) % p)
    assert source == (r - 1) % p and torch.equal(got, full((r - 1) % p))


def check_isend_irecv(comm):
    p, r = comm.world_size, comm.rank
    got = torch.zeros(4, dtype=torch.int64)
    receive = comm.irecv(got, (r + 1) % p)
    send = comm.isend(full(r, dtype=torch.int64), (r - 1) % p)
    receive.wait()
    send.wait()
    assert receive.source == (r + 1) % p and torch.equal(got, full((r + 1) % p, dtype=torch.int64))


def check_recv_from_any_source(comm):
    """Rank 0 takes one message from every other rank, in whatever order they come."""
    if comm.rank == 0:
        sources = set()
        for _ in range(comm.world_size - 1):
            got = torch.zeros(4)
            work = comm.irecv(got)
            work.wait()
            assert torch.equal(got, full(work.source))
            sources.add(work.source)
        assert sources == set(range(1, comm.world_size))
    else:
        comm.send(full(comm.rank), 0)


def check_wait_any_returns_the_first_to_finish(comm):
    """Rank 0 waits on receives from ranks 1 and 2; rank 2 sends at once, rank 1 only once
    rank 0 has seen rank 2's message, so the order is certain; a wait bounded by ``within_s``
    returns None while rank 1 has not sent."""
    if comm.rank == 0:
        got = {1: torch.zeros(4), 2: torch.zeros(4)}
        works = [comm.irecv(got[1], 1), comm.irecv(got[2], 2)]
        assert comm.wait_any(works) == 1
        works[1].wait()
        assert works[1].source == 2 and torch.equal(got[2], full(2))
        assert comm.wait_any(works) == 1, "a finished operation counts as finished"
        # rank 1 sends only once told: a bounded wait gives up, and leaves the receive pending
        assert comm.wait_any([works[0]], within_s=0) is None
        assert comm.wait_any([works[0]], within_s=0.05) is None
        comm.send(full(0), 1, tag=3)
        assert comm.wait_any([works[0]], within_s=60) == 0
        works[0].wait()
        assert works[0].source == 1 and torch.equal(got[1], full(1))
    elif comm.rank == 1:
        comm.recv(torch.zeros(4), 0, tag=3)
        comm.send(full(1), 0)
    else:
        comm.send(full(2), 0)


def check_tags_select_messages(comm):
    if comm.rank == 0:
        first, second = comm.isend(full(1), 1, tag=1), comm.isend(full(2), 1, tag=2)
        first.wait()
        second.wait()
    elif comm.rank == 1:
        got = torch.zeros(4)
        comm.recv(got, 0, tag=2)
        assert torch.equal(got, full(2))
        comm.recv(got, 0, tag=1)
        assert torch.equal(got, full(1))


def check_broadcast(comm):
    src = comm.world_size - 1
    t = torch.arange(5.0) if comm.rank == src else torch.zeros(5)
    comm.broadcast(t, src)
    assert torch.equal(t, torch.arange(5.0))


def rank_values(comm, dtype):
    """Rank r holds [r+1, -(r+1), 2r]: sums, maxima and minima are easy to write down."""
    r = comm.rank
    return torch.tensor([r + 1, -(r + 1), 2 * r], dtype=dtype)


def expected(comm, op, dtype):
    every = torch.stack([torch.tensor([r + 1, -(r + 1), 2 * r], dtype=dtype)
                         for r in range(comm.world_size)])
    if op == "max":
        return every.max(0).values
    if op == "min":
        return every.min(0).values
    total = every.sum(0)
    if op == "avg":
        return total / comm.world_size if dtype.is_floating_point else \
            torch.div(total, comm.world_size, rounding_mode="trunc")
    return total


def check_all_reduce(comm):
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        for op in ("sum", "avg", "max", "min"):
            t = rank_values(comm, dtype)
            comm.all_reduce(t, op)
            assert torch.equal(t, expected(comm, op, dtype)), (dtype, op, t)


def check_all_reduce_async(comm):
    t = rank_values(comm, torch.float32)
    work = comm.all_reduce(t, "avg", async_op=True)
    work.wait()
    assert torch.allclose(t, expected(comm, "avg", torch.float32))


def check_reduce(comm):
    dst = 1
    for op in ("sum", "avg", "max", "min"):
        t = rank_values(comm, torch.int64)
        comm.reduce(t, dst, op)
        if comm.rank == dst:
            assert torch.equal(t, expected(comm, op, torch.int64)), (op, t)


def check_scatter(comm):
    p = comm.world_size
    chunks = list(torch.arange(3.0 * p).chunk(p))  # back to back in one storage
    loose = [torch.full((3,), 10.0 * i) for i in range(p)]  # separate tensors
    for source, want in ((chunks, torch.arange(3.0) + 3 * comm.rank),
                         (loose, torch.full((3,), 10.0 * comm.rank))):
        got = torch.zeros(3)
        comm.scatter(got, source if comm.rank == 0 else None, src=0)
        assert torch.equal(got, want)


def check_gather(comm):
    p, dst = comm.world_size, comm.world_size - 1
    slots = [torch.zeros(2) for _ in range(p)] if comm.rank == dst else None
    comm.gather(torch.full((2,), float(comm.rank)), slots, dst=dst)
    if comm.rank == dst:
        assert all(torch.equal(s, torch.full((2,), float(i))) for i, s in enumerate(slots))


def check_all_gather(comm):
    p = comm.world_size
    slots = [torch.zeros(2, dtype=torch.int32) for _ in range(p)]
    comm.all_gather(slots, torch.tensor([comm.rank, comm.rank * comm.rank], dtype=torch.int32))
    assert [s.tolist() for s in slots] == [[i, i * i] for i in range(p)]


def check_reduce_scatter(comm):
    """Rank r contributes (r+1)*(i+1) to block i; block i's sum is (i+1)*p(p+1)/2."""
    p, r = comm.world_size, comm.rank
    for op, total in (("sum", p * (p + 1) / 2), ("avg", (p + 1) / 2), ("max", p)):
        inputs = [torch.full((2,), float((r + 1) * (i + 1))) for i in range(p)]
        out = torch.zeros(2)
        comm.reduce_scatter(out, inputs, op)
        assert torch.allclose(out, torch.full((2,), (r + 1) * float(total))), (op, out)


def check_scatter_and_reduce_scatter_of_strided_tensors(comm):
    """Columns of a matrix. The torch engine gave rank r the elements after its column's start
    in memory (Gloo writes a buffer's memory in order, whatever its strides), with no error; it
    now stages them. The mpi engine stages a list and refuses a strided output tensor."""
    p, r = comm.world_size, comm.rank
    columns = list(torch.arange(3.0 * p).reshape(3, p).t())  # column i holds i, i + p, i + 2p
    got = torch.zeros(3)
    comm.scatter(got, columns if r == 0 else None, src=0)
    assert torch.equal(got, torch.arange(3.0) * p + r), got
    inputs = [torch.full((3,), float(i + r)) for i in range(p)]  # block i: i + r
    grid = torch.zeros(3, 2)
    if type(comm).__name__ == "MpiCommunicator":
        with pytest.raises(ValueError, match="contiguous"):
            comm.reduce_scatter(grid[:, 0], inputs, "sum")
        return
    comm.reduce_scatter(grid[:, 0], inputs, "avg")
    assert torch.equal(grid[:, 0], torch.full((3,), r + (p - 1) / 2)) and not grid[:, 1].any()
    comm.scatter(grid[:, 1], columns if r == 0 else None, src=0)
    assert torch.equal(grid[:, 1], torch.arange(3.0) * p + r), grid


def check_boolean_reductions_are_logical(comm):
    """sum and max are OR, min is AND, on both engines (MPI's sum on C_BOOL was an error that
    ended the job)."""
    for op, want in (("sum", [True, True, False]), ("max", [True, True, False]),
                     ("min", [True, False, False])):
        t = torch.tensor([True, comm.rank == 0, False])
        comm.all_reduce(t, op)
        assert t.tolist() == want, (op, t)


def check_barrier_waits_for_the_last_rank(comm):
    """No rank leaves the barrier before rank 0, which enters it 0.3 s late, has entered it."""
    if comm.rank == 0:
        time.sleep(0.3)
    entered = time.time()
    comm.barrier()
    left = time.time()
    stamps = [torch.zeros(2, dtype=torch.float64) for _ in range(comm.world_size)]
    comm.all_gather(stamps, torch.tensor([entered, left], dtype=torch.float64))
    assert all(s[1] >= stamps[0][0] for s in stamps)


def check_new_group_renumbers_ranks(comm):
    members = list(range(1, comm.world_size))  # every rank but 0
    group = comm.new_group(members)
    if comm.rank == 0:
        assert group is None
        return
    try:
        assert group.rank == comm.rank - 1 and group.world_size == len(members)
        t = torch.tensor([float(comm.rank)])
        group.all_reduce(t)
        assert t.item() == sum(members)
        got = torch.zeros(1)
        if group.rank == 0:
            group.send(torch.tensor([42.0]), 1)
        elif group.rank == 1:
            assert group.recv(got, 0) == 0 and got.item() == 42.0
        t = torch.tensor([float(comm.rank)])
        group.broadcast(t, src=group.world_size - 1)
        assert t.item() == float(members[-1])  # the group's last rank is the world's last member
    finally:
        group.close()


def closing_the_world_closes_its_groups(engine: str) -> list[bool]:
    """A group left open is closed with the communicator it was made from: (before, after)."""
    world = init(engine, timeout_s=30)
    group = world.new_group([0])
    if group is not None:
        group.all_reduce(torch.ones(1))
    before = group is not None and group.closed
    world.close()
    return [before, world.closed and (group is None or group.closed)]


@pytest.mark.parametrize("engine", ENGINES)
def test_closing_a_communicator_closes_the_groups_made_from_it(engine):
    launcher = "mpi" if engine == "mpi" else "gloo"
    assert run_function(closing_the_world_closes_its_groups, 2, engine,
                        launcher=launcher) == [[False, True], [False, True]]


def check_mismatched_sizes_raise_on_every_rank(comm):
    t = torch.ones(10 + comm.rank)
    with pytest.raises(CommError, match="disagree.*rank 0 called all_reduce with 10 x float32"):
        comm.all_reduce(t)
    t = torch.ones(4)
    comm.all_reduce(t)  # the communicator is still usable afterwards
    assert torch.equal(t, full(comm.world_size))


def check_ring_all_reduce_with_mismatched_sizes_raises(comm):
    with pytest.raises(CommError, match="rank 1 called ring_all_reduce with 8 x float32"):
        ring_all_reduce(comm, torch.ones(7 + comm.rank))


def check_different_operations_raise(comm):
    t = torch.ones(4)
    with pytest.raises(CommError, match="disagree"):
        if comm.rank == 0:
            comm.broadcast(t, 0)
        else:
            comm.all_reduce(t)


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}


def operation_battery(engine: str) -> dict[str, str | None]:
    """Runs in every rank: each check's failure message, or None if it held."""
    comm = init(engine, timeout_s=30)
    outcome = {}
    try:
        for name, check in CHECKS.items():
            try:
                check(comm)
                outcome[name] = None
            except Exception as error:  # keep going: every check gets its own verdict
                outcome[name] = f"rank {comm.rank}: {type(error).__name__}: {error}"
            comm.barrier()
    finally:
        comm.close()
    return outcome


@pytest.fixture(scope="module", params=ENGINES)
def battery(request):
    launcher = "mpi" if request.param == "mpi" else "gloo"
    return request.param, run_function(operation_battery, WORLD, request.param, launcher=launcher)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_operation_gives_defined_values_on_three_ranks(battery, check):
    engine, outcomes = battery
    failures = [o[check] for o in outcomes if o[check] is not None]
    assert not failures, f"{engine}: " + "; ".join(failures)


def test_single_process_torch_communicator_works_without_a_launcher():
    from real.comm_torch import gpus_here
    comm = init("torch", timeout_s=5)  # NCCL where this one process has a GPU, else Gloo
    try:
        assert (comm.rank, comm.world_size, comm.backend) == (0, 1,
                                                              "nccl" if gpus_here() else "gloo")
        t = torch.arange(4.0, device=comm.device)
        comm.all_reduce(t, "avg")
        assert torch.equal(t.cpu(), torch.arange(4.0))
    finally:
        comm.close()


def test_init_rejects_unknown_engine_backend_and_timeout():
    with pytest.raises(ValueError, match="'tcp'"):
        init("tcp")
    with pytest.raises(ValueError, match="'ucc'"):
        init("torch", backend="ucc")
    with pytest.raises(ValueError, match="-1"):
        init("torch", timeout_s=-1)
    with pytest.raises(ValueError, match="at most"):
        init("torch", timeout_s=1e300)



def test_nccl_needs_a_gpu_for_each_process_of_the_node(monkeypatch):
    # A node with one GPU running two processes: NCCL cannot give each its own device.
    import real.comm_torch as comm_torch
    monkeypatch.setattr(comm_torch, "gpus_here", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"a GPU for each process: this node runs 2 .* sees 1"):
        init("torch", backend="nccl", timeout_s=5)
    comm = init("torch", timeout_s=5)  # the default backend falls back to Gloo there
    try:
        assert comm.backend == "gloo" and comm.device == torch.device("cpu")
    finally:
        comm.close()


def test_a_program_of_cpu_tensors_offers_no_nccl_and_runs_gloo_beside_gpus(monkeypatch, capsys):
    # The demos and the probes keep their tensors on the CPU: on a node with a GPU for every
    # process, their default is still Gloo, and --backend nccl is refused while parsing.
    import argparse
    import real.comm_torch as comm_torch
    from real.comm_cli import add_comm_arguments, open_comm
    monkeypatch.setattr(comm_torch, "gpus_here", lambda: 8)
    parser = argparse.ArgumentParser(prog="demo")
    add_comm_arguments(parser, gpu=False)
    with open_comm(parser, parser.parse_args(["--timeout", "5s"])) as comm:
        assert comm.backend == "gloo"
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--backend", "nccl"])
    assert exit_.value.code == 2 and "invalid choice: 'nccl'" in capsys.readouterr().err

# -- failures: a dead or stuck peer ---------------------------------------------------------------
PEER_SCRIPT = """
import os, sys, time, torch
from real.allreduce import ring_all_reduce
from real.comm import CommError, init
comm = init("auto", timeout_s=3)
try:
    if comm.rank == 1:
        if sys.argv[1] == "dies":
            os._exit(7)
        time.sleep(8)  # stuck: alive, but joins the all-reduce long after the 3 s timeout
        print("rank 1 woke up", flush=True)
    start = time.monotonic()
    comm.all_reduce(torch.ones(8))
    print("all_reduce returned")
except CommError as error:
    print(f"rank {comm.rank} CommError after {time.monotonic() - start:.1f} s: {error}", flush=True)
    sys.exit(1)
finally:
    comm.close()
"""


def seconds_to_error(output: str) -> float:
    return float(re.search(r"rank 0 CommError after ([0-9.]+) s", output).group(1))


@pytest.fixture(scope="module")
def peer_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("peer") / "peer.py"
    path.write_text(PEER_SCRIPT)
    return str(path)


@pytest.mark.parametrize("behaviour", ["dies", "hangs"])
def test_dead_or_stuck_gloo_peer_gives_clear_error_within_timeout(peer_script, behaviour):
    run = run_script([peer_script, behaviour], 2, launcher="gloo", timeout_s=60)
    assert not run.timed_out and run.returncode != 0
    assert "rank 0 CommError" in run.stdout and "all_reduce" in run.stdout
    assert "all_reduce returned" not in run.stdout
    assert seconds_to_error(run.stdout) < 7, "the 3 s timeout did not bound the wait"


WAIT_ANY_SCRIPT = """
import os, signal, time, torch
from real.comm import CommError, init
comm = init("torch", timeout_s=10)
if comm.rank == 2:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
if comm.rank == 1:
    comm.recv(torch.zeros(1), 0, tag=3)
    comm.send(torch.full((4,), 1.0), 0)
    time.sleep(1.0)  # rank 0 is closing by now, with a watched receive of this pending
    comm.send(torch.full((4,), 5.0), 0, tag=4)
if comm.rank == 0:
    got = {1: torch.zeros(4), 2: torch.zeros(4)}
    works = [comm.irecv(got[1], 1), comm.irecv(got[2], 2)]
    first = comm.wait_any(works)
    try:
        works[first].wait()
        print(f"index {first} finished without error")
    except CommError:
        print(f"index {first} failed")
    try:
        comm.irecv(got[2], 2)
    except CommError:
        print("a receive from the dead rank fails as it is posted")
    comm.send(torch.zeros(1), 1, tag=3)
    second = comm.wait_any([works[0]])
    works[second].wait()
    print(f"then rank 1 sent {got[1].tolist()}", flush=True)
    last = comm.irecv(got[1], 1, tag=4)
    last.watch()
    comm.close()
    print(f"closed after the watcher: {not last.watcher.is_alive()}, it got "
          f"{got[1].tolist()}", flush=True)
else:
    comm.close()
"""


def test_a_dead_peer_fails_only_its_own_receive(tmp_path):
    """The parameter server's case: one receive posted per worker, and a worker dies. Its
    receive fails at once; the other worker's still completes. (With one receive from any
    rank, a worker that announced a message and died would fail every later one: Gloo
    matches the receive to it.)"""
    path = tmp_path / "wait_any.py"
    path.write_text(WAIT_ANY_SCRIPT)
    run = run_script([str(path)], 3, launcher="gloo", timeout_s=60)
    assert not run.timed_out, run.stderr
    assert "index 1 failed" in run.stdout, run.stdout + run.stderr
    assert "a receive from the dead rank fails as it is posted" in run.stdout, run.stderr
    assert "then rank 1 sent [1.0, 1.0, 1.0, 1.0]" in run.stdout, run.stdout + run.stderr
    # a watcher still inside Gloo at exit would abort the process: close() lets it finish
    assert "closed after the watcher: True, it got [5.0, 5.0, 5.0, 5.0]" in run.stdout, run.stderr


@needs_mpi
def test_stuck_mpi_peer_aborts_the_job_with_a_message(peer_script):
    run = run_script([peer_script, "hangs"], 2, launcher="mpi", timeout_s=60)
    assert not run.timed_out and run.returncode != 0
    assert "did not complete within 3 s" in run.stderr and "all_reduce" in run.stderr
    assert "rank 1 woke up" not in run.stdout, "the job outlived the stuck rank's sleep"


@needs_mpi
def test_dead_mpi_peer_ends_the_job(peer_script):
    run = run_script([peer_script, "dies"], 2, launcher="mpi", timeout_s=60)
    assert not run.timed_out and run.returncode != 0
    assert "all_reduce returned" not in run.stdout


UNFORESEEN_ERROR_SCRIPT = """
import torch
from real.comm import init
with init("mpi", timeout_s=120) as comm:
    if comm.rank == 0:
        raise RuntimeError("an error no caller handles")
    comm.all_reduce(torch.ones(4))  # rank 0 never comes
    print("all_reduce returned")
"""


@needs_mpi
def test_an_mpi_rank_failing_on_an_unhandled_error_ends_the_job_not_the_timeout(tmp_path):
    # an exiting rank does not end the job while its MPI_Finalize waits for the others: without
    # the abort after the traceback, rank 1 would wait out its 120 s timeout
    script = tmp_path / "unforeseen.py"
    script.write_text(UNFORESEEN_ERROR_SCRIPT)
    run = run_script([str(script)], 2, launcher="mpi", timeout_s=40)
    assert not run.timed_out and run.returncode != 0
    assert "RuntimeError: an error no caller handles" in run.stderr  # its traceback, as before
    assert "rank 0: RuntimeError; aborting the MPI job" in run.stderr
    assert "all_reduce returned" not in run.stdout


# -- the demos run under both launchers ---------------------------------------------------------------
DEMOS = [  # (demo, launcher, a line its output must contain); engines alternate to keep this short
    ("point_to_point", "mpi", "rank 1: [0.0, 100.0]"),
    ("collectives", "gloo", "reduce_scatter(sum)"),
    ("groups", "mpi", "rank 1: [0.0, 1.0, 1.0]"),
    ("ring_allreduce", "gloo", "rank 1: [100, 102, 104, 106, 108, 110, 112]"),
]


@pytest.mark.parametrize("demo,launcher,line", [
    pytest.param(*d, marks=needs_mpi) if d[1] == "mpi" else d for d in DEMOS])
def test_demo_prints_what_each_rank_holds(demo, launcher, line):
    run = run_script([f"real/demos/{demo}.py"], 2, launcher=launcher, timeout_s=90)
    assert run.returncode == 0, run.stderr
    assert line in run.stdout, run.stdout


@pytest.mark.parametrize("argv", [
    ["real/demos/collectives.py"],
    ["experiments/ring_probe.py", "--sizes", "64B,4KiB", "--repeats", "2", "--json", "{out}"]])
def test_a_demo_or_probe_whose_stdout_reader_goes_finishes_without_a_traceback(argv, tmp_path):
    # rank 0's first line meets the closed pipe; a rank that failed for it would end the job,
    # and the probe's JSON, written after its printing, would be lost
    out = tmp_path / "probe.json"
    run = run_script([a.replace("{out}", str(out)) for a in argv], 2, timeout_s=90,
                     closed_stdout=True)
    assert not run.timed_out and run.returncode == 0, run.stderr
    assert run.stderr == ""  # the reader chose to go: nothing to say
    if "--json" in argv:
        assert json.loads(out.read_text())["world_size"] == 2


# -- a launcher and a backend that do not go together --------------------------------------------
@needs_mpi
@pytest.mark.parametrize("backend, launcher, says", [
    ("gloo", "mpi", "mpiexec started 2 processes, but backend gloo"),
    ("mpi", "gloo", "one of 2 ranks, but backend mpi joins the job mpiexec started"),
])
def test_a_backend_its_launcher_cannot_run_is_refused_not_run_as_one_rank_jobs(backend, launcher,
                                                                                says):
    run = run_script(["real/demos/groups.py", "--backend", backend], 2, launcher=launcher,
                     timeout_s=60)
    assert not run.timed_out and run.returncode == 2, run.stdout + run.stderr
    assert says in run.stderr
    assert "rank 1: [0.0, 1.0, 1.0]" not in run.stdout  # no job of its own ran


# -- bad input is said once per job, not once per rank -------------------------------------------
BAD_INPUTS = [  # (arguments, what the one line says); {missing}: a file in a folder that is not there
    (["real/async_ps.py", "--updates", "-3"], "--updates must be at least 0"),
    (["real/async_ps.py", "--updates", "5", "--warmup-updates", "9"], "leaves a round or less"),
    (["real/async_ps.py", "--updates", "5", "--json", "{missing}"], "cannot write into"),
    (["real/allreduce.py", "--sizes", "3XB"], "needs a unit"),
    (["real/allreduce.py", "--sizes", "4KB", "--trace", "{missing}"], "cannot write into"),
    (["real/demos/groups.py", "--bogus"], "unrecognized arguments: --bogus"),
    (["experiments/ring_probe.py", "--sizes", "64B", "--json", "{missing}"], "cannot write into"),
    (["real/sync.py", "--steps", "2", "--json", "{missing}"], "cannot write into"),
    (["real/demos/groups.py", "--timeout", "0s"], "--timeout must be positive"),
]


@pytest.mark.parametrize("launcher", [pytest.param("mpi", marks=needs_mpi), "torchrun"])
@pytest.mark.parametrize("argv, says", BAD_INPUTS)
def test_bad_input_is_one_line_from_the_whole_job(argv, says, launcher, tmp_path):
    # Under mpiexec every rank exits 2; torchrun reports a failed rank with its own status, 1.
    missing = str(tmp_path / "not-there" / "out.json")
    run = run_script([a.format(missing=missing) for a in argv], 3, launcher=launcher,
                     timeout_s=90)
    assert not run.timed_out and run.returncode == (2 if launcher == "mpi" else 1), run.stderr
    assert run.stderr.count("error:") == 1 and says in run.stderr, run.stderr


@pytest.mark.parametrize("argv, says", [case for case in BAD_INPUTS if "{missing}" in case[0]])
def test_an_output_rank_0_cannot_write_ends_a_plain_launch_at_once(argv, says, tmp_path):
    # Each rank started by hand (RANK, WORLD_SIZE ...), as the test bed starts them: no launcher
    # stops the others when rank 0 leaves, so rank 0 must check after they have joined, or they
    # would wait out the rendezvous timeout (here 60 s) and each say it could not join.
    missing = str(tmp_path / "not-there" / "out.json")
    started = time.monotonic()
    run = run_script([a.format(missing=missing) for a in argv] + ["--timeout", "60s"], 3,
                     timeout_s=90)
    assert not run.timed_out and run.returncode == 2, run.stderr
    assert run.stderr.count("error:") == 1 and says in run.stderr, run.stderr
    assert time.monotonic() - started < 45  # a bound, not a timing target: not the timeout


@pytest.mark.parametrize("argv, env, says, status", [
    (["real/sync.py", "--steps", "2"], {"LOCAL_RANK": "x"}, "LOCAL_RANK='x' is not a whole number",
     2),
    # torch's store said only "invalid literal for int() with base 10: 'abc'"
    (["real/allreduce.py", "--iters", "1"], {"MASTER_PORT": "abc"},
     "MASTER_PORT='abc' is not a whole number", 2),
    (["real/sync.py", "--steps", "2"], {"MASTER_PORT": "70000"},
     "MASTER_PORT=70000 is no TCP port (1 to 65535)", 2),
    (["real/sync.py", "--steps", "2", "--timeout", "1s"], {}, "could not join", 1),  # no rank 0
    (["real/demos/collectives.py", "--timeout", "1s"], {}, "could not join", 1),  # open_comm's
    pytest.param(["real/allreduce.py", "--backend", "nccl"], {}, "backend nccl needs a CUDA GPU",
                 2, marks=pytest.mark.skipif(torch.cuda.is_available(),
                                             reason="the case is a node without a CUDA GPU")),
])
def test_a_fault_of_one_node_is_said_by_its_own_rank(argv, env, says, status):
    # Rank 2 of 3 alone, as on a node of its own: it must say what stops it (rank 0, elsewhere,
    # would only see it never join), not stay quiet as ranks other than 0 do about bad flags.
    env = {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "1", **env}
    run = subprocess.run([sys.executable, *argv], cwd=REPO, env={**child_env(), **env},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == status, run.stderr
    lines = run.stderr.strip().splitlines()  # one line: not torch's C++ log with its stack frames
    assert len(lines) == 1 and "error: rank 2: " in lines[0] and says in lines[0], run.stderr


def test_a_rank_names_itself_once_in_its_own_error(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert own_error(CommError("could not join")) == "rank 3: could not join"
    assert own_error(CommError("rank 3: recv failed")) == "rank 3: recv failed"
    monkeypatch.setenv("RANK", "0")
    assert own_error(CommError("could not join")) == "could not join"


def env_without_torchrun_variables() -> dict[str, str]:
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    return {k: v for k, v in child_env().items() if k not in names}


@pytest.mark.parametrize("env, says", [
    ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5 must be from 0 to WORLD_SIZE - 1 = 1"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
    ({"RANK": "0", "WORLD_SIZE": "-3"}, "WORLD_SIZE=-3 must be at least 1"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"},
     "LOCAL_RANK=3 must be from 0"),
    # once trained alone as a job of one, exit 0
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not"),
])
def test_launcher_variables_that_describe_no_rank_are_refused_at_once(env, says):
    base = env_without_torchrun_variables()
    run = subprocess.run([sys.executable, "real/allreduce.py", "--sizes", "4KB"], cwd=REPO,
                         env={**base, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", **env},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], run.stderr


@needs_mpi
@pytest.mark.parametrize("env, says", [
    # once trained alone as "rank 5", exit 0
    ({"PMI_RANK": "5", "PMI_SIZE": "2"}, "mpiexec's variables say 2 processes"),
    # once six lines of MPICH's abort, exit 16
    ({"PMI_RANK": "0", "PMI_SIZE": "abc"}, "PMI_SIZE='abc' is not a whole number"),
])
def test_mpiexec_variables_set_by_hand_are_refused_in_one_line(env, says):
    base = env_without_torchrun_variables()
    run = subprocess.run([sys.executable, "real/allreduce.py", "--backend", "mpi", "--sizes",
                          "4KB"], cwd=REPO, env={**base, **env}, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], run.stderr


def test_a_store_that_takes_the_connection_and_never_answers_ends_the_join():
    # torch's store client once waited for ever here, whatever --timeout said
    import socket
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = {**child_env(), "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(silent.getsockname()[1])}
        started = time.monotonic()
        run = subprocess.run([sys.executable, "real/allreduce.py", "--sizes", "4KB",
                              "--timeout", "1s"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 1: could not join" in lines[0], run.stderr
    assert "no answer from the store at 127.0.0.1" in lines[0]
    assert time.monotonic() - started < 45  # a bound, not a timing target: not for ever


def test_a_line_is_written_whole_to_a_file_or_to_a_stream_without_one(tmp_path, capsys):
    import io
    from real.local_launch import say
    stream = io.StringIO()  # no file behind it: fileno() raises io.UnsupportedOperation
    say("rank 1: done", stream)
    assert stream.getvalue() == "rank 1: done\n"
    with open(tmp_path / "out.txt", "w") as handle:  # a file: one os.write of the whole line
        handle.write("first\n")
        say("second", handle)
    assert (tmp_path / "out.txt").read_text() == "first\nsecond\n"


HANDLED_ERROR_SCRIPT = """
import sys
from real.comm import init
try:
    with init("mpi", timeout_s=120) as comm:
        raise ValueError("handled by the caller")
except ValueError as error:
    print(f"rank {comm.rank} handled it", flush=True)
    sys.exit(2)
"""


@needs_mpi
def test_an_mpi_error_the_caller_handles_ends_as_the_caller_says(tmp_path):
    script = tmp_path / "handled.py"
    script.write_text(HANDLED_ERROR_SCRIPT)
    run = run_script([str(script)], 2, launcher="mpi", timeout_s=60)
    assert not run.timed_out and run.returncode == 2
    assert "aborting" not in run.stderr and "Traceback" not in run.stderr
    assert "rank 0 handled it" in run.stdout and "rank 1 handled it" in run.stdout
