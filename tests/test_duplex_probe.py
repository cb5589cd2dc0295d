"""experiments/duplex_probe.py: its flags, a failed send, and both directions on a 2-host bed."""

import socket

import pytest

from experiments import duplex_probe
from experiments.measure import measure_duplex
from real.testbed.config import TestbedConfig
from tests.bed_helpers import needs_namespaces
from tests.cli_helpers import usage_error


@pytest.mark.parametrize("flags, named", [
    (["--idle", "-1"], "-1.0"), (["--idle", "nan"], "nan"), (["--port", "70000"], "70000"),
    (["--port", "0"], "got 0,"), (["--repeats", "0"], "0 and"),
])
def test_bad_flags_are_one_line_and_status_2(tmp_path, capsys, flags, named):
    argv = ["--peer", "127.0.0.1", "--json", str(tmp_path / "d.json")] + flags
    assert named in usage_error(duplex_probe.main, argv, capsys)


def test_a_bad_host_rank_is_refused_before_any_transfer(tmp_path, monkeypatch):
    monkeypatch.setenv("HOST_RANK", "x")
    with pytest.raises(SystemExit, match=r"^duplex_probe: HOST_RANK='x' is not a whole number$"):
        duplex_probe.main(["--peer", "127.0.0.1", "--timeout", "1s",
                           "--json", str(tmp_path / "d.json")])
    assert not (tmp_path / "d.json").exists()


def test_a_failed_send_is_kept_for_the_main_thread_and_ends_the_peers_receive():
    ours, theirs = socket.socketpair()
    theirs.close()
    failed = []
    duplex_probe.send_all(ours, b"\0" * (1 << 22), failed)
    assert len(failed) == 1 and isinstance(failed[0], OSError)


@needs_namespaces
def test_both_directions_of_a_shaped_link_carry_at_most_its_rate():
    config = TestbedConfig(hosts=2, bandwidth_bps=50e6)
    record = measure_duplex(config, repeats=2, sizes=[200_000, 400_000])
    assert [t["bytes"] for t in record["transfers"]] == [200_000, 400_000]
    assert record["goodput_bps"] > 0
    # a bound, not a timing: in t seconds a shaper lets through its bucket and t at its rate
    bound_bytes = config.burst_for(config.bandwidth_bps)
    for t in record["transfers"]:
        assert t["bytes"] <= bound_bytes + t["median_s"] * config.bandwidth_bps / 8
