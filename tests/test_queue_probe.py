"""experiments/queue_probe.py: its flags, the summary of its round trips, and the queue behind a
long message on a 3-host bed; the model's use of it."""

import pytest

from experiments import queue_probe
from experiments.measure import (QUEUE_PROBE_BYTES, measure_queue, queue_probe_bytes,
                                 summarize_queue)
from experiments.model import NetworkInputs
from real.testbed.config import TestbedConfig
from real.testbed.network import TestbedError
from tests.bed_helpers import needs_namespaces
from tests.cli_helpers import usage_error


@pytest.mark.parametrize("flags, named", [
    (["--bytes", "0B"], "got 0"), (["--bytes", "1GB"], "1000000000"),
    (["--bytes", "1000"], "'1000'"), (["--idle", "-1s"], "'-1s'"), (["--port", "65535"], "65535"),
    (["--repeats", "0"], "got 5302, 0"), (["--timeout", "0s"], "0 s"),
])
def test_bad_flags_are_one_line_and_status_2(tmp_path, capsys, flags, named):
    argv = ["--json", str(tmp_path / "q.json")] + flags
    assert named in usage_error(queue_probe.main, argv, capsys)


@pytest.mark.parametrize("host_rank", [None, "x", "²", "-1", "3"])
def test_outside_a_test_bed_it_says_where_it_runs(tmp_path, monkeypatch, host_rank):
    if host_rank is None:
        monkeypatch.delenv("HOST_RANK", raising=False)
    else:
        monkeypatch.setenv("HOST_RANK", host_rank)
    with pytest.raises(SystemExit, match="runs on the hosts 0, 1 and 2 of a test bed"):
        queue_probe.main(["--json", str(tmp_path / "q.json")])


def test_the_summary_counts_the_round_trips_inside_the_window_less_the_idle_ones():
    repeat = {"transfer_s": 0.1, "idle_rtt_s": [0.001, 0.002, 0.003],
              "loaded": [[0.0, 0.004],    # before a tenth of the message: TCP still ramping
                         [0.02, 0.008], [0.05, 0.009], [0.07, 0.010],
                         [0.09, 0.003]]}  # in the last fifth: the queue drains
    summary = summarize_queue({"bytes": 1_000_000, "repeats": [repeat]})
    assert summary["count"] == 3
    assert summary["behind_bulk_s"] == pytest.approx(0.007)  # 9 ms less the idle 2 ms
    assert summary["p10_s"] <= 0.007 <= summary["p90_s"]


def test_a_summary_with_no_round_trip_in_the_window_is_an_error():
    repeat = {"transfer_s": 0.1, "idle_rtt_s": [0.001], "loaded": [[0.0, 0.05]]}
    with pytest.raises(TestbedError, match="no round trip fell within"):
        summarize_queue({"bytes": 1_000_000, "repeats": [repeat]})


def test_the_long_message_lasts_at_least_forty_milliseconds_at_the_rate():
    assert queue_probe_bytes(50e6) == queue_probe_bytes(200e6) == QUEUE_PROBE_BYTES
    assert queue_probe_bytes(1e9) == 5_000_000


def test_the_model_reads_the_queue_and_takes_none_from_a_calibration_without_it():
    record = {"bandwidth_bps": 2e8, "goodput_bps": 1.9e8,
              "gloo": {"latency_s": 6e-5, "all_reduce_1_element_s": {"median": 1.6e-4}}}
    assert NetworkInputs.from_calibration(record).notice_queue_s == 0.0
    record["queue"] = {"behind_bulk_s": 0.0056}
    assert NetworkInputs.from_calibration(record).notice_queue_s == 0.0056


@needs_namespaces
def test_a_small_message_waits_behind_a_long_one_within_the_shapers_queue():
    config = TestbedConfig(hosts=3, bandwidth_bps=200e6)
    summary = measure_queue(config, repeats=2)
    assert summary["count"] >= 4 and summary["bytes"] == QUEUE_PROBE_BYTES
    # a bound, not a timing: the wait is positive (the message is queued behind bytes) and no
    # longer than the shaper lets its queue grow
    assert 0 < summary["behind_bulk_s"] <= config.queue_s
    assert len(summary["transfer_s"]) == 2
