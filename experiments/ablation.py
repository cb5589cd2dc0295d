"""The all-reduce model sixteen ways (seventeen with --wire) on one run's results: what each part buys.

    python -m experiments.ablation    # reads experiments/results/{calibration,allreduce}.json
    python -m experiments.ablation --model "rounds, the calibration's gap"   # row by row
    python -m experiments.ablation --model "rounds, the wire's bytes" --wire experiments/results/wire/*.json

All predictions come from the same run's calibration (network only); only the model differs:

* ``rounds``: the ring rounds timed on a test bed of the row's host count (``ring_probe.py``:
  on the row's own test bed before and after its rows, where ``allreduce.json`` holds those
  tables; else the calibration's), composed by the simulator, plus the additions the probe timed
  for the hand-written rings, each call in the benchmark's stream of calls (the model the
  experiments use: ``predict_allreduce_stream_s``); where the probe timed its chains alone
  (``--idle``), a call of k rounds of one size costs what its chains took to the end of their
  k-th round (``experiments.probe_tables.priced_from_ends``);
* ``rounds, Gloo's from Python``: the same, Gloo's own all-reduce priced from the
  Python-driven rounds too, not the C++-driven ones (``ring_probe.py --engine-rounds``);
* ``rounds, the ring's from plain chains``: the same, the hand-written ring priced from the
  plain Python-driven rounds and the additions timed after them, not from the rounds driven as
  the ring drives them (``ring_probe.py --ring-rounds``), where the probe has those;
* ``rounds, chains' ends``: the same, every call of k rounds of one size priced from the
  chains' ends even where the probe ran its chains back to back (each on the bucket the one
  before it left);
* ``rounds, first and mean later rounds``: the same, every call priced from a first round and
  k - 1 mean later ones even where the probe timed its chains alone;
* ``rounds, no full-bucket walk``: the same, no call priced below its chains run back to back
  (no ``experiments.model.full_bucket_saving_s``: the rounds those chains paid at the rate stay
  paid even where a call starts on a full bucket);
* ``rounds, the calibration's gap``: the same, every stream of calls with the gap between
  two calls the calibration timed on 2 hosts, not the one its own test bed's probes timed
  (``ring_probe.py --stream-gaps``), where they timed one, at every size;
* ``rounds, one gap at every size``: the same, every stream of calls with its bed's gap of a
  stream of 1-element calls, not the gap its probes timed where the loop refills a buffer of
  the calls' size (``ring_probe.py --gap-sizes``), where they timed one;
* ``rounds, calls counted at their length``: the same, each call in the stream leaving the
  bucket what it started on plus its length at the rate less its bytes, not what the walk of its
  rounds leaves (``experiments.model.bucket_left_after``: a call that waited for tokens in a
  round leaves the bucket empty);
* ``rounds, no tail after a call``: the same, no call in the stream running on after its
  last bytes arrived (``experiments.model.call_tail_s``: the naive ring's addition of the last
  buffer it received, through which the links idle and the bucket refills for the next call);
* ``rounds, the ring's own work``: the same, the hand-written ring's calls also charged what
  its calls cost beyond their ring-driven rounds, the links idle meanwhile
  (``experiments.model.ring_call_extra``, from probes that timed its calls: ``ring_probe.py
  --calls``, in every bracket since the stored grids; as ``rounds`` where the probes did not);
* ``rounds, calls alone``: the same, each call priced as if it ran alone, on a full bucket
  (``predict_call_alone_s``), not in the stream;
* ``rounds, no additions``: the same rounds without the additions;
* ``rounds, the duplex probe's rate on 2 hosts``: the same, a 2-host stream of calls at the
  duplex probe's rate (two connections, each with ACK frames of its own), not at the one-way
  goodput (``experiments.model.NetworkInputs.for_ring_of``: on 2 hosts both directions share
  Gloo's one connection to the peer, and its ACKs ride in the data going back);
* ``shaper``: the 2-host calibration alone: the rounds through the shaper's token bucket at the
  duplex rate (on 2 hosts the one-way goodput), each with the duplex start-up measured at its
  size, plus a call's fixed cost; each call in the stream of calls too
  (``measured_rounds=False``);
* ``shaper, no start-up``: the same without the start-up table;
* ``rounds, the wire's bytes`` (with ``--wire FILE …``, ``experiments/wire_bytes.py``'s records):
  the same as ``rounds``, each cycle of a stream also sending the wire's bytes beyond its
  payload (``NetworkInputs.message_wire_bytes`` a message and ``cycle_wire_bytes`` a cycle):
  a message's, the mean of the records' fits at the row's rate (else of them all); a cycle's,
  the mean of their fits on the row's number of hosts (else none).

Prints one line per row group: rows, then median and worst |error| of each model; with
``--model``, each row's prediction under that model, its measurement and the error.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, read_json,  # noqa: E402
                                       run_command_line)
from dsgd_sim.collectives import RoundCosts  # noqa: E402
from experiments.configs import ALLREDUCE_ALGORITHMS, bed_label  # noqa: E402
from experiments.model import (REDUCES_BETWEEN_ROUNDS, NetworkInputs,  # noqa: E402
                               predict_allreduce_stream_s, predict_call_alone_s)
from experiments.probe_tables import ChainEnds, ChainRounds, ends_of, with_chain_ends  # noqa: E402
from real.testbed.config import MAX_HOSTS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

GROUPS = {
    "all": lambda r: True,
    ">= 1 MB, not 4 hosts at 200 Mbit/s": lambda r: r["bytes"] >= 1_000_000
    and not (r["hosts"] == 4 and r["bandwidth_bps"] == 200e6),
    "< 1 MB": lambda r: r["bytes"] < 1_000_000,
    "4 hosts at 200 Mbit/s": lambda r: r["hosts"] == 4 and r["bandwidth_bps"] == 200e6,
    "hand-written rings, >= 1 MB": lambda r: r["bytes"] >= 1_000_000
    and r["algorithm"] in REDUCES_BETWEEN_ROUNDS,
    "Gloo's own": lambda r: r["algorithm"] == "backend",
    "Gloo's own, 8 hosts": lambda r: r["algorithm"] == "backend" and r["hosts"] == 8,
}


MODELS = ("rounds", "rounds, Gloo's from Python", "rounds, the ring's from plain chains",
          "rounds, chains' ends", "rounds, first and mean later rounds",
          "rounds, no full-bucket walk", "rounds, the calibration's gap",
          "rounds, one gap at every size", "rounds, calls counted at their length",
          "rounds, no tail after a call", "rounds, the ring's own work",
          "rounds, calls alone", "rounds, no additions",
          "rounds, the duplex probe's rate on 2 hosts", "shaper", "shaper, no start-up")
WIRE_MODEL = "rounds, the wire's bytes"  # only with the wire's own counts (``--wire``)


def wire_inputs(records: list[dict], names: list[str] | None = None) -> tuple[dict, dict]:
    """(rate -> a message's bytes beyond its payload, hosts -> a cycle's beyond its messages)
    from ``experiments/wire_bytes.py`` records (``names``: how errors call them): the means of
    their fits, by rate and by hosts (rate ``None``: over them all, for a rate none was made at).
    A fit below 0 (least squares over noisy counts) charges nothing."""
    names = names or [f"wire record {k + 1}" for k in range(len(records))]
    by_rate: dict = {}
    by_hosts: dict = {}
    for name, record in zip(names, records):
        fit = record.get("fit") if isinstance(record, dict) else None
        if not isinstance(fit, dict):
            raise ValueError(f"{name} has no fit (it needs two sizes)")
        message, cycle = fit.get("per_message_bytes"), fit.get("per_call_bytes")
        rate, hosts = record.get("bandwidth_bps"), record.get("hosts")
        if not (all(_is_number(x) and math.isfinite(x) for x in (message, cycle))
                and _is_number(rate) and 0 < rate < math.inf and _is_whole(hosts, 2, MAX_HOSTS)):
            raise ValueError(f"{name} is not as experiments/wire_bytes.py writes it: a rate, "
                             f"2 to {MAX_HOSTS} hosts and a fit of finite bytes")
        by_rate.setdefault(float(rate), []).append(max(0.0, float(message)))
        by_hosts.setdefault(int(hosts), []).append(max(0.0, float(cycle)))
    if not records:
        raise ValueError("no wire records")
    message = {rate: statistics.mean(v) for rate, v in by_rate.items()}
    message[None] = statistics.mean(x for v in by_rate.values() for x in v)
    return message, {h: statistics.mean(v) for h, v in by_hosts.items()}


def with_wire(net: NetworkInputs, wire: tuple[dict, dict]) -> NetworkInputs:
    message, cycle = wire
    return dataclasses.replace(net, message_wire_bytes=message.get(net.rate_bps, message[None]),
                               cycle_wire_bytes=dict(cycle))


def with_own_chain_ends(net: NetworkInputs, hosts: int, record: dict) -> NetworkInputs:
    """``net`` with its ``hosts``-host tables priced from the chains' ends of ``record`` (a
    ``ring_probe.py`` record, or two bracketing one measurement) whether or not the probe timed
    its chains alone: each driver's table from its own chains, the Python-driven ones above."""
    def priced(costs: dict, driver: str) -> dict:
        return ({**costs, hosts: with_chain_ends(costs[hosts], ends_of(record, driver))}
                if hosts in costs else costs)

    return dataclasses.replace(net, round_costs=priced(net.round_costs, ""),
                               engine_round_costs=priced(net.engine_round_costs, "engine"),
                               ring_round_costs=priced(net.ring_round_costs, "ring"))


