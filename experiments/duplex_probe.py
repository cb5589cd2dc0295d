"""Both hosts of a 2-host test bed send to each other at once: the payload rate of a busy duplex link.

A calibration transfer (``real/testbed/probe.py``) goes one way; its ACKs travel on the idle
reverse link. In a ring all-reduce every host sends to its right and receives from its left at the
same time, so each uplink carries its own data *and* the ACKs of the data it receives, which also
queue behind that data. This probe measures exactly that, on the network alone: two TCP
connections (0→1 and 1→0, as a ring's two neighbours), both directions started together.

Run by the experiment runner on both hosts (``HOST_RANK`` 0 or 1 from the test bed)::

    python experiments/duplex_probe.py --peer ADDR --sizes 2000000,16000000 --json OUT.json

Writes, from each host, ``{"bulk": [{"bytes": n, "seconds": [...]}, ...]}``: the time from the
start until this host has received all ``n`` bytes from its peer and sent all of its own. A peer
that does not connect, connect back or send within ``--timeout`` ends the probe on one line.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import (OneLineArgumentParser, argparse_type,  # noqa: E402
                                       check_output_file, run_command_line, write_json_output)
from dsgd_sim.units import format_bytes, format_time, parse_time  # noqa: E402
from real.testbed.probe import byte_counts, ends_in_one_line  # noqa: E402

CHUNK = 1 << 20
MAX_SIZE_BYTES = 256_000_000  # 16 times the experiments' largest; the payload is held in memory
MAX_IDLE_S = 60.0  # a shaper's bucket refills in milliseconds at the experiments' rates
MAX_TIMEOUT_S = 3600.0  # a peer silent this long is gone (experiments give the probe 300 s)


def connect(peer: str, port: int, timeout_s: float = 20.0,
            tool: str = "duplex_probe") -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((peer, port), timeout=timeout_s)
            sock.settimeout(None)  # the timeout was the connect's: a long transfer may take longer
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{tool}: cannot connect to {peer}:{port}")
            time.sleep(0.05)


def receive(sock: socket.socket, n: int, tool: str = "duplex_probe") -> None:
    while n:
        data = sock.recv(min(CHUNK, n))
        if not data:
            raise SystemExit(f"{tool}: peer closed the connection")
        n -= len(data)


def send_all(sock: socket.socket, data: bytes, failed: list) -> None:
    """``sock.sendall(data)`` in a thread: an error is kept in ``failed`` for the main thread."""
    try:
        sock.sendall(data)
    except OSError as error:
        failed.append(error)
        sock.shutdown(socket.SHUT_RDWR)  # the peer's receive ends too, instead of waiting


def connect_both(args) -> tuple[socket.socket, socket.socket]:
    """(outgoing, incoming): our connection to the peer and the peer's to us. The incoming one
    waits at most ``args.timeout`` for each receive; the outgoing one has no timeout, as
    ``sendall``'s would bound a whole transfer (a silent peer ends the receive instead)."""
    try:
        listener = socket.create_server(("0.0.0.0", args.port), reuse_port=True)
    except OSError as error:
        raise SystemExit(f"duplex_probe: cannot listen on port {args.port}: {error}")
    listener.settimeout(args.timeout)
    outgoing = connect(args.peer, args.port, args.timeout)
    try:
        incoming, _ = listener.accept()
    except TimeoutError:
        raise SystemExit(f"duplex_probe: {args.peer} did not connect back to port {args.port} "
                         f"within {format_time(args.timeout)}")
    incoming.settimeout(args.timeout)
    for sock in (outgoing, incoming):  # no Nagle: a small payload right after the sync byte must
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # not wait for that byte's ACK
    return outgoing, incoming


