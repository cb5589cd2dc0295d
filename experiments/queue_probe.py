"""How long a small message waits behind a long one its sender is sending: the queue a TCP flow keeps in a shaped link.

Three hosts of a test bed. Host 0 sends ``--bytes`` to host 2 (a reply leaving a parameter
server), ``--repeats`` times with ``--idle`` between, and all the while sends one byte at a time
to host 1, which echoes it: each echo's round trip crosses host 0's outbound link behind the long
message's bytes, so it measures that link's queue. Round trips with no long message in flight,
before each repeat, are the baseline. Under Gloo the notice that lets a gradient in is such a
message (``docs/async.md``, the notice).

Run by the experiment runner on the three hosts (``HOST_RANK`` 0, 1 or 2 from the test bed)::

    python experiments/queue_probe.py --bytes 1000000 --repeats 5 --json OUT.json

Host 0 writes ``{"host_rank": 0, "bytes": n, "repeats": [{"transfer_s": t, "idle_rtt_s": [...],
"loaded": [[since_start_s, rtt_s], ...]}, ...]}``; hosts 1 and 2 write their rank and role. A peer
that does not connect or answer within ``--timeout`` ends the probe on one line.
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
                                       run_command_line, write_json_output)
from dsgd_sim.units import format_bytes, format_time, parse_size, parse_time  # noqa: E402
from real.testbed.probe import ends_in_one_line  # noqa: E402
from experiments.duplex_probe import (add_timeout_and_json, connect, parse_checked,  # noqa: E402
                                      receive)

CHUNK = 1 << 20
IDLE_PINGS = 5  # round trips timed before each long message, with nothing in flight
PING_EVERY_S = 0.001  # a pause between two round trips, so the pings add no queue of their own
MAX_BYTES = 64_000_000  # held in memory; 10 s at 50 Mbit/s
MAX_IDLE_S = 60.0
ROLES = {0: "sender", 1: "echo", 2: "sink"}
TOOL = "queue_probe"  # how its errors begin


def no_delay(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one byte goes out at once
    return sock


def accept_one(port: int, timeout_s: float) -> socket.socket:
    """The first connection to ``port`` (host 0's), waiting at most ``timeout_s``."""
    try:
        listener = socket.create_server(("0.0.0.0", port), reuse_port=True)
    except OSError as error:
        raise SystemExit(f"queue_probe: cannot listen on port {port}: {error}")
    listener.settimeout(timeout_s)
    try:
        sock, _ = listener.accept()
    except TimeoutError:
        raise SystemExit(f"queue_probe: host 0 did not connect to port {port} within "
                         f"{format_time(timeout_s)}")
    finally:
        listener.close()
    sock.settimeout(timeout_s)
    return no_delay(sock)


def echo(args) -> None:
    """Host 1: send back every byte host 0 sends, until it closes."""
    sock = accept_one(args.port + 1, args.timeout)
    with sock:
        while data := sock.recv(CHUNK):
            sock.sendall(data)


def sink(args) -> None:
    """Host 2: take each long message whole, then say so with one byte, until host 0 closes."""
    sock = accept_one(args.port, args.timeout)
    with sock:
        while True:
            first = sock.recv(1)
            if not first:
                return
            receive(sock, args.bytes - 1, TOOL)
            sock.sendall(b"d")


def ping(sock: socket.socket) -> float:
    start = time.perf_counter()
    sock.sendall(b"p")
    receive(sock, 1, TOOL)
    return time.perf_counter() - start


def send_long(sock: socket.socket, n: int, done: list) -> None:
    """Send ``n`` bytes and wait for the sink's word that all arrived; the time, or the error."""
    try:
        sock.sendall(b"\0" * n)
        receive(sock, 1, TOOL)
        done.append(time.perf_counter())
    except (OSError, SystemExit) as error:
        done.append(error)


def sender(args) -> list[dict]:
    """Host 0: per repeat the baseline round trips, then the round trips while the long message
    is in flight (each with its start, from the message's start) and how long it took."""
    pinger = no_delay(connect("host1", args.port + 1, args.timeout, TOOL))
    long = no_delay(connect("host2", args.port, args.timeout, TOOL))
    pinger.settimeout(args.timeout)
    long.settimeout(args.timeout)
    repeats = []
    with pinger, long:
        for _ in range(args.repeats):
            time.sleep(args.idle)
            idle = [ping(pinger) for _ in range(IDLE_PINGS)]
            time.sleep(args.idle)
            done: list = []
            thread = threading.Thread(target=send_long, args=(long, args.bytes, done), daemon=True)
            start = time.perf_counter()
            thread.start()
            loaded = []
            while not done:
                sent = time.perf_counter() - start
                loaded.append([sent, ping(pinger)])
                time.sleep(PING_EVERY_S)
            thread.join()
            if not isinstance(done[0], float):
                raise SystemExit(f"queue_probe: sending {args.bytes} bytes to host 2 failed: "
                                 f"{done[0]}")
            repeats.append({"transfer_s": done[0] - start, "idle_rtt_s": idle, "loaded": loaded})
    return repeats


def parse_args(argv: list[str] | None):
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=argparse_type(parse_size, "size"), default="1MB",
                        help="the long message, e.g. 1MB (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="long messages timed (default %(default)s)")
    parser.add_argument("--idle", type=argparse_type(parse_time, "time"), default="50ms",
                        help="pause before each baseline and each long message, so the shaper's "
                             "bucket refills (default: %(default)s)")
    parser.add_argument("--port", type=int, default=5302,
                        help="host 2 listens here, host 1 on the next port")
    add_timeout_and_json(parser, "how long a peer may take to connect or answer")
    args = parse_checked(parser, argv)
    if not 1 <= args.bytes <= MAX_BYTES:
        parser.error(f"--bytes must be from 1 B to {format_bytes(MAX_BYTES)}, got {args.bytes}")
    if not 0 < args.port < 65535 or args.repeats < 1 or not 0 <= args.idle <= MAX_IDLE_S:
        parser.error(f"--port must be from 1 to 65534, --repeats at least 1 and --idle from 0 to "
                     f"{MAX_IDLE_S:g} s, got {args.port}, {args.repeats} and "
                     f"{format_time(args.idle)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    text = os.environ.get("HOST_RANK", "")
    rank = int(text) if text.isascii() and text.isdigit() else -1
    if rank not in ROLES:
        raise SystemExit(f"queue_probe: runs on the hosts 0, 1 and 2 of a test bed (HOST_RANK), "
                         f"got HOST_RANK={os.environ.get('HOST_RANK')!r}")
    record = {"host_rank": rank, "role": ROLES[rank]}
    with ends_in_one_line(f"queue_probe: a peer sent nothing for {format_time(args.timeout)}",
                          "queue_probe: the exchange failed"):
        if rank == 0:
            record.update({"bytes": args.bytes, "repeats": sender(args)})
        elif rank == 1:
            echo(args)
        else:
            sink(args)
    return write_json_output("queue_probe", "--json", args.json, record)


if __name__ == "__main__":
    sys.exit(run_command_line(main))
