"""The report's header (``experiments/RESULTS.md``), from a run's ``run.json`` alone: how the run
was made and on what machine, how busy and how steady its cores were before each stage, and its
calibration."""

from __future__ import annotations

from experiments.stage_samples import busy_note, core_speed_note


def header_lines(meta: dict) -> list[str]:
    cal = ", ".join(f"{c['bandwidth_bps'] / 1e6:g} Mbit/s: goodput {c['goodput_bps'] / 1e6:.2f} Mbit/s, "
                    f"Gloo latency {c['gloo']['latency_s'] * 1e6:.0f} µs, 1-element all_reduce "
                    f"{c['gloo']['all_reduce_1_element_s']['median'] * 1e6:.0f} µs"
                    + (f", a small message behind a long one (3 hosts) "
                       f"{c['queue']['behind_bulk_s'] * 1e3:.1f} ms" if c.get("queue") else "")
                    for c in meta["calibration"])
    rounds = "; ".join(f"{', '.join(sorted(c['rounds'], key=int))} hosts at "
                       f"{c['bandwidth_bps'] / 1e6:g} Mbit/s" for c in meta["calibration"]
                       if c.get("rounds")) or "no hosts"
    tcp = meta.get("congestion_control", "system")
    tcp = {"reno": "Reno", "system": "the machine's default"}.get(tcp, tcp)
    policy = {"batch": "batch (`SCHED_BATCH`)", "normal": "the machine's default"}.get(
        meta.get("scheduling", "normal"))
    cores = meta.get("host_cores", "shared")
    if cores in ("own", "spread", "block"):
        policy += ", each host on a core of its own where there is one per host"
    if cores == "spread":
        policy += " and host i on core i mod cores where the hosts divide evenly among them"
    if cores == "block":
        policy += (" and hosts next in rank together, host i on core i // (hosts / cores), where "
                   "the hosts divide evenly among them")
    if meta.get("address_layout", "random") == "fixed":
        policy += "; address-space randomization off"
    return [f"Last run: `{meta['command']}` on {meta['machine']} ({meta['cpus']} CPUs, load "
            f"average {meta['load_average']}, TCP congestion control: {tcp}, CPU scheduling: "
            f"{policy}) {run_time(meta)}. Every measured "
            "time is a median (all-reduce: of the slowest rank over timed iterations after a warm-up; "
            f"sync: over steps after warm-up); the {meta['cpus']} CPU cores are shared by the hosts "
            "and by other jobs (the load averages are the machine's, those jobs included), so "
            "repeated runs "
            "differ per row by the Repeatability figure under each table." + busy_note(meta)
            + core_speed_note(meta), "",
            calibration_line(meta, cal, rounds)]


def calibration_line(meta: dict, cal: str, rounds: str) -> str:
    """The header's line on the run's calibration (``header_lines``)."""
    if not meta["calibration"]:
        return ("No calibration: the run stopped before its calibration finished; the results "
                "below, if any, are an earlier run's (each says its command).")
    return (f"Calibration of the last run (network only, 2 hosts): {cal}; and ring rounds timed "
            f"on test beds of {rounds} (`experiments/ring_probe.py`, in `calibration.json`), "
            "from which the sync steps and the rings of the other experiments are predicted; each "
            "all-reduce point times its own rounds on its own hosts, before and after its rows "
            "(in `allreduce.json`)"
            + ("; every probe idled before each of its chains (`--probe-idle`: twice its bed's "
               "bucket refill and 1 ms), and a call of k rounds of one size is priced from the "
               "chains' time to the end of their k-th round" if meta.get("probe_idle") else "")
            + ("; every probe ran each size's chains one after another (`--probe-order blocks`)"
               if meta.get("probe_order") == "blocks" else  # a run from before the flag too
               "; every probe interleaved its sizes' chains, one of each size in turn "
               "(`--probe-order interleaved`)")
            + attempts_note(meta["calibration"])
            + ". Each experiment below was predicted from the calibration made in its own run.")


def attempts_note(calibration: list[dict]) -> str:
    """The calibration line's clause on rates calibrated more than once, and on those whose link
    ran slow in every attempt (``experiments.measure.calibrate_rate``); empty where none was."""
    from real.testbed.calibrate import LINK_RATE_FLOOR, slow_link_reason
    notes = []
    for c in calibration:
        rate = f"{c['bandwidth_bps'] / 1e6:g} Mbit/s"
        if c.get("attempts", 1) > 1 and "link_rate_shares" not in c:  # before the link check
            notes.append(f"at {rate} the calibration was taken {c['attempts']} times (the "
                         f"machine busy)")
        elif c.get("attempts", 1) > 1:
            notes.append(f"at {rate} the calibration was taken {c['attempts']} times (the "
                         f"machine busy, or the link under {LINK_RATE_FLOOR:g} of its rate less "
                         f"headers), and of its attempts on a quiet machine the one whose link ran "
                         f"nearest the rate kept")
        slow = slow_link_reason(c) if "link_rate_shares" in c else None
        if slow:
            notes.append(f"at {rate} {slow} in the one kept, and the calls priced from it may "
                         f"come out over")
    return "".join(f"; {note}" for note in notes)


def run_time(meta: dict) -> str:
    """How long the run took, and what it left out if it was interrupted."""
    took = f"in {meta['wall_s'] / 60:.1f} min"
    if meta.get("build_s", 0) >= 1:  # a first run on a machine builds the C++ rounds
        took += f" ({meta['build_s']:.0f} s of it building the C++ ring rounds)"
    if "interrupted" not in meta:
        return took
    missing = [name for name in meta["experiments"] if name not in meta.get("finished", [])]
    return (f"{took}, interrupted ({meta['interrupted']}) before "
            f"{', '.join(missing) or 'the report'} finished")
