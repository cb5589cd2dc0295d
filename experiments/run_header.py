"""The report's header (``experiments/RESULTS.md``), from a run's ``run.json`` alone: how the run
was made and on what machine, how busy and how steady its cores were before each stage, and its
calibration; ``check_run`` says what in a stored run.json it cannot be made from, and
``check_calibration`` what in a calibration the model cannot price from."""

from __future__ import annotations

from experiments.fidelity import finite_number as _number, is_seconds, is_time
from experiments.stage_samples import busy_note, core_speed_note


_positive = is_time  # a finite number over 0, whatever its unit


def _text(value) -> bool:
    return isinstance(value, str)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _names(value) -> bool:
    return isinstance(value, list) and all(map(_text, value))


def _object_of(valid):
    """A test of an object (figures by stage, inputs by rate) whose values each pass ``valid``."""
    return lambda value: isinstance(value, dict) and all(map(valid, value.values()))


def _core_speeds(records) -> bool:
    return isinstance(records, list) and all(
        isinstance(r, dict) and _number(r.get("p10")) and _number(r.get("slow_share"))
        and _number(r.get("median_units_per_s", 0)) for r in records)


RUN_FIELDS = {  # run.json's fields the header reads: (whether every run has it, test, what it is)
    "command": (True, _text, "a string"),
    "machine": (True, _text, "a string"),
    "cpus": (True, lambda v: v is None or _count(v), "a positive whole number (or null)"),
    "load_average": (True, _text, "a string"),
    "wall_s": (True, is_seconds, "a time in seconds, 0 or more"),
    "calibration": (True, lambda v: isinstance(v, list), "a list of calibration records"),
    "build_s": (False, is_seconds, "a time in seconds, 0 or more"),
    "interrupted": (False, _text, "a string"),
    "experiments": (False, _names, "a list of experiment names"),
    "finished": (False, _names, "a list of experiment names"),
    "inputs": (False, _object_of(lambda v: isinstance(v, dict)),
               "an object of calibrated inputs by rate"),
    "congestion_control": (False, _text, "a string"),
    "scheduling": (False, lambda v: v in ("batch", "normal"), "'batch' or 'normal'"),
    "host_cores": (False, _text, "a string"),
    "address_layout": (False, _text, "a string"),
    "probe_idle": (False, lambda v: isinstance(v, bool), "true or false"),
    "probe_order": (False, _text, "a string"),
    "quiet_waits": (False, _object_of(is_seconds), "an object of seconds by stage"),
    "busy_cores": (False, _object_of(lambda v: v is None or _number(v)),
                   "an object of busy cores by stage"),
    "core_speed": (False, _object_of(_core_speeds), "an object of core-speed records by stage"),
    "core_speed_sampling": (False, lambda v: isinstance(v, dict) and is_time(v.get("seconds"))
                            and is_time(v.get("window_s")),
                            "an object of positive 'seconds' and 'window_s'"),
}


def shown(value) -> str:
    """``value`` as a message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def run_record(document) -> dict:
    """``document`` (a stored run.json, read) where it is a run's record, a JSON object;
    ``ValueError`` saying what it is instead."""
    if not isinstance(document, dict):
        raise ValueError(f"not a run's record (a JSON object), got {shown(document)}")
    return document


def check_run(meta) -> None:
    """``ValueError`` saying which field of a run's ``run.json`` (``meta``) the header cannot be
    made from: one missing or not of its kind (``RUN_FIELDS``), a calibration record not as
    ``check_calibration`` takes it, or no calibration in a run that was not stopped before its
    calibration finished."""
    run_record(meta)
    for field, (required, valid, what) in RUN_FIELDS.items():
        if field not in meta:
            if required:
                raise ValueError(f"missing key {field!r}")
        elif not valid(meta[field]):
            raise ValueError(f"{field!r} must be {what}, got {shown(meta[field])}")
    check_calibration(meta["calibration"], empty_ok=True)
    if not meta["calibration"] and meta.get("finished"):
        raise ValueError("'calibration' is empty, though the run says it finished experiments "
                         "priced from it")


CALIBRATION_FIELDS = (  # a calibration record's figures the header and the model read
    (("bandwidth_bps",), _positive, "a positive number"),
    (("goodput_bps",), _positive, "a positive number"),
    (("gloo", "latency_s"), is_seconds, "a time in seconds, 0 or more"),
    (("gloo", "all_reduce_1_element_s", "median"), is_seconds, "a time in seconds, 0 or more"),
)


def check_calibration(records, empty_ok: bool = False) -> None:
    """``ValueError`` saying which record of a run's calibration (run.json's ``calibration``, or
    ``calibration.json``) is not as ``experiments/run.py`` writes it: ``records`` must be a list
    (not empty, unless ``empty_ok``) of objects with a rate, its goodput and the Gloo figures
    (``CALIBRATION_FIELDS``), and where they have them, a queue's wait, the ring rounds by
    hosts and the number of attempts."""
    if not isinstance(records, list) or not (records or empty_ok):
        raise ValueError(f"the calibration must be a non-empty list of records, got "
                         f"{shown(records)}")
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError(f"calibration[{i}] must be an object, got {shown(record)}")
        for keys, valid, what in CALIBRATION_FIELDS:
            value = record
            for key in keys:
                if not isinstance(value, dict) or key not in value:
                    raise ValueError(f"calibration[{i}]: missing key {'.'.join(keys)!r}")
                value = value[key]
            if not valid(value):
                raise ValueError(f"calibration[{i}]: {'.'.join(keys)!r} must be {what}, got "
                                 f"{shown(value)}")
        _check_record_extras(record, f"calibration[{i}]")


def _check_record_extras(record: dict, where: str) -> None:
    """``check_calibration``'s test of a record's optional parts."""
    queue, rounds = record.get("queue"), record.get("rounds")
    if queue and not (isinstance(queue, dict) and is_seconds(queue.get("behind_bulk_s"))):
        raise ValueError(f"{where}: 'queue' must be an object with 'behind_bulk_s' in seconds, "
                         f"got {shown(queue)}")
    if rounds and not (isinstance(rounds, dict) and all(
            k.isdigit() and isinstance(t, dict) for k, t in rounds.items())):
        raise ValueError(f"{where}: 'rounds' must be an object of round tables by hosts, got "
                         f"{shown(rounds)}")
    if not _count(record.get("attempts", 1)):
        raise ValueError(f"{where}: 'attempts' must be a positive whole number, got "
                         f"{shown(record['attempts'])}")
    if record.get("duplex") is not None and not isinstance(record["duplex"], dict):
        raise ValueError(f"{where}: 'duplex' must be an object, got {shown(record['duplex'])}")
    for part, key in ((record, "payload_efficiency_expected"), (record, "payload_efficiency"),
                      (record["gloo"], "payload_efficiency"),
                      (record.get("duplex") or {}, "payload_efficiency")):
        if part.get(key) is not None and not _number(part[key]):
            raise ValueError(f"{where}: {key!r} must be a number, got {shown(part[key])}")


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
    cpus = meta["cpus"] or "?"  # null where the machine did not say how many it has
    return [f"Last run: `{meta['command']}` on {meta['machine']} ({cpus} CPUs, load "
            f"average {meta['load_average']}, TCP congestion control: {tcp}, CPU scheduling: "
            f"{policy}) {run_time(meta)}. Every measured "
            "time is a median (all-reduce: of the slowest rank over timed iterations after a warm-up; "
            f"sync: over steps after warm-up); the {cpus} CPU cores are shared by the hosts "
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