def without_chain_ends(net: NetworkInputs) -> NetworkInputs:
    """``net`` with every table priced from a first and mean later rounds, as ``RoundCosts``
    (a table from chains run back to back keeps its rounds for the full-bucket walk)."""
    return _as_plain(net, ChainEnds)


def without_full_bucket_walk(net: NetworkInputs) -> NetworkInputs:
    """``net`` with no table from chains run back to back keeping its rounds' durations, so
    that no call is priced below those chains (``full_bucket_saving_s`` of 0)."""
    return _as_plain(net, ChainRounds)


def _as_plain(net: NetworkInputs, kind: type) -> NetworkInputs:
    """``net`` with its tables of ``kind`` as plain ``RoundCosts`` (the others as they are)."""
    def plain(costs: dict) -> dict:
        return {h: RoundCosts(t.sizes_bytes, t.first_s, t.next_s, t.reduce_s)
                if isinstance(t, kind) else t for h, t in costs.items()}

    return dataclasses.replace(net, round_costs=plain(net.round_costs),
                               engine_round_costs=plain(net.engine_round_costs),
                               ring_round_costs=plain(net.ring_round_costs))


def turns_of(rows: list[dict]) -> dict[tuple, list[str]]:
    """(hosts, rate, size) -> the algorithms that took turns there, in the order of the rows
    (the benchmark's)."""
    turns: dict[tuple, list[str]] = {}
    for r in rows:
        turns.setdefault((r["hosts"], r["bandwidth_bps"], r["bytes"]), []).append(r["algorithm"])
    return turns


