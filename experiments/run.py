"""Run the named experiments on the test bed, predict each from the calibration, compare.

    sudo python experiments/run.py --quick            # the representative subset: 7-10 min on 2 cores
    sudo python experiments/run.py                    # the full grid
    sudo python experiments/run.py allreduce          # one experiment (names: experiments/configs.py)
    sudo python experiments/run.py --quick --trace t.json --json s.json   # its timeline; its summary
    python experiments/run.py --report-only           # rewrite RESULTS.md from results/*.json
    python experiments/run.py --repredict allreduce   # its stored measurements, today's model
    sudo python experiments/run.py --out experiments/results/full   # the full grid, kept apart

Order of work: calibrate the network at every rate the experiments use (2-host test beds, network
only), then run each experiment point on a fresh test bed and predict it with the simulator from
the calibrated inputs alone. Writes under ``experiments/results/``: ``calibration.json``,
``<name>.json`` and ``<name>.png`` per experiment, ``fidelity.json`` (every comparison), and
regenerates ``experiments/RESULTS.md`` (with ``--out DIR``: all of it, report included, in DIR,
so that a full-grid run and the quick one can be kept side by side). Needs root and iproute2 (the
test bed); without them, one line saying so and exit status 1.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.configs import (EXPERIMENTS, PROBE_ORDER_HELP, PROBE_ORDERS,  # noqa: E402
                                 select)
from experiments.fidelity import fidelity_row, summarise  # noqa: E402
from experiments.model import NetworkInputs  # noqa: E402
from experiments.notes import NOTES  # noqa: E402
from experiments.report import (check_result, plot_async, plot_sync,  # noqa: E402
                                results_markdown)
from experiments.run_header import (check_calibration, check_run, header_lines,  # noqa: E402
                                    run_record)
from experiments.single_process import RUNS  # noqa: E402
from experiments.stage_samples import QUIET_WAIT_S, note_machine  # noqa: E402
from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type,  # noqa: E402
                                       check_output_dir, check_output_file,
                                       check_output_files, parse_seed, read_json,
                                       run_command_line,
                                       write_json_output, write_text_atomically)
from dsgd_sim.units import parse_time  # noqa: E402
from real.testbed.config import (DEFAULT_HOST_CORES, HOST_CORES_HELP,  # noqa: E402
                                 HOST_CORES_POLICIES, ADDRESS_LAYOUTS, SCHEDULING_POLICIES,
                                 parse_congestion_control)
from real.testbed import timeline  # noqa: E402
from real.testbed.network import check_congestion_control  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"   # where results go (--out)
# experiments whose stored rows can be predicted again: every one (``repredictor``)
REPREDICTABLE = tuple(EXPERIMENTS)
REPORT = HERE / "RESULTS.md"  # the report written from them
BENCHMARK_MAX_SEED = 2**53  # real/allreduce.py's MAX_SEED (a rank's buffers: seed * 1000 + rank)


def check_run_seed(seed) -> None:
    """``ValueError`` unless ``seed`` is one every script of a run takes (``--seed``, or a stored
    run.json's): a whole number from 0 to ``BENCHMARK_MAX_SEED``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= BENCHMARK_MAX_SEED:
        raise ValueError(f"--seed must be a whole number from 0 to {BENCHMARK_MAX_SEED:,} "
                         f"(real/allreduce.py's largest), got {seed!r}")


def sync_rows(experiment, net_by_rate: dict, measure, predict) -> list[dict]:
    """Seconds per step, each predicted from the ring rounds timed on its own test bed around
    the run where the measurement has them (``rounds``), else from the calibration's; each row
    keeps the replica's step its prediction took (``priced_step``: compute, rest and, with real
    compute, the wait of the single-process run: ``sync_model.predict_sync_s``)."""
    rows = []
    for point in experiment.points:
        summary = measure(point)
        rounds = summary.pop("rounds", None)
        net = net_by_rate[point.bandwidth_bps].with_rounds(point.hosts, rounds)
        priced: dict = {}  # the replica's step the prediction took (predict_sync_s's ``priced``)
        predicted = predict(point, net, priced=priced)
        rows.append({"config": point.label, "hosts": point.hosts, "bandwidth_bps": point.bandwidth_bps,
                     "mode": "emulated" if point.emulate_compute_s else "cpu",
                     "predicted_s": predicted, "priced_step": priced,
                     "measured_s": summary["iteration_time_s"], "measured": summary,
                     **({"rounds": rounds} if rounds is not None else {})})
    return rows


def async_rows(experiment, net_by_rate: dict, measure, predict) -> list[dict]:
    """Seconds per applied update (1 / the server's updates/s after the warm-up,
    ``configs.warmup_updates``)."""
    rows = []
    for point in experiment.points:
        summary = measure(point)
        rate = summary["updates_per_s"]
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
            raise ValueError(f"{point.label}: updates_per_s {rate!r} is no rate of updates")
        predicted = predict(point, net_by_rate[point.bandwidth_bps])
        rows.append({"config": point.label, "hosts": point.hosts, "workers": point.workers,
                     "bandwidth_bps": point.bandwidth_bps, "mode": "async",
                     "predicted_s": predicted["per_update_s"],
                     "measured_s": 1.0 / rate,
                     "predicted_staleness_mean": predicted["staleness_mean"],
                     "measured_staleness_mean": summary["staleness_mean"], "measured": summary})
    return rows


def repredict_async(result: dict, net_by_rate: dict) -> list[dict]:
    """The ``async`` rows of a stored run predicted again from ``net_by_rate`` (its own
    calibration): each point's stored summary (its row's ``measured``), today's model."""
    from experiments.configs import AsyncRunConfig, replay_stored, rows_named
    from experiments.sync_model import predict_async
    points = tuple(AsyncRunConfig(**{k: v for k, v in p.items() if k != "kind"})
                   for p in result["points"])

    def stored_of(point, stored_rows):
        return rows_named(stored_rows, [point.label])[0]["measured"]

    def rows_fn(experiment, nets, measure_fn):
        return async_rows(experiment, nets, measure_fn, predict_async)

    return replay_stored(result, points, stored_of, rows_fn, net_by_rate)


def repredict_sync(result: dict, net_by_rate: dict) -> list[dict]:
    """The ``sync`` or ``multinode`` rows of a stored run predicted again from ``net_by_rate`` (its
    own calibration): each point's stored summary and the ring rounds timed around it (its row's
    ``measured`` and ``rounds``), today's model. The single-process runs (the profile, the
    emulated and the paused steps) are the ones kept with the result where ``repredict`` loaded
    them (``experiments.single_process``); a run stored before they were kept, or one today's
    model asks for anew (a paused step of another wait), is taken on this machine."""
    from experiments.configs import SyncRunConfig, replay_stored, rows_named
    from experiments.sync_model import predict_sync_s
    points = tuple(SyncRunConfig(**{k: v for k, v in p.items() if k != "kind"})
                   for p in result["points"])

    def stored_of(point, stored_rows):
        row = rows_named(stored_rows, [point.label])[0]
        return {**row["measured"], **({"rounds": row["rounds"]} if "rounds" in row else {})}

    def rows_fn(experiment, nets, measure_fn):
        return sync_rows(experiment, nets, measure_fn, predict_sync_s)

    return replay_stored(result, points, stored_of, rows_fn, net_by_rate)


def repredictor(name: str):
    """What predicts experiment ``name``'s stored rows again and draws them: its module (its
    ``repredict`` and ``plot``), or for ``async``, ``sync`` and ``multinode``, whose rows this
    file makes, the same pair."""
    import importlib
    import types
    if name == "async":
        return types.SimpleNamespace(repredict=repredict_async, plot=plot_async)
    if name in ("sync", "multinode"):
        return types.SimpleNamespace(repredict=repredict_sync, plot=plot_sync)
    return importlib.import_module(f"experiments.{name}")


def run_experiment(experiment, net_by_rate: dict, quick: bool = False) -> dict:
    from experiments import measure
    started = time.monotonic()
    extra = {}
    RUNS.start()
    if experiment.name == "allreduce":
        from experiments import allreduce
        rows, extra["rounds"] = allreduce.rows(
            experiment, net_by_rate, lambda p: measure.measure_allreduce(p, quick=quick))
        plot, draw = "allreduce.png", allreduce.plot
    elif experiment.name == "async":
        from experiments.sync_model import predict_async
        rows = async_rows(experiment, net_by_rate, measure.measure_async, predict_async)
        plot, draw = "async.png", plot_async
    elif experiment.name in ("ps_vs_ring", "async_vs_sync"):  # modules of their own
        import importlib
        module = importlib.import_module(f"experiments.{experiment.name}")
        rows = module.rows(experiment, net_by_rate)
        plot, draw = f"{experiment.name}.png", module.plot
    else:  # sync and multinode: sync runs, started directly or through torchrun
        from experiments.sync_model import predict_sync_s
        rows = sync_rows(experiment, net_by_rate, measure.measure_sync, predict_sync_s)
        plot, draw = f"{experiment.name}.png", plot_sync
    draw(rows, RESULTS / plot)
    kept = RUNS.used()  # the single-process runs its rows were priced from, for --repredict
    if kept:
        extra["single_process"] = kept
    return {"name": experiment.name, "question": experiment.question, "plot": plot,
            "load_average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "points": [p.as_dict() for p in experiment.points], "rows": rows,
            "wall_s": time.monotonic() - started, **extra}


def repeatability(rows: list[dict], previous_path: Path) -> dict | None:
    """How much this run's measurements moved from the previous run's (same configs): the noise
    floor under any model's error on this machine. None without a previous run."""
    if not previous_path.exists():
        return None
    try:  # the file this run replaces: one it cannot read must not lose this run's measurements
        previous = read_json(previous_path)
        before = {r["config"]: float(r["measured_s"]) for r in previous.get("rows", [])}
        if not all(0 < s < math.inf for s in before.values()):
            raise ValueError("a measured_s that is not a positive time")
    except BAD_RESULTS as error:
        print(f"experiments/run.py: {previous_path.name} before this run is not a result "
              f"({problem(error)}): no repeatability against it", file=sys.stderr)
        return None
    changes = [abs(r["measured_s"] - before[r["config"]]) / before[r["config"]]
               for r in rows if r["config"] in before]
    if not changes:
        return None
    return {"rows": len(changes), "median_abs_change": statistics.median(changes),
            "worst_abs_change": max(changes), "previous_load_average": previous.get("load_average")}


def fidelity_rows(results: list[dict]) -> list[dict]:
    return [fidelity_row(r["name"], row["config"], row["predicted_s"], row["measured_s"])
            for r in results for row in r["rows"]]



BAD_RESULTS = (AttributeError, KeyError, OSError, TypeError, ValueError)  # files not as written


def load_result(name: str) -> dict | None:
    """The result file of experiment ``name``, None when there is none; ``ValueError`` when it
    is not a result the report can be made from (``report.check_result``)."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    try:
        result = read_json(path)
    except (OSError, ValueError) as error:
        raise ValueError(str(error)) from None
    check_result(result, name)
    return result


def load_results(names: list[str]) -> list[dict]:
    """The result files present for ``names`` (a run of some experiments keeps the others');
    ``ValueError`` naming a file that is not a result."""
    results = []
    for name in names:
        try:
            result = load_result(name)
        except ValueError as error:
            raise ValueError(f"{name}.json: {error}") from None
        results += [result] if result is not None else []
    return results


def problem(error: Exception) -> str:
    """One line saying what was wrong with the result files (a KeyError's text is the key)."""
    return f"missing key {error}" if isinstance(error, KeyError) else " ".join(str(error).split())


def report_texts(results: list[dict], meta: dict) -> tuple[list[dict], str]:
    """The fidelity rows and the RESULTS.md text of ``results``; nothing is written."""
    results = [{**r, "notes": NOTES.get(r["name"], [])} for r in results]
    rows = fidelity_rows(results)
    folder = "results/" if REPORT.parent != RESULTS else ""
    header = header_lines(meta)
    log = Path(os.path.relpath(HERE / "LOG.md", REPORT.parent)).as_posix()
    pooled = Path(os.path.relpath(HERE.parent / "docs" / "fidelity.md", REPORT.parent)).as_posix()
    header += ["", "The notes under each table (`experiments/notes.py`) say what the model takes, "
               "where it holds and where it misses, with figures over the full grids "
               f"[docs/fidelity.md]({pooled}) pools (`python -m experiments.grids`); this run's "
               "own figures are in the tables. How each finding was made, grid by grid, with its "
               f"commands: [LOG.md]({log})."]
    return rows, results_markdown(results, rows, header, folder)


def check_meta(meta) -> None:
    """``ValueError`` (or another of ``BAD_RESULTS``) saying what in a stored run.json the report
    cannot be made from: ``run_header.check_run``, and an experiment it names that is none of
    ``EXPERIMENTS``."""
    check_run(meta)
    for key in ("experiments", "finished"):
        unknown = [name for name in meta.get(key, []) if name not in EXPERIMENTS]
        if unknown:
            raise ValueError(f"{key!r} names {unknown[0]!r}, not an experiment of "
                             "experiments/configs.py")
    header_lines(meta)


def load_meta() -> dict:
    """``RESULTS``' run.json, checked (``check_meta``): ValueError naming it and saying what is
    wrong."""
    try:
        meta = read_json(RESULTS / "run.json")
        check_meta(meta)
    except BAD_RESULTS as error:
        raise ValueError(f"run.json in {RESULTS}: {problem(error)}") from None
    return meta


def check_ran(meta: dict, present) -> None:
    """``ValueError`` naming the first experiment whose result run.json says was written and that
    is not among ``present``: those it finished (a run stored before it kept them: every one
    it names, unless it was interrupted)."""
    if "finished" in meta:
        written = meta["finished"]
    else:
        written = [] if "interrupted" in meta else meta.get("experiments", [])
    missing = [name for name in written if name not in present]
    if missing:
        raise ValueError(f"no {missing[0]}.json in {RESULTS}, though its run.json says "
                         f"{missing[0]} finished")


def regenerate_stored() -> dict:
    """``regenerate`` from the result files and run.json in ``RESULTS``: ValueError naming the
    file that is not as experiments/run.py writes it, or the result run.json says was written
    and is not there (nothing is written then)."""
    meta = load_meta()
    named = {}
    for name in EXPERIMENTS:
        try:
            result = load_result(name)
        except ValueError as error:
            raise ValueError(f"{name}.json in {RESULTS}: {problem(error)}") from None
        if result is not None:
            named[name] = result
    if not named:
        raise ValueError(f"no result files in {RESULTS} (run the experiments first)")
    check_ran(meta, named)
    try:
        texts = report_texts(list(named.values()), meta)
    except BAD_RESULTS as error:  # which file: the one whose report cannot be built alone
        culprit = next((name for name, result in named.items()
                        if not _reports(result, meta)), "a result file")
        raise ValueError(f"{culprit}.json in {RESULTS}: {problem(error)}") from None
    check_outputs([RESULTS / "fidelity.json", REPORT])
    try:
        return write_report(*texts)
    except OSError as error:
        raise ValueError(f"cannot write the report: {problem(error)}") from None


def check_outputs(paths) -> None:
    """ValueError naming the first of ``paths`` that cannot be written (a folder in its place,
    a read-only file): checked before any of them is written, so none is left half updated."""
    for path in paths:
        check_output_file("output", os.fspath(path))


def _reports(result: dict, meta: dict) -> bool:
    try:
        report_texts([result], meta)
        return True
    except BAD_RESULTS:
        return False


def regenerate(results: list[dict], meta: dict) -> dict:
    """Rewrite fidelity.json and the report, both built before either is written."""
    return write_report(*report_texts(results, meta))


def write_report(rows: list[dict], report: str) -> dict:
    """Write fidelity.json and the report (``report_texts``); their summary."""
    write_text_atomically(RESULTS / "fidelity.json", json.dumps(rows, indent=1) + "\n")
    write_text_atomically(REPORT, report)
    return summarise(rows)


MEASURING_FLAGS = ("quick", "congestion_control", "scheduling", "host_cores", "address_layout",
                   "probe_idle", "probe_order", "seed", "wait_quiet")
"""The flags only a measuring run reads: --report-only and --repredict refuse any of them set
away from its default."""


def parse_args(argv=None):
    parser = OneLineArgumentParser(
        description="Run experiments on the test bed; compare with the model.")
    parser.add_argument("names", nargs="*", help="experiments to run (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="the representative subset (7-10 min on 2 cores)")
    parser.add_argument("--report-only", action="store_true",
                        help="no measurement: rewrite fidelity.json and RESULTS.md from results/")
    parser.add_argument("--repredict", action="store_true",
                        help="predict the stored measurements of the named experiments again from "
                             f"their run's calibration, with today's model (only: "
                             f"{', '.join(REPREDICTABLE)}); measures nothing")
    parser.add_argument("--seed", type=argparse_type(parse_seed, "seed"), default=None,
                        metavar="N",
                        help="the seed of every trainer and benchmark the run starts (model "
                             "init, data, emulated compute draws, buffers; default: each "
                             "script's own, 0)")
    parser.add_argument("--json", metavar="FILE",
                        help="also write the summary (rows, median and worst |error|; a "
                             "measuring run's wall time) as JSON to FILE")
    parser.add_argument("--trace", metavar="FILE",
                        help="a measuring run's timeline as a Chrome trace: the calibration's "
                             "parts, each experiment, point and single-process run, each test "
                             "bed's making, commands and unmaking (written however the run ends)")
    parser.add_argument("--out", metavar="DIR",
                        help="write results and their RESULTS.md into DIR (default: "
                             "experiments/results, and experiments/RESULTS.md)")
    parser.add_argument("--congestion-control", default="reno", metavar="NAME",
                        type=argparse_type(parse_congestion_control, "congestion control"),
                        help="every test bed's TCP congestion control (default reno; 'system': "
                             "this machine's default)")
    parser.add_argument("--scheduling", choices=SCHEDULING_POLICIES, default="batch",
                        help="every test bed's CPU scheduling policy (default batch: a waking "
                             "thread preempts no other, as on separate machines)")
    parser.add_argument("--host-cores", choices=HOST_CORES_POLICIES, default=DEFAULT_HOST_CORES,
                        help="every test bed's placement of its hosts on the cores: "
                             + HOST_CORES_HELP)
    parser.add_argument("--address-layout", choices=ADDRESS_LAYOUTS, default="fixed",
                        help="fixed (default): every test bed's processes start with "
                             "address-space randomization off, laid out alike from one launch to "
                             "the next; random: the machine's default")
    parser.add_argument("--probe-idle", action="store_true",
                        help="every ring probe idles before each chain until its bed's buckets "
                             "have refilled twice, so that each starts as a call alone does, and "
                             "calls are priced from the chains' ends (default: chains back to "
                             "back, each on what the one before it left)")
    parser.add_argument("--probe-order", choices=PROBE_ORDERS, default=PROBE_ORDERS[0],
                        help=PROBE_ORDER_HELP + ", for every probe of the run")
    parser.add_argument("--wait-quiet", type=argparse_type(parse_time, "time"),
                        default=QUIET_WAIT_S, metavar="TIME",
                        help="before each stage, wait up to TIME for other processes that keep "
                             "the cores busy to finish, then go on with a warning (default "
                             f"{QUIET_WAIT_S / 60:g}min; 0: do not wait)")
    args = parser.parse_args(argv)
    try:
        args.names = list(dict.fromkeys(args.names))  # an experiment named twice runs once
        args.experiments = select(args.names, args.quick)
        check_output_dir("--out", args.out)
        check_output_files({"--json": args.json, "--trace": args.trace})
        if args.seed is not None:
            check_run_seed(args.seed)
    except ValueError as error:
        parser.error(str(error))
    if args.trace and (args.report_only or args.repredict):
        parser.error("--trace records a measuring run; --report-only and --repredict measure "
                     "nothing")
    measuring = any(getattr(args, flag) != parser.get_default(flag) for flag in MEASURING_FLAGS)
    if args.report_only and (args.names or args.repredict or measuring):
        parser.error("--report-only rewrites the report of every stored experiment and "
                     "measures nothing: it takes no experiment names and no other flag but --out "
                     "and --json")
    if args.repredict and (not args.names or set(args.names) - set(REPREDICTABLE)):
        parser.error(f"--repredict takes the experiments to predict again, of: "
                     f"{', '.join(REPREDICTABLE)}")
    if args.repredict and (args.report_only or measuring):
        parser.error("--repredict measures nothing: it takes no --report-only, --quick, "
                     "--congestion-control, --scheduling, --host-cores, --address-layout, "
                     "--probe-idle, --probe-order, --seed or --wait-quiet")
    try:
        check_congestion_control(args.congestion_control)  # else found on the first bed
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None) -> int:
    global RESULTS, REPORT
    args = parse_args(argv)
    if args.out:
        RESULTS = Path(args.out).resolve()
        REPORT = RESULTS / "RESULTS.md"
    if (args.report_only or args.repredict) and not (RESULTS / "run.json").exists():
        flag = "--report-only" if args.report_only else "--repredict"
        print(f"experiments/run.py: {flag}: no run.json in {RESULTS} (run the experiments "
              "first)", file=sys.stderr)
        return 2
    try:  # --json over a stored file would lose it, whatever the mode: measured or stored
        check_not_stored({"--json": args.json, "--trace": args.trace})
    except ValueError as error:
        print(f"experiments/run.py: {error}", file=sys.stderr)
        return 2
    if args.report_only:
        try:
            summary = regenerate_stored()
        except ValueError as error:
            print(f"experiments/run.py: --report-only: {error}", file=sys.stderr)
            return 2
        print(json.dumps(summary))
        return write_json_output("experiments/run.py", "--json", args.json, summary)
    if args.repredict:
        return repredict(args.names, args.out, args.json)
    outputs = kept_files([e.name for e in args.experiments])
    try:  # a folder in an output's place, found now and not at the end of the run
        check_outputs(outputs if RESULTS.is_dir() else [])
    except ValueError as error:
        print(f"experiments/run.py: {error}", file=sys.stderr)
        return 2
    from real.testbed import unavailable_reason
    reason = unavailable_reason()
    if reason:
        print(f"experiments/run.py: the test bed is unavailable: {reason}", file=sys.stderr)
        return 1
    if args.trace:
        timeline.start("experiments/run.py")
    try:
        status = measure_and_report(args)
    finally:  # however the run ends (an error, Ctrl-C), the timeline of what it did
        trace_status = write_trace(args.trace)
    return status or trace_status


def measure_and_report(args) -> int:
    """Build the C++ rounds, calibrate, run ``args.experiments``, write run.json, the results,
    fidelity.json, the report and ``--json``; the exit status."""
    from real.testbed import TestbedError
    from real.testbed.bed import signals_raise
    from experiments import engine_rounds
    from experiments.measure import runs_ring_probes
    started, meta = time.monotonic(), {}  # the run's time counts the build: a first run pays it
    try:  # every ring probe times Gloo's rounds from C++ too: build them once, before any bed
        if runs_ring_probes(args.experiments):
            with timeline.span("build the C++ ring rounds", "set-up"):
                engine_rounds.load()
    except engine_rounds.EngineRoundsError as error:
        print(f"experiments/run.py: {error}", file=sys.stderr)
        return 1
    build_s = time.monotonic() - started
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        with signals_raise():  # kill (SIGTERM), a closed terminal: the bed comes down as on Ctrl-C
            measure_all(args, meta)
    except (TestbedError, KeyboardInterrupt) as exc:  # the bed in use is down on the way out
        failed = isinstance(exc, TestbedError)
        if meta:  # this run's run.json is written: say how far it got, and why it stopped
            meta.update(wall_s=time.monotonic() - started, build_s=build_s,
                        interrupted=(f"test bed error: {exc}" if failed else str(exc) or "Ctrl-C"))
            write_run_json(meta)
        how = f": {exc}" if failed else f" ({exc})" if str(exc) else ""
        print(f"experiments/run.py: {'stopped' if failed else 'interrupted'}{how}; the "
              f"experiments finished before it are in {RESULTS} (`--report-only` reports them)",
              file=sys.stderr)
        return 1 if failed else 130
    meta.update(wall_s=time.monotonic() - started, build_s=build_s)
    write_run_json(meta)
    try:
        with timeline.span("report", "report"):
            summary = regenerate(load_results(list(EXPERIMENTS)), meta)
    except BAD_RESULTS as error:  # another experiment's file in the folder, not as written
        print(f"experiments/run.py: the report could not be made ({problem(error)}); this run's "
              f"results are in {RESULTS}", file=sys.stderr)
        return 1
    print(f"fidelity: {summary['rows']} rows, median |error| {summary['median_abs_error']:.1%}, "
          f"worst {summary['worst_abs_error']:.1%} ({summary['worst_config']})")
    return write_json_output("experiments/run.py", "--json", args.json,
                             {**summary, "wall_s": meta["wall_s"], "build_s": build_s})


def kept_files(names: list[str]) -> list[Path]:
    """The files the results folder keeps for the experiments ``names``: run.json, the
    calibration, fidelity.json, each one's JSON and plot, and the report."""
    return ([RESULTS / name for name in ("run.json", "calibration.json", "fidelity.json")]
            + [RESULTS / f"{name}.{ext}" for name in names for ext in ("json", "png")]
            + [REPORT])


def check_not_stored(paths: dict[str, str | None]) -> None:
    """``ValueError`` if a flag's file (``{flag: path}``, None: not given) is one the results
    folder keeps (run.json, the calibration, fidelity.json, any experiment's JSON or plot, the
    report): a run writes those itself, and ``--report-only`` and ``--repredict`` read them."""
    kept = set(map(os.path.realpath, kept_files(list(EXPERIMENTS))))
    for flag, path in paths.items():
        if path is not None and os.path.realpath(path) in kept:
            raise ValueError(f"{flag} {path!r} is one of the run's own outputs in "
                             f"{RESULTS}; name another file")


def write_trace(path: str | None) -> int:
    """Write the timeline recorded since ``timeline.start`` to ``path`` (None: not asked for);
    0, or 1 after one line saying why it could not be written."""
    trace = timeline.stop()
    if path is None or trace is None:
        return 0
    try:
        trace.write(path)
    except OSError as error:
        print(f"experiments/run.py: error: --trace: {problem(error)}", file=sys.stderr)
        return 1
    return 0


def refuse_repredict(problem_text: str) -> int:
    """Say why ``--repredict`` cannot go on, in one line on stderr; its exit status, 2."""
    print(f"experiments/run.py: --repredict: {problem_text}", file=sys.stderr)
    return 2


def repredict(names: list[str], out: str | None = None, json_path: str | None = None) -> int:
    """Predict the stored rows of ``names`` again from their run's calibration (``run.json``)
    and rewrite their results, plots, fidelity.json and the report; the measurements stay."""
    try:  # the calibration now; the rest that the report reads once the rows are priced
        meta = read_json(RESULTS / "run.json")
        check_calibration(run_record(meta)["calibration"], empty_ok=True)
        net_by_rate = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c)
                       for c in meta["calibration"]}
    except BAD_RESULTS as error:
        return refuse_repredict(f"bad run.json in {RESULTS}: {problem(error)}")
    seed = meta.get("seed", 0)
    try:
        check_run_seed(seed)
    except ValueError as error:
        return refuse_repredict(f"bad run.json in {RESULTS}: its {error}")
    from experiments import measure
    measure.SEED = seed or None  # a single-process run taken again runs as the stored run's did
    try:
        return repredict_with(names, out, json_path, meta, net_by_rate)
    finally:
        measure.SEED = None


def repredict_with(names: list[str], out: str | None, json_path: str | None, meta: dict,
                   net_by_rate: dict) -> int:
    """``repredict`` once run.json is read."""
    updated = {}  # name -> (its file, its plot, its module, its result predicted again)
    notes = []  # the single-process runs taken here, said once the results are written
    for name in names:
        path, module = RESULTS / f"{name}.json", repredictor(name)
        try:
            result = read_json(path)
            check_result(result, name)
            if not same_inputs(result.get("inputs"), net_by_rate):
                raise ValueError("its calibration is not the one in run.json (a later run "
                                 "rewrote run.json; run the experiment again)")
            kept = result.get("single_process", [])
            RUNS.restore(kept)  # this result's own runs alone
            result["rows"] = module.repredict(result, net_by_rate)
            plot = RESULTS / result["plot"]
            if RUNS.taken:
                result["single_process"] = RUNS.kept_with(kept, "--repredict")
                notes.append(f"experiments/run.py: --repredict: {path.name}: {len(RUNS.taken)} "
                             f"single-process run(s) not stored with it, taken on this machine "
                             f"({', '.join(sorted({k for k, _ in RUNS.taken}))}) and kept with it")
        except FileNotFoundError:
            return refuse_repredict(f"no {path.name} in {RESULTS}")
        except BAD_RESULTS as error:
            return refuse_repredict(f"{path.name}: {problem(error)}")
        result["repredicted"] = f"python experiments/run.py --repredict {name}" + (
            f" --out {out}" if out else "")
        updated[name] = (path, plot, module, result)
    try:
        check_meta(meta)
    except BAD_RESULTS as error:
        return refuse_repredict(f"bad run.json in {RESULTS}: {problem(error)}")
    try:  # the report too is built before anything is written
        results = [r for n in EXPERIMENTS
                   for r in ([updated[n][3]] if n in updated else load_results([n]))]
        check_ran(meta, [r["name"] for r in results])
        texts = report_texts(results, meta)
    except BAD_RESULTS as error:
        return refuse_repredict(f"bad results in {RESULTS}: {problem(error)}")
    try:
        check_outputs([p for path, plot, _, _ in updated.values() for p in (path, plot)]
                      + [RESULTS / "fidelity.json", REPORT])
    except ValueError as error:
        return refuse_repredict(str(error))
    for path, plot, module, result in updated.values():
        module.plot(result["rows"], plot)
        write_text_atomically(path, json.dumps(result, indent=1) + "\n")
    summary = write_report(*texts)
    print(json.dumps(summary))
    for note in notes:
        print(note, file=sys.stderr)
    return write_json_output("experiments/run.py", "--json", json_path, summary)


def same_inputs(stored: dict | None, net_by_rate: dict) -> bool:
    """Whether a result's stored ``inputs`` (rate -> ``NetworkInputs.as_dict()``) are what
    ``net_by_rate`` gives, compared as the JSON they were written as."""
    if not isinstance(stored, dict) or not stored:
        return False
    current = json.loads(json.dumps({str(rate): net.as_dict()
                                     for rate, net in net_by_rate.items()}))
    return all(rate in current and current[rate] == inputs for rate, inputs in stored.items())



def write_run_json(meta: dict) -> None:
    write_text_atomically(RESULTS / "run.json", json.dumps(meta, indent=1) + "\n")


def measure_all(args, meta: dict) -> list[dict]:
    """Calibrate, then run every experiment of ``args``, writing each one's result as it
    finishes. ``meta`` is filled with run.json's contents once that is written; its "finished"
    lists the experiments written so far."""
    from experiments import measure
    from experiments.measure import calibrate_rate, ring_bytes, ring_hosts
    measure.CONGESTION_CONTROL = args.congestion_control
    measure.SCHEDULING = args.scheduling
    measure.HOST_CORES = args.host_cores
    measure.ADDRESS_LAYOUT = args.address_layout
    measure.PROBE_IDLE = args.probe_idle
    measure.PROBE_ORDER = args.probe_order
    measure.SEED = args.seed
    rates = sorted({rate for e in args.experiments for rate in e.bandwidths_bps})
    points = [p for e in args.experiments for p in e.points]
    meta.update({"command": "python experiments/run.py" + (" --quick" if args.quick else "")
            + (f" --out {args.out}" if args.out else "")
            + (f" --congestion-control {args.congestion_control or 'system'}"
               if args.congestion_control != "reno" else "")
            + (f" --scheduling {args.scheduling}" if args.scheduling != "batch" else "")
            + (f" --host-cores {args.host_cores}" if args.host_cores != DEFAULT_HOST_CORES
               else "")
            + (f" --address-layout {args.address_layout}" if args.address_layout != "fixed"
               else "")
            + (" --probe-idle" if args.probe_idle else "")
            + (f" --probe-order {args.probe_order}" if args.probe_order != PROBE_ORDERS[0] else "")
            + (f" --seed {args.seed}" if args.seed is not None else "")
            + (f" --wait-quiet {args.wait_quiet:g}s" if args.wait_quiet != QUIET_WAIT_S else "")
            + "".join(f" {n}" for n in args.names),
            "experiments": [e.name for e in args.experiments], "machine": platform.node(),
            "cpus": os.cpu_count(), "congestion_control": args.congestion_control or "system",
            "scheduling": args.scheduling, "host_cores": args.host_cores,
            "address_layout": args.address_layout, "probe_idle": args.probe_idle,
            "probe_order": args.probe_order, "seed": 0 if args.seed is None else args.seed,
            "wait_quiet_s": args.wait_quiet,
            "load_average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "calibration": [], "inputs": {}, "wall_s": 0.0, "finished": []})
    note_machine(meta, "the calibration", args.wait_quiet)
    # written before the calibration too, so that a stop during it is this run's to record
    write_run_json(meta)
    calibration = []
    for rate in rates:
        with timeline.span(f"calibration at {rate / 1e6:g} Mbit/s", "calibration"):
            calibration.append(calibrate_rate(rate, args.quick, ring_hosts(points, rate),
                                              ring_bytes(points, rate)))
    write_text_atomically(RESULTS / "calibration.json", json.dumps(calibration, indent=1) + "\n")
    net_by_rate = {c["bandwidth_bps"]: NetworkInputs.from_calibration(c) for c in calibration}
    meta.update(calibration=calibration,
                inputs={str(k): v.as_dict() for k, v in net_by_rate.items()})
    write_run_json(meta)
    results = []
    for experiment in args.experiments:
        print(f"experiment {experiment.name}: {len(experiment.points)} test beds", flush=True)
        note_machine(meta, experiment.name, args.wait_quiet)
        with timeline.span(f"experiment {experiment.name}", "experiment"):
            result = run_experiment(experiment, net_by_rate, args.quick)
        result["command"] = meta["command"]
        result["inputs"] = {str(rate): net_by_rate[rate].as_dict() for rate in experiment.bandwidths_bps}
        result["repeatability"] = repeatability(result["rows"], RESULTS / f"{experiment.name}.json")
        write_text_atomically(RESULTS / f"{experiment.name}.json", json.dumps(result, indent=1) + "\n")
        results.append(result)
        meta["finished"].append(experiment.name)
        write_run_json(meta)
    return results


if __name__ == "__main__":
    sys.exit(run_command_line(main))