def exchange(outgoing: socket.socket, incoming: socket.socket, args) -> list[dict]:
    """Per size, the seconds of each repeat until both directions have carried it."""
    rows = [{"bytes": n, "seconds": []} for n in args.sizes]
    for _ in range(args.repeats):  # sizes interleaved: a burst of other load spreads over all sizes
        for n, row in zip(args.sizes, rows):
            outgoing.sendall(b"s")  # both ready, then both pause so every bucket refills
            receive(incoming, 1)
            time.sleep(args.idle)
            start = time.perf_counter()
            failed: list = []
            # a daemon: a receive that fails must not leave the process waiting for this send
            sender = threading.Thread(target=send_all, args=(outgoing, b"\0" * n, failed),
                                      daemon=True)
            sender.start()
            receive(incoming, n)
            sender.join()
            if failed:
                raise SystemExit(f"duplex_probe: sending {n} bytes failed: {failed[0]}")
            row["seconds"].append(time.perf_counter() - start)
    return rows


def add_timeout_and_json(parser, timeout_help: str) -> None:
    """The flags every network probe takes: how long a peer may be silent, and its output."""
    parser.add_argument("--timeout", type=argparse_type(parse_time, "time"), default="20s",
                        help=f"{timeout_help}, e.g. 20s (default: %(default)s)")
    parser.add_argument("--json", required=True, metavar="FILE", help="write the timings here")


def parse_checked(parser, argv: list[str] | None):
    """``parser``'s arguments, with a ``--json`` that cannot be written and a ``--timeout`` out of
    range refused as usage errors (``add_timeout_and_json``)."""
    args = parser.parse_args(argv)
    try:
        check_output_file("--json", args.json)
    except ValueError as error:
        parser.error(str(error))
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        parser.error(f"--timeout must be more than 0 and at most {MAX_TIMEOUT_S:g} s, "
                     f"got {format_time(args.timeout)}")
    return args


def parse_args(argv: list[str] | None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="the other host's address")
    parser.add_argument("--port", type=int, default=5202,
                        help="TCP port both hosts listen on (default %(default)s)")
    parser.add_argument("--sizes", type=byte_counts, default=[2_000_000, 16_000_000],
                        help="bytes each way, comma-separated")
    parser.add_argument("--repeats", type=int, default=3,
                        help="transfers of each size (default %(default)s)")
    parser.add_argument("--idle", type=float, default=0.05, help="seconds of pause before each transfer")
    add_timeout_and_json(parser, "how long the peer may take to connect, connect back or send")
    args = parse_checked(parser, argv)
    if not 0 < args.port < 65536 or args.repeats < 1 or not 0 <= args.idle <= MAX_IDLE_S:
        parser.error(f"--port must be from 1 to 65535, --repeats at least 1 and --idle seconds "
                     f"from 0 to {MAX_IDLE_S:g}, got {args.port}, {args.repeats} and {args.idle}")
    if max(args.sizes) > MAX_SIZE_BYTES:
        parser.error(f"--sizes must be at most {format_bytes(MAX_SIZE_BYTES)} "
                     f"({MAX_SIZE_BYTES} bytes), got {max(args.sizes)}")
    return args


def probe(args) -> list[dict]:
    """Connect both ways and time the exchanges; a silent or failing peer ends it on one line."""
    outgoing, incoming = connect_both(args)
    try:
        with ends_in_one_line(f"duplex_probe: {args.peer} sent nothing for "
                              f"{format_time(args.timeout)}",
                              f"duplex_probe: the exchange with {args.peer} failed"):
            return exchange(outgoing, incoming, args)
    finally:
        outgoing.close()
        incoming.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    text = os.environ.get("HOST_RANK", "-1")  # read before the transfers, which a bad one would lose
    try:
        host_rank = int(text)
    except ValueError:
        raise SystemExit(f"duplex_probe: HOST_RANK={text!r} is not a whole number") from None
    rows = probe(args)
    return write_json_output("duplex_probe", "--json", args.json,
                             {"host_rank": host_rank, "bulk": rows})


if __name__ == "__main__":
    sys.exit(run_command_line(main))
