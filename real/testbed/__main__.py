"""Command line of the test bed: ``run``, ``calibrate`` and ``cleanup`` (see ``real/testbed``)."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type as _units,
                                       check_output_dir, check_output_file, run_command_line,
                                       write_json_output)
from dsgd_sim.units import format_time, parse_bandwidth, parse_size, parse_time
from real.testbed import network
from real.testbed.bed import Testbed, check_mpi_command, signals_raise
from real.testbed.calibrate import LINK_ATTEMPTS, calibrate_near_rate, check_calibration
from real.testbed.config import (ADDRESS_LAYOUTS, DEFAULT_HOST_CORES, HOST_CORES_HELP,
                                 HOST_CORES_POLICIES, SCHEDULING_POLICIES, TestbedConfig,
                                 parse_congestion_control)

EXAMPLES = """examples:
  python -m real.testbed run --hosts 2 --bandwidth 100Mbps -- \\
      torchrun --nnodes {hosts} --nproc-per-node 1 --rdzv-backend c10d \\
      --rdzv-endpoint {master}:{port} --rdzv-id demo script.py
  python -m real.testbed calibrate --bandwidth 100Mbps --json calibration.json
  python -m real.testbed cleanup
"""


def _add_network_flags(parser: argparse.ArgumentParser, hosts: int | None) -> None:
    if hosts is not None:
        parser.add_argument("--hosts", type=int, default=hosts, help=f"number of hosts (default {hosts})")
    parser.add_argument("--bandwidth", type=_units(parse_bandwidth, "bandwidth"), default=100e6,
                        help="every link's rate, each direction (default 100Mbps)")
    parser.add_argument("--slow-host", type=_units(parse_bandwidth, "bandwidth"), metavar="RATE",
                        help="rate of one slower host (the last one unless --slow-rank)")
    parser.add_argument("--slow-rank", type=int, help="which host is the slow one")
    parser.add_argument("--burst", type=_units(parse_size, "size"),
                        help="tbf bucket size (default: max(10 frames, 1 ms at the rate))")
    parser.add_argument("--queue", type=_units(parse_time, "time"), default=0.1,
                        help="queue limit as drain time at the rate (default 100ms)")
    parser.add_argument("--mtu", type=int, default=1500, help="link MTU in bytes (default 1500)")
    parser.add_argument("--subnet", default="10.77.0.0/24", help="host addresses (default 10.77.0.0/24)")
    parser.add_argument("--master-port", type=int, default=29500, help="MASTER_PORT and {port}")
    parser.add_argument("--congestion-control", default="reno", metavar="NAME",
                        type=_units(parse_congestion_control, "congestion control"),
                        help="every host's TCP congestion control (default reno; 'system': this "
                             "machine's default for a new namespace)")
    parser.add_argument("--scheduling", choices=SCHEDULING_POLICIES, default="batch",
                        help="CPU scheduling policy of every host's processes (default batch: a "
                             "waking thread preempts no other, as on separate machines)")
    parser.add_argument("--host-cores", choices=HOST_CORES_POLICIES, default=DEFAULT_HOST_CORES,
                        help=HOST_CORES_HELP)
    parser.add_argument("--address-layout", choices=ADDRESS_LAYOUTS, default="fixed",
                        help="fixed (default): every host's processes start with address-space "
                             "randomization off, laid out alike from one launch to the next; "
                             "random: the machine's default")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m real.testbed", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="An emulated cluster on one machine: hosts in network namespaces on a bridge, "
                    "each link capped by tc tbf. Needs root and iproute2.")
    commands = parser.add_subparsers(dest="subcommand", required=True)
    run = commands.add_parser("run", help="run a command on every host",
                              description="Run COMMAND on every host. Placeholders: {rank} {hosts} "
                                          "{addr} {hostname} {master} {port} {out}.")
    _add_network_flags(run, hosts=2)
    run.add_argument("--timeout", type=_units(parse_time, "time"), default=1800.0,
                     help="stop every host after this long (default 30min)")
    run.add_argument("--out-dir", help="where each host's output goes (default: a new temporary folder)")
    run.add_argument("--json", metavar="FILE", help="write every host's exit status, output and JSON here")
    run.add_argument("--no-fail-fast", action="store_true", help="keep the others running when a host fails")
    run.add_argument("--quiet", action="store_true", help="do not echo the hosts' output")
    run.add_argument("--mpi", action="store_true",
                     help="run COMMAND as one MPI job: mpiexec on host 0, one process per host")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command (one shell string, or words)")
    cal = commands.add_parser("calibrate", help="measure latency and bandwidth between two hosts")
    _add_network_flags(cal, hosts=None)
    cal.add_argument("--sizes", default="2MB,16MB", help="two or more bulk transfer sizes (default 2MB,16MB)")
    cal.add_argument("--pings", type=int, default=200, help="1-byte round trips (default 200)")
    cal.add_argument("--repeats", type=int, default=3, help="transfers per size (default 3)")
    cal.add_argument("--no-gloo", action="store_true", help="skip the torch.distributed (Gloo) measurement")
    cal.add_argument("--attempts", type=int, default=LINK_ATTEMPTS,
                     help="calibrations at most: one whose transfers ran under the rate less "
                          "headers (a busy moment of the cores) is taken again, and the nearest "
                          f"kept (default {LINK_ATTEMPTS}; 1: never again)")
    cal.add_argument("--json", metavar="FILE", help="write the calibration record here")
    clean = commands.add_parser("cleanup", help="remove what crashed test beds left behind")
    clean.add_argument("--all", action="store_true", help="also remove test beds whose owner still runs")
    return parser


def config_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TestbedConfig:
    try:
        if args.json and getattr(args, "out_dir", None):
            folder = Path(args.json).resolve().parent  # host i's files are in OUT_DIR/host<i>
            if folder.parent == Path(args.out_dir).resolve() \
                    and re.fullmatch(r"host\d+", folder.name):
                raise ValueError(f"--json {args.json!r} is in a host's folder of --out-dir, "
                                 f"where the run writes that host's own files")
        network.check_congestion_control(args.congestion_control)
        check_output_file("--json", args.json)  # before the test bed is built, not after the run
        check_output_dir("--out-dir", getattr(args, "out_dir", None))
        if getattr(args, "timeout", 1.0) <= 0:
            raise ValueError(f"--timeout must be positive, got {args.timeout:g} s")
        return TestbedConfig(hosts=getattr(args, "hosts", 2), bandwidth_bps=args.bandwidth, slow_host_bps=args.slow_host,
                             slow_rank=args.slow_rank, burst_bytes=args.burst, queue_s=args.queue,
                             mtu_bytes=args.mtu, subnet=args.subnet, master_port=args.master_port,
                             congestion_control=args.congestion_control,
                             scheduling=args.scheduling, host_cores=args.host_cores,
                             address_layout=args.address_layout)
    except ValueError as exc:
        parser.error(str(exc))


def command_text(words: list[str], parser: argparse.ArgumentParser) -> str:
    """One word is a shell command line as it is; several are quoted and joined."""
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        parser.error("run needs a command after --")
    return words[0] if len(words) == 1 else shlex.join(words)


def unavailable() -> bool:
    """Whether no test bed can be made here (not root, no iproute2), said in one line; checked
    after the arguments, so that a bad value is said first and makes nothing."""
    reason = network.unavailable_reason()
    if reason:
        print(f"testbed: error: {reason}", file=sys.stderr)
    return bool(reason)


def cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config = config_from(args, parser)
    command = command_text(args.command, parser)
    try:
        if args.mpi:
            check_mpi_command(command)
    except ValueError as exc:
        parser.error(str(exc))
    if unavailable():
        return 1
    try:
        bed = Testbed(config, args.out_dir)
        if args.mpi:
            command = bed.mpiexec_command(command)
    except ValueError as exc:
        parser.error(str(exc))
    status = 1
    try:
        with bed:
            _say(f"test bed {bed.run_id}: {config.hosts} hosts, output in {bed.out_dir}")
            ranks = [0] if args.mpi else None
            result = bed.run(command, timeout_s=args.timeout,
                             fail_fast=not args.no_fail_fast, echo=not args.quiet, ranks=ranks)
        status = result.exit_status()
        for host in result.hosts:
            why = " (stopped)" if host.stopped else ""
            _say(f"host{host.rank} {host.address}: exit {host.returncode}{why} after {format_time(host.duration_s)}")
        if result.timed_out:
            _say(f"timed out after {format_time(args.timeout)}; every host was stopped")
    except KeyboardInterrupt as exc:
        status = 128 + getattr(exc, "signum", 2)
        _say("interrupted; every host was stopped and the test bed removed")
    finally:
        result = getattr(bed, "last_result", None)
        if args.json and result is not None:
            record = {"run_id": bed.run_id, "config": config.as_dict(), **result.as_dict()}
            if write_json_output("testbed", "--json", args.json, record, indent=2):
                status = status or 1  # the command's own failure, if any, is the one to report
    return status


def cmd_calibrate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config = config_from(args, parser)
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        check_calibration(config, sizes, args.pings, args.repeats, not args.no_gloo)
        if args.attempts < 1:
            raise ValueError(f"--attempts must be at least 1, got {args.attempts}")
    except ValueError as exc:
        parser.error(str(exc))
    if unavailable():
        return 1
    try:
        record = calibrate_near_rate(config, sizes, attempts=args.attempts, pings=args.pings,
                                     repeats=args.repeats, gloo=not args.no_gloo)
    except ValueError as exc:
        parser.error(str(exc))
    record["command"] = "python -m real.testbed " + shlex.join(sys.argv[1:])
    _say(f"rate {record['bandwidth_bps'] / 1e6:g} Mbit/s: goodput {record['goodput_bps'] / 1e6:.2f} Mbit/s "
         f"({record['payload_efficiency']:.4f} of the rate; headers alone: "
         f"{record['payload_efficiency_expected']:.4f}), latency {format_time(record['latency_s'])} "
         f"(median RTT/2 of {record['rtt_s']['count']})")
    for t in record["transfers"]:
        _say(f"  {t['bytes']} B: median {format_time(t['median_s'])}, {t['goodput_bps'] / 1e6:.2f} Mbit/s; "
             f"shaper model {format_time(t['shaper_model_s'])} ({t['shaper_model_error']:+.2%})")
    if "gloo" in record:
        gloo = record["gloo"]
        _say(f"Gloo send/recv: goodput {gloo['goodput_bps'] / 1e6:.2f} Mbit/s ({gloo['payload_efficiency']:.4f} of "
             f"the rate), latency {format_time(gloo['latency_s'])}, 1-element all_reduce "
             f"{format_time(gloo['all_reduce_1_element_s']['median'])}")
        for t in gloo["transfers"]:
            _say(f"  {t['bytes']} B: median {format_time(t['median_s'])}, {t['goodput_bps'] / 1e6:.2f} Mbit/s; "
                 f"shaper model {format_time(t['shaper_model_s'])} ({t['shaper_model_error']:+.2%})")
    return write_json_output("testbed", "--json", args.json, record, indent=2)


def cmd_cleanup(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if unavailable():
        return 1
    removed, skipped, problems = network.cleanup(include_live=args.all)
    for run_id in removed:
        _say(f"removed test bed {run_id}")
    for run_id in skipped:
        _say(f"kept test bed {run_id}: its owner is still running (--all removes it too)")
    for problem in problems:
        _say(f"could not remove: {problem}")
    if not removed and not skipped:
        _say("nothing to clean up")
    return 1 if problems else 0


def _say(text: str) -> None:
    print(f"testbed: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"run": cmd_run, "calibrate": cmd_calibrate, "cleanup": cmd_cleanup}
    try:
        with signals_raise():
            return handlers[args.subcommand](args, parser)
    except KeyboardInterrupt as exc:
        _say("interrupted; the test bed was removed")
        return 128 + getattr(exc, "signum", 2)
    except network.TestbedError as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run_command_line(main))
