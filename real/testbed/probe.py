"""A small TCP probe for measuring a test bed's network: round trips and bulk transfers.

Run one server and one client on two hosts; the client prints one JSON object on stdout::

    python probe.py server --port 5201
    python probe.py client --connect 10.77.0.2 --port 5201 --pings 200 --sizes 1000000,8000000 \
        --repeats 3 --idle 0.05

Round trips: a 1-byte message and its 1-byte answer, one at a time (TCP_NODELAY), after 20
discarded warm-up ones. Bulk: the client sends N bytes and times from its first byte to the
server's 1-byte acknowledgement of the last; before each transfer it waits ``--idle`` seconds so
the shaper's bucket is full again (every transfer sees the same burst).

This file imports only the standard library, so that it runs in any namespace with any Python.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from contextlib import contextmanager

HEADER = struct.Struct("!cQ")  # command (b"P" ping, b"B" bulk), count or size
CHUNK_BYTES = 1 << 20
WARMUP_PINGS = 20
MAX_PINGS = 1_000_000  # a session's round trips (the calibration asks for hundreds)
MAX_BULK_BYTES = 1 << 34  # 16 GiB in one transfer: a client asking for more is refused
MAX_REPEATS = 1000  # transfers of each size
MAX_SECONDS = 3600.0  # --connect-timeout
MAX_IDLE_S = 60.0  # --idle: a shaper's bucket refills in milliseconds at the test bed's rates
SILENT_CLIENT_S = 2 * MAX_IDLE_S  # a connected client that sends nothing this long is gone


@contextmanager
def ends_in_one_line(silent: str, failed: str):
    """Within it, a socket that times out ends the program with the line ``silent``, and any
    other socket error with ``failed``, then the error's own words (exit status 1)."""
    try:
        yield
    except TimeoutError:
        raise SystemExit(silent) from None
    except OSError as error:
        raise SystemExit(f"{failed}: {error.strerror or error}") from None


def serve(port: int, connect_timeout_s: float) -> None:
    """Answer one client: echo a byte per ping, acknowledge each bulk transfer once received.
    A client that asks for more than the limits, falls silent or leaves mid-message ends the
    server on one line (exit status 1)."""
    try:
        listener = socket.create_server(("0.0.0.0", port), reuse_port=False)
    except OSError as error:
        raise SystemExit(f"probe server: cannot listen on port {port}: {error.strerror or error}")
    listener.settimeout(connect_timeout_s)
    try:
        conn, _ = listener.accept()
    except TimeoutError:
        raise SystemExit(f"probe server: no client connected within {connect_timeout_s:g} s")
    finally:
        listener.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(max(SILENT_CLIENT_S, connect_timeout_s))
    try:
        with ends_in_one_line(f"probe server: the client sent nothing for {conn.gettimeout():g} s",
                              "probe server: the connection failed"):
            _answer(conn)
    finally:
        conn.close()


def _answer(conn: socket.socket) -> None:
    while header := _recv_exactly(conn, HEADER.size):
        command, count = HEADER.unpack(header)
        if command == b"P":
            if count > MAX_PINGS + WARMUP_PINGS:
                raise SystemExit(f"probe server: a client asked for {count} round trips "
                                 f"(at most {MAX_PINGS + WARMUP_PINGS})")
            for _ in range(count):
                byte = _recv_exactly(conn, 1)
                if not byte:
                    raise SystemExit("probe server: client closed the connection mid-ping")
                conn.sendall(byte)
        elif command == b"B":
            if count > MAX_BULK_BYTES:
                raise SystemExit(f"probe server: a client asked for a {count}-byte transfer "
                                 f"(at most {MAX_BULK_BYTES})")
            _drain(conn, count)
            conn.sendall(b"k")
        else:
            raise SystemExit(f"probe server: unknown command {command!r}")


def _recv_exactly(conn: socket.socket, n_bytes: int) -> bytes:
    data = b""
    while len(data) < n_bytes:
        chunk = conn.recv(n_bytes - len(data))
        if not chunk:
            if data:
                raise SystemExit("probe: peer closed the connection mid-message")
            return b""
        data += chunk
    return data


