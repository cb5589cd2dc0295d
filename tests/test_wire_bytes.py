"""experiments/wire_bytes.py: the bytes a stream's cycle sends, their fit, its CLI, a run on a bed;
and experiments.model.wire_messages, the messages it fits them against."""

import json

import pytest

from experiments.model import wire_messages
from experiments.wire_bytes import fit_overheads, main, per_call, trace_period_s
from tests.bed_helpers import needs_namespaces
from tests.cli_helpers import usage_error


@pytest.mark.parametrize("algorithm, hosts, n_bytes, messages", [
    ("naive", 2, 64_000, 1), ("naive", 8, 16_000_000, 7),        # one a round, whatever the size
    ("ring", 2, 64_000, 2), ("ring", 4, 64_000, 6),              # one a round: 2(p - 1)
    ("ring", 2, 16_000_000, 4),    # 8 MB chunks in 4 MiB segments: two a round
    ("backend", 2, 64_000, 4),     # Gloo: 2 segments per rank, 2 phases of S - S/p = 2
    ("backend", 8, 64_000, 28),    # 16 segments, 14 a phase
    ("backend", 2, 16_000_000, 16),  # 16 segments of at most 1 MiB: 8 a phase
    ("backend", 4, 16_000_000, 24),  # 16 segments, 12 a phase
    ("ring", 2, 8 * 2**20 + 4, 3),  # chunks of 4 MiB + 4 B and 4 MiB: 2 pieces and 1, 3 hops each
    ("ring", 4, 8, 3),             # 2 elements: two chunks of one, two empty; 6 hops of 2 over 4
    ("backend", 2, 8, 2),          # 4 segments of 4 B, 2 holding data, each 1 hop a phase
    ("ring", 1, 64_000, 0), ("naive", 2, 0, 0),
])
def test_wire_messages_counts_each_algorithms_sends_a_call(algorithm, hosts, n_bytes, messages):
    assert wire_messages(algorithm, hosts, n_bytes) == messages


def test_wire_messages_refuses_an_unknown_algorithm():
    with pytest.raises(ValueError, match="unknown all-reduce algorithm 'tree'"):
        wire_messages("tree", 2, 64_000)


def test_per_call_is_the_second_launchs_extra_counts_per_call_averaged_over_the_hosts():
    short = [{"sent_bytes": 1_000, "sent_packets": 10}, {"sent_bytes": 2_000, "sent_packets": 20}]
    long = [{"sent_bytes": 21_000, "sent_packets": 30}, {"sent_bytes": 26_000, "sent_packets": 60}]
    # (2000 + 2400) / 2 bytes and (2 + 4) / 2 packets a call
    assert per_call(short, long, 10) == pytest.approx((2_200.0, 3.0))
    with pytest.raises(ValueError):
        per_call(short, long[:1], 10)
    with pytest.raises(ValueError):
        per_call(short, long, 0)


def test_trace_period_is_the_median_start_to_start_on_rank_0s_track():
    events = [{"ph": "M", "tid": 0}] + [
        {"ph": "X", "tid": rank, "ts": ts, "dur": 5} for rank, ts in
        ((0, 0), (0, 100), (0, 300), (0, 400), (1, 7), (1, 900))]
    assert trace_period_s(events) == pytest.approx(100e-6)  # 100, 200, 100
    with pytest.raises(ValueError, match="two calls"):
        trace_period_s(events[:2])


def test_fit_recovers_what_a_message_and_a_cycle_cost_and_refuses_what_cannot_tell_them_apart():
    def row(payload, messages):
        return {"payload_bytes": payload, "messages": messages,
                "cycle_bytes": 460 + 1.048 * payload + 315 * messages}
    rows = [row(p, m) for p in (64_000, 256_000) for m in (1, 2, 4)]
    fit = fit_overheads(rows)
    assert fit["per_message_bytes"] == pytest.approx(315)
    assert fit["per_call_bytes"] == pytest.approx(460)
    assert fit["per_payload_byte"] == pytest.approx(1.048)
    assert fit["largest_residual_bytes"] == pytest.approx(0, abs=1e-6)
    with pytest.raises(ValueError, match="two sizes"):  # one size: a cycle's bytes or its payload's?
        fit_overheads([row(64_000, m) for m in (1, 2, 4)])
    with pytest.raises(ValueError, match="at least 3"):
        fit_overheads(rows[:2])