def errors(rows: list[dict], nets: dict, model: str, tables: dict | None = None,
           turns: dict | None = None, wire: tuple | None = None) -> list[float]:
    """|error| of each row under ``model`` (``predictions``, the same arguments)."""
    return [abs(p - r["measured_s"]) / r["measured_s"]
            for p, r in zip(predictions(rows, nets, model, tables, turns, wire), rows)]


def predictions(rows: list[dict], nets: dict, model: str, tables: dict | None = None,
                turns: dict | None = None, wire: tuple | None = None) -> list[float]:
    """Seconds each row is predicted under ``model``; ``tables``: point label -> its own
    ring-probe record. A row's call takes turns with the algorithms of its test bed and size in
    ``turns`` (``turns_of`` all the run's rows: a group that keeps only some algorithms must not
    change the rotation the benchmark ran; by default, ``turns_of(rows)``); ``wire``: the
    wire's bytes (``wire_inputs``), which ``WIRE_MODEL`` needs."""
    if model == WIRE_MODEL and wire is None:
        raise ValueError(f"the model {WIRE_MODEL!r} needs the wire's counts (--wire FILE)")
    turns = turns_of(rows) if turns is None else turns
    out = []
    for r in rows:
        net = nets[r["bandwidth_bps"]]
        if model == WIRE_MODEL:
            net = with_wire(net, wire)
        label = bed_label(r["hosts"], r["bandwidth_bps"])
        if tables and label in tables:
            gap_s = net.stream_gap_s
            net = net.with_rounds(r["hosts"], tables[label])
            if model == "rounds, the calibration's gap":
                net = dataclasses.replace(net, stream_gap_s=gap_s, sized_gaps=())
            if model == "rounds, one gap at every size":
                net = dataclasses.replace(net, sized_gaps=())
            if model == "rounds, chains' ends":
                net = with_own_chain_ends(net, r["hosts"], tables[label])
        if model == "rounds, first and mean later rounds":
            net = without_chain_ends(net)
        if model == "rounds, no full-bucket walk":
            net = without_full_bucket_walk(net)
        if model == "shaper, no start-up":
            net = dataclasses.replace(net, duplex_transfers=())
        if model == "rounds, Gloo's from Python":
            net = dataclasses.replace(net, engine_round_costs={})
        if model == "rounds, the ring's from plain chains":
            net = dataclasses.replace(net, ring_round_costs={})
        if model == "rounds, the ring's own work":
            net = dataclasses.replace(net, price_ring_own_work=True)
        if model == "rounds, the duplex probe's rate on 2 hosts":
            net = dataclasses.replace(net, two_host_goodput=False)
        if model == "rounds, no additions":
            net = dataclasses.replace(net, round_costs={
                h: dataclasses.replace(t, reduce_s=()) for h, t in net.round_costs.items()})
        rounds = model.startswith("rounds")
        if model == "rounds, calls alone":
            predicted = predict_call_alone_s(r["algorithm"], r["hosts"], r["bytes"], net)
        else:
            turn = turns[r["hosts"], r["bandwidth_bps"], r["bytes"]]
            predicted = predict_allreduce_stream_s(
                turn, r["hosts"], r["bytes"], net, measured_rounds=rounds,
                walk_calls=model != "rounds, calls counted at their length",
                call_tails=model != "rounds, no tail after a call")[r["algorithm"]]
        out.append(predicted)
    return out