def _drain(conn: socket.socket, n_bytes: int) -> None:
    buffer = bytearray(CHUNK_BYTES)
    left = n_bytes
    while left:
        got = conn.recv_into(buffer, min(left, CHUNK_BYTES))
        if not got:
            raise SystemExit("probe server: client closed the connection mid-transfer")
        left -= got


def connect(address: str, port: int, timeout_s: float) -> socket.socket:
    """Connect, retrying while the server is still starting (up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=timeout_s)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"probe client: no server at {address}:{port} after {timeout_s} s")
            time.sleep(0.05)


def round_trips(conn: socket.socket, count: int) -> list[float]:
    """Seconds of each of ``count`` 1-byte round trips (warm-up ones not included)."""
    conn.sendall(HEADER.pack(b"P", count + WARMUP_PINGS))
    times = []
    for i in range(count + WARMUP_PINGS):
        start = time.perf_counter()
        conn.sendall(b"p")
        _recv_exactly(conn, 1)
        if i >= WARMUP_PINGS:
            times.append(time.perf_counter() - start)
    return times


def bulk(conn: socket.socket, n_bytes: int) -> float:
    """Seconds from sending the first of ``n_bytes`` to the server's acknowledgement of the last."""
    payload = memoryview(bytes(CHUNK_BYTES))
    conn.sendall(HEADER.pack(b"B", n_bytes))
    start = time.perf_counter()
    left = n_bytes
    while left:
        step = min(left, CHUNK_BYTES)
        conn.sendall(payload[:step])
        left -= step
    if _recv_exactly(conn, 1) != b"k":
        raise SystemExit("probe client: bad acknowledgement")
    return time.perf_counter() - start


def run_client(args: argparse.Namespace) -> dict:
    conn = connect(args.connect, args.port, args.connect_timeout)
    try:
        with ends_in_one_line(f"probe client: the server sent nothing for {conn.gettimeout():g} s",
                              "probe client: the connection failed"):
            result = {"ping_rtt_s": round_trips(conn, args.pings), "bulk": []}
            for n_bytes in args.sizes:
                times = []
                for _ in range(args.repeats):
                    time.sleep(args.idle)
                    times.append(bulk(conn, n_bytes))
                result["bulk"].append({"bytes": n_bytes, "seconds": times})
    finally:
        conn.close()
    return result


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``PROG: error: MESSAGE``, and exit status 2 (as
    dsgd_sim's OneLineArgumentParser; this file imports only the standard library)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def byte_counts(text: str) -> list[int]:
    """``--sizes``: comma-separated positive byte counts, none over ``MAX_BULK_BYTES``."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or max(sizes) > MAX_BULK_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of positive byte counts "
                                         f"(each at most {MAX_BULK_BYTES})")
    return sizes


def bounded(kind, low, high, what: str):
    """An argparse type: a number of ``kind`` from ``low`` to ``high`` (a finite one)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:  # NaN fails both comparisons
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} from {low:g} to {high:g}")
        return value
    return parse


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["server", "client"],
                        help="server: wait for the client; client: connect and time")
    parser.add_argument("--port", type=bounded(int, 1, 65535, "a port"), default=5201,
                        help="the server's TCP port (default %(default)s)")
    parser.add_argument("--connect", help="server address (client)")
    parser.add_argument("--connect-timeout", type=bounded(float, 1e-3, MAX_SECONDS, "seconds"),
                        default=10.0, help="seconds")
    parser.add_argument("--pings", type=bounded(int, 1, MAX_PINGS, "a count"), default=200,
                        help="small round trips timed (default %(default)s)")
    parser.add_argument("--sizes", type=byte_counts, default=[8_000_000],
                        help="comma-separated byte counts of bulk transfers")
    parser.add_argument("--repeats", type=bounded(int, 1, MAX_REPEATS, "a count"), default=3,
                        help="transfers of each size (default %(default)s)")
    parser.add_argument("--idle", type=bounded(float, 0, MAX_IDLE_S, "seconds"), default=0.05,
                        help="seconds idle before each transfer")
    args = parser.parse_args(argv)
    if args.role == "server":
        serve(args.port, args.connect_timeout)
    else:
        if not args.connect:
            parser.error("client needs --connect ADDRESS")
        json.dump(run_client(args), sys.stdout)
        print()


if __name__ == "__main__":
    main()