@pytest.mark.parametrize("argv, named", [
    (["--hosts", "1"], "--hosts"),
    (["--bandwidth", "fast"], "bandwidth"),
    (["--bandwidth", "0bps"], "'0bps': bandwidth must be a finite rate of at least 1 bit/s"),
    (["--bandwidth", "4bps"], "'4bps': a link rate must be at least 8 bit/s"),
    (["--sizes", "6B"], "multiples of 4"),
    (["--sizes", "1e15B"], "multiples of 4"),
    (["--sizes", "64KB,x"], "x"),
    (["--algorithms", "ring,tree"], "tree"),
    (["--algorithms", "ring,ring"], "at most once"),
    (["--iters", "0"], "--iters"),
    (["--iters", "1000000"], "1000000 and"),
    (["--seed", "-1"], "and -1"),
    (["--json", "/nonexistent-folder/w.json"], "--json"),
])
def test_bad_arguments_are_one_line_and_status_2(argv, named, capsys):
    assert named in usage_error(main, argv, capsys)


def test_a_failing_launch_is_one_line_and_status_1(monkeypatch, capsys):
    from experiments import wire_bytes
    from real.testbed import TestbedError

    def failing(args):
        raise TestbedError("the benchmark (ring, 64 KB) failed: no route to host")

    monkeypatch.setattr(wire_bytes, "measure_rows", failing)
    assert main([]) == 1
    assert capsys.readouterr().err == \
        "wire_bytes: the benchmark (ring, 64 KB) failed: no route to host\n"


@needs_namespaces
def test_on_a_bed_each_cycle_sends_more_than_its_payload_and_gloos_calls_the_most(tmp_path, capsys):
    out = tmp_path / "wire.json"
    assert main(["--hosts", "2", "--bandwidth", "200Mbps", "--sizes", "64KB",
                 "--algorithms", "naive,backend", "--iters", "20", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    rows = {r["algorithm"]: r for r in record["rows"]}
    for row in rows.values():
        # the payload in full frames (1448 B of 1514) is the least a cycle can send
        assert row["cycle_bytes"] > row["payload_bytes"] * 1514 / 1448
        assert row["period_s"] > 0 and row["call_s"] > 0
    # Gloo's call sends 4 messages to the naive ring's 1, each with a header, a notice back and
    # a partial frame: hundreds of bytes more a cycle
    assert rows["backend"]["cycle_bytes"] > rows["naive"]["cycle_bytes"] + 300
    assert record["fit"] is None  # one size cannot part a cycle's bytes from its payload's
    assert "no fit:" in capsys.readouterr().out


# -- the model's optional charge for them, and the ablation's model with it --------------------

def test_a_paced_streams_cycle_pays_its_extra_bytes_the_barriers_in_the_gap():
    from experiments.model import stream_rotation_s
    rate_Bps, bucket, gap = 25e6, 24_000, 0.2e-3
    alone, sent = [1e-3], [64_000]  # 2.56 ms of payload at the rate: paced
    drained = [lambda tokens: 0.0]
    plain, = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained)
    # the gap refills 5 kB; the call pays the rest of its payload at the rate
    assert plain == pytest.approx([(64_000 - 5_000) / rate_Bps], rel=1e-12)
    assert stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained,
                             extra_bytes=[(0.0, 0.0)]) == [plain]
    charged, = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained,
                                 extra_bytes=[(500, 1_000)])
    # 1.5 kB more a cycle: 60 us more a call
    assert charged == pytest.approx([(64_000 + 1_500 - 5_000) / rate_Bps], rel=1e-12)
    owing, = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained,
                               extra_bytes=[(0, 8_000)])  # more than the gap refilled
    assert owing == pytest.approx([(64_000 + 8_000 - 5_000) / rate_Bps], rel=1e-12)
    for bad in ([(-1.0, 0.0)], [(1.0, 2.0), (1.0, 2.0)], [(1.0,)]):
        with pytest.raises(ValueError, match="one \\(barrier, call\\) pair of at least 0 bytes"):
            stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, drained, extra_bytes=bad)