def check_rows(rows) -> list[dict]:
    """``rows`` as ``allreduce.json`` stores them, or ``ValueError`` naming the first bad row:
    each of a known algorithm on 2 to ``MAX_HOSTS`` hosts (the model's work grows with the
    hosts: a million would run for hours), a whole positive number of bytes and a positive,
    finite ``measured_s`` (the error is relative to it)."""
    if not isinstance(rows, list):
        raise ValueError("'rows' is not a list")
    for k, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"row {k} is not an object")
        if not _is_whole(r.get("hosts"), 2, MAX_HOSTS):
            raise ValueError(f"row {k}: hosts must be a whole number from 2 to {MAX_HOSTS}, "
                             f"got {r.get('hosts')!r}")
        if not _is_whole(r.get("bytes"), 1, math.inf):
            raise ValueError(f"row {k}: bytes must be a positive whole number, "
                             f"got {r.get('bytes')!r}")
        measured_s = r.get("measured_s")
        if not (_is_number(measured_s) and 0 < measured_s < math.inf):
            raise ValueError(f"row {k}: measured_s must be a positive finite number of seconds, "
                             f"got {measured_s!r}")
        if r.get("algorithm") not in ALLREDUCE_ALGORITHMS:
            raise ValueError(f"row {k}: algorithm must be one of "
                             f"{', '.join(ALLREDUCE_ALGORITHMS)}, got {r.get('algorithm')!r}")
    return rows


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_whole(value, low: float, high: float) -> bool:
    """``value`` a whole number from ``low`` to ``high`` (an int, or a float such as 4.0)."""
    return _is_number(value) and low <= value <= high and math.isfinite(value) \
        and value == int(value)


