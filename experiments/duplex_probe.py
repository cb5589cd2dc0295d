"""Both hosts of a 2-host test bed send to each other at once: the payload rate of a busy duplex link.

A calibration transfer (``real/testbed/probe.py``) goes one way; its ACKs travel on the idle
reverse link. In a ring all-reduce every host sends to its right and receives from its left at the
same time, so each uplink carries its own data *and* the ACKs of the data it receives, which also
queue behind that data. This probe measures exactly that, on the network alone: two TCP
connections (0→1 and 1→0, as a ring's two neighbours), both directions started together.

Run by the experiment runner on both hosts (``HOST_RANK`` 0 or 1 from the test bed)::

    python experiments/duplex_probe.py --peer ADDR --sizes 2000000,16000000 --json OUT.json

Writes, from each host, ``{"bulk": [{"bytes": n, "seconds": [...]}, ...]}``: the time from the
start until this host has received all ``n`` bytes from its peer and sent all of its own.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsgd_sim.argparse_oneline import OneLineArgumentParser, check_output_file  # noqa: E402
from real.testbed.probe import byte_counts  # noqa: E402

CHUNK = 1 << 20


def connect(peer: str, port: int, timeout_s: float = 20.0) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((peer, port), timeout=timeout_s)
            sock.settimeout(None)  # the timeout was the connect's: a long transfer may take longer
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"duplex_probe: cannot connect to {peer}:{port}")
            time.sleep(0.05)


def receive(sock: socket.socket, n: int) -> None:
    while n:
        data = sock.recv(min(CHUNK, n))
        if not data:
            raise SystemExit("duplex_probe: peer closed the connection")
        n -= len(data)


def send_all(sock: socket.socket, data: bytes, failed: list) -> None:
    """``sock.sendall(data)`` in a thread: an error is kept in ``failed`` for the main thread."""
    try:
        sock.sendall(data)
    except OSError as error:
        failed.append(error)
        sock.shutdown(socket.SHUT_RDWR)  # the peer's receive ends too, instead of waiting


def main(argv: list[str] | None = None) -> None:
    parser = OneLineArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="the other host's address")
    parser.add_argument("--port", type=int, default=5202)
    parser.add_argument("--sizes", type=byte_counts, default=[2_000_000, 16_000_000],
                        help="bytes each way, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle", type=float, default=0.05, help="seconds of pause before each transfer")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    try:
        check_output_file("--json", args.json)
    except ValueError as error:
        parser.error(str(error))
    if not 0 < args.port < 65536 or args.repeats < 1 or not 0 <= args.idle < float("inf"):
        parser.error(f"--port must be from 1 to 65535, --repeats at least 1 and --idle seconds "
                     f"of at least 0, got {args.port}, {args.repeats} and {args.idle}")
    listener = socket.create_server(("0.0.0.0", args.port), reuse_port=True)
    outgoing = connect(args.peer, args.port)
    incoming, _ = listener.accept()
    for sock in (outgoing, incoming):  # no Nagle: a small payload right after the sync byte must
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # not wait for that byte's ACK
    sizes = args.sizes
    rows = [{"bytes": n, "seconds": []} for n in sizes]
    for _ in range(args.repeats):  # sizes interleaved: a burst of other load spreads over all sizes
        for n, row in zip(sizes, rows):
            outgoing.sendall(b"s")  # both ready, then both pause so every bucket refills
            receive(incoming, 1)
            time.sleep(args.idle)
            start = time.perf_counter()
            failed: list = []
            sender = threading.Thread(target=send_all, args=(outgoing, b"\0" * n, failed))
            sender.start()
            receive(incoming, n)
            sender.join()
            if failed:
                raise SystemExit(f"duplex_probe: sending {n} bytes failed: {failed[0]}")
            row["seconds"].append(time.perf_counter() - start)
    with open(args.json, "w") as handle:
        json.dump({"host_rank": int(os.environ.get("HOST_RANK", -1)), "bulk": rows}, handle)
    outgoing.close()
    incoming.close()


if __name__ == "__main__":
    main()