def test_a_full_bucket_refills_the_barriers_bytes_but_not_the_calls():
    from experiments.model import stream_rotation_s
    rate_Bps, bucket, gap = 125e6, 125_000, 0.2e-3
    alone, sent = [1e-3], [50_000]  # a light call: 0.4 ms of bytes, the bucket holds them
    # the bucket is full after every gap: the barrier's 2 kB come back before the call starts;
    # the call's 1 kB do not, but 74 kB are left, so no call waits
    barrier, = stream_rotation_s(alone, sent, gap, rate_Bps * 8, bucket, extra_bytes=[(2_000, 0)])
    assert barrier == pytest.approx([1e-3])
    # a call that owes tokens pays them at the rate, and what its rounds refill goes first to
    # the debt: from a full 10 kB bucket the call owes 5 kB, waits for 6 kB, and its rounds'
    # 3 kB leave nothing (not 3 kB); the next starts 15 kB short and waits for 16 kB
    refills = [lambda tokens: tokens + 3_000]
    owed = stream_rotation_s([1e-5], [1_000], 0.0, rate_Bps * 8, 10_000, refills,
                             extra_bytes=[(0, 15_000)])
    assert owed == [pytest.approx([16_000 / rate_Bps])]


def _stored_net():
    from dsgd_sim.argparse_oneline import read_json
    from experiments.ablation import RESULTS
    from experiments.model import NetworkInputs
    calibration = {c["bandwidth_bps"]: c for c in read_json(RESULTS / "calibration.json")}
    rounds = read_json(RESULTS / "allreduce.json")["rounds"]["H=2 200Mbps"]
    return NetworkInputs.from_calibration(calibration[200e6]).with_rounds(2, rounds)


def test_the_models_stream_charges_the_wires_bytes_only_where_its_inputs_have_them():
    import dataclasses
    from experiments.model import predict_allreduce_stream_s, predict_stream_rotation_s
    net = _stored_net()
    algorithms = ["ring", "naive", "backend"]
    assert net.wire_extra_bytes("backend", 2, 64_000) == (0.0, 0.0)  # the default: not charged
    wired = dataclasses.replace(net, message_wire_bytes=315.0, cycle_wire_bytes={2: 460.0})
    share = net.duplex_payload_bps / net.rate_bps
    assert wired.wire_extra_bytes("backend", 2, 64_000) == \
        pytest.approx((460 * share, 4 * 315 * share))
    assert wired.wire_extra_bytes("naive", 2, 64_000) == pytest.approx((460 * share, 315 * share))
    assert wired.wire_extra_bytes("naive", 4, 64_000) == \
        pytest.approx((0.0, 3 * 315 * share))  # no cycle's fit on 4 hosts
    # every call of the rotation costs more; the rotation at most the extras' time at the rate
    # (a call the bucket's tokens or its own rounds bound pays less of them)
    plain_turns = predict_stream_rotation_s(algorithms, 2, 64_000, net)
    charged_turns = predict_stream_rotation_s(algorithms, 2, 64_000, wired)
    rate_Bps = net.for_ring_of(2).duplex_payload_bps / 8
    extras_s = sum(sum(wired.for_ring_of(2).wire_extra_bytes(a, 2, 64_000))
                   for a in algorithms) / rate_Bps
    added = [c - p for cs, ps in zip(charged_turns, plain_turns) for c, p in zip(cs, ps)]
    assert all(a > 0 for a in added)
    assert 0 < sum(added) <= len(algorithms) * extras_s * (1 + 1e-9)
    # with the wire's inputs at zero, the model's own prices to the bit
    zeroed = dataclasses.replace(wired, message_wire_bytes=0.0, cycle_wire_bytes={2: 0.0})
    assert predict_allreduce_stream_s(algorithms, 2, 64_000, zeroed) == \
        predict_allreduce_stream_s(algorithms, 2, 64_000, net)


def _record(hosts, rate, message, cycle):
    return {"hosts": hosts, "bandwidth_bps": rate,
            "fit": {"per_message_bytes": message, "per_call_bytes": cycle}}