def ablation(calibration: list[dict], rows: list[dict], tables: dict | None = None,
             wire: tuple | None = None) -> dict:
    """Per group and model: (rows, median |error|, worst |error|); ``tables`` and ``wire`` as
    ``errors`` (``WIRE_MODEL`` only with ``wire``)."""
    nets = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c) for c in calibration}
    table, turns = {}, turns_of(rows)
    models = MODELS + ((WIRE_MODEL,) if wire is not None else ())
    for name, keep in GROUPS.items():
        chosen = [r for r in rows if keep(r)]
        if chosen:
            table[name] = {model: (len(e), statistics.median(e), max(e))
                           for model, e in ((m, errors(chosen, nets, m, tables, turns, wire))
                                            for m in models)}
    return table


def main(argv=None) -> int:
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS),
                        help="folder with calibration.json and allreduce.json")
    parser.add_argument("--model", choices=MODELS + (WIRE_MODEL,), metavar="MODEL",
                        help="instead of the table, every row under this model: predicted, "
                             "measured, error (one of: " + "; ".join(MODELS + (WIRE_MODEL,))
                             + ")")
    parser.add_argument("--wire", action="extend", nargs="+", metavar="FILE",
                        help=f"experiments/wire_bytes.py records (experiments/results/wire/*.json"
                             f"): add the model {WIRE_MODEL!r}")
    args = parser.parse_args(argv)
    folder = Path(args.results)
    wire = None
    if args.wire:
        records = []
        for path in args.wire:
            try:
                records.append(read_json(path))
            except (OSError, ValueError) as error:
                parser.error(f"cannot read the wire's counts in {path}: {error}")
        try:
            wire = wire_inputs(records, args.wire)
        except ValueError as error:
            parser.error(f"cannot read the wire's counts: {error}")
    elif args.model == WIRE_MODEL:
        parser.error(f"the model {WIRE_MODEL!r} needs --wire FILE (experiments/wire_bytes.py)")
    try:
        calibration = read_json(folder / "calibration.json")
        allreduce = read_json(folder / "allreduce.json")
    except (OSError, ValueError) as error:
        parser.error(f"cannot read the results in {folder}: {error}")
    try:
        rows = check_rows(allreduce.get("rows") if isinstance(allreduce, dict) else None)
    except ValueError as error:
        parser.error(f"the results in {folder} are not as experiments/run.py writes them: "
                     f"allreduce.json: {error}")
    if not rows:
        parser.error(f"{folder / 'allreduce.json'} has no rows: nothing to compare")
    try:
        if args.model:
            nets = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c) for c in calibration}
            for r, p in zip(rows, predictions(rows, nets, args.model, allreduce.get("rounds"),
                                              wire=wire)):
                print(f"{r['config']}: predicted {p * 1e3:.3f} ms, measured "
                      f"{r['measured_s'] * 1e3:.3f} ms, {p / r['measured_s'] - 1:+.1%}")
            return 0
        table = ablation(calibration, rows, allreduce.get("rounds"), wire)
    except ValueError as error:
        parser.error(f"cannot read the results in {folder}: {error}")
    except (AttributeError, KeyError, TypeError, ZeroDivisionError) as error:
        parser.error(f"the results in {folder} are not as experiments/run.py writes them: "
                     f"{error!r}")
    for name, result in table.items():
        n = result[MODELS[0]][0]
        print(f"{name}: {n} rows; " + "; ".join(
            f"{model} median {med:.1%} worst {worst:.1%}"
            for model, (_, med, worst) in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_command_line(main))