def test_wire_inputs_are_the_fits_means_by_rate_and_by_hosts_and_refuse_a_record_without_one():
    from experiments.ablation import wire_inputs
    message, cycle = wire_inputs([_record(2, 200e6, 300, 460), _record(2, 200e6, 320, 480),
                                  _record(4, 1e9, 360, 780)])
    assert message == pytest.approx({200e6: 310, 1e9: 360, None: (300 + 320 + 360) / 3})
    assert cycle == pytest.approx({2: 470, 4: 780})
    for bad in ([{"hosts": 2, "bandwidth_bps": 200e6, "fit": None}], [[]], []):
        with pytest.raises(ValueError):
            wire_inputs(bad)
    for record in (_record(1, 200e6, 300, 460), _record(2, 0, 300, 460),
                   _record(2, 200e6, float("nan"), 460), _record(2, 200e6, 300, "x")):
        with pytest.raises(ValueError, match="bed.json is not as experiments/wire_bytes.py"):
            wire_inputs([record], ["bed.json"])
    # a fit below zero (least squares over noisy counts) charges nothing
    assert wire_inputs([_record(2, 200e6, -3, -5)]) == ({200e6: 0.0, None: 0.0}, {2: 0.0})


def test_the_ablations_wire_model_needs_the_wires_counts_and_prices_every_row_with_them(
        tmp_path, capsys):
    from experiments.ablation import main as ablation
    assert "needs --wire FILE" in usage_error(
        ablation, ["--model", "rounds, the wire's bytes"], capsys)
    bad = tmp_path / "bad.json"
    bad.write_text('{"hosts": 2, "bandwidth_bps": 2e8, "fit": null}')
    assert "cannot read the wire's counts" in usage_error(ablation, ["--wire", str(bad)], capsys)
    for unreadable in (tmp_path / "missing.json", tmp_path / "bad"):
        if unreadable.name == "bad":
            unreadable.write_text("{not json")
        assert str(unreadable) in usage_error(ablation, ["--wire", str(unreadable)], capsys)
    wire = tmp_path / "wire.json"
    wire.write_text(json.dumps(_record(2, 200e6, 315, 460)))
    assert ablation(["--model", "rounds", "--wire", str(wire)]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert ablation(["--model", "rounds, the wire's bytes", "--wire", str(wire)]) == 0
    charged = capsys.readouterr().out.splitlines()
    assert len(plain) == len(charged) > 0

    def predicted(line):
        return float(line.split("predicted ")[1].split(" ms")[0])
    gloo = [(p, c) for p, c in zip(plain, charged) if p.startswith("backend 0.064MB H=2 200Mbps")]
    assert len(gloo) == 1 and predicted(gloo[0][1]) > predicted(gloo[0][0])
    # the table gains the wire's model only with its counts
    assert ablation(["--wire", str(wire)]) == 0
    assert "rounds, the wire's bytes median" in capsys.readouterr().out


def test_a_failed_runs_line_is_the_last_of_the_first_host_that_failed_on_its_own(tmp_path):
    from real.testbed.launch import HostResult, RunResult
    logs = []
    for rank, text in enumerate(["stopped\n", "Traceback\nRuntimeError: no route to host\n", ""]):
        logs.append(tmp_path / f"err{rank}")
        logs[-1].write_text(text)

    def host(rank, code, stopped=False):
        return HostResult(rank, f"10.0.0.{rank + 1}", code, 0.1, str(logs[rank]), str(logs[rank]),
                          stopped=stopped)
    stopped_first = RunResult("cmd", [host(0, -15, stopped=True), host(1, 1), host(2, 0)], 1.0)
    assert stopped_first.failure_line() == "RuntimeError: no route to host"
    # none failed on its own (a timeout stopped them all): host 0's, or a placeholder if silent
    assert RunResult("cmd", [host(0, -9, True), host(1, -9, True)], 1.0, timed_out=True) \
        .failure_line() == "stopped"
    silent = RunResult("cmd", [host(2, -9, True)], 1.0, timed_out=True)
    assert silent.failure_line() == "(no output)"
