"""Server instructions per SEND and per transaction of one message (callgrind), this checkout
next to an older one.

Instruction counts hold steady on a shared, noisy machine where the wall clock does not.
Per checkout, an ``fmq server`` (flush_mode sync: every answer after fdatasync) runs under
``valgrind --tool=callgrind``; a client in this process sends it ``--requests`` requests
over TCP, in windows of 64 frames written at once (64 producers' worth of one event-loop
turn), each window answered before the next goes. Instructions are counted only while those
windows run (``callgrind_control`` turns the instrumentation on and off, every thread of
the server), so start-up, recovery and shut-down are left out; divided by the requests,
what is left is one request's cost on the server (decode, checks, placement, answer, and
its share of its window's flush and of whatever the server's own timers did meanwhile).
Not part of the test run::

    python bench/send_path_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--requests 1024]
        [--only send|tx|batch] [--keep DIR] [--writes | --syscalls]

``--connections N`` (``send`` only): N connections, each with one SEND in flight (a window
is one SEND written on each, then every answer read: row 1's load of N producers), instead
of windows on one connection.

``--keep DIR`` keeps each run's callgrind file in DIR (``callgrind.<tree>.<kind>``), for
``callgrind_annotate --inclusive=yes`` to tell where the instructions go.

``--writes`` counts, instead of instructions, the server's write system calls per request
under the same windows (``strace -f -c``, every thread; needs strace); ``--syscalls`` every
system call, by name.

``send``: SEND of one 1 KiB message. ``tx``: a transaction of one 1 KiB message, its PREPARE
and its COMMIT (two requests, both counted as one transaction). ``batch``: SEND_BATCH of 16
1 KiB messages, counted per message (not part of the default run). ``tx-with-next`` (not
part of the default run): the same transactions with each COMMIT written in one write with
its producer's next PREPARE (``TransactionProducer.commit_with_next``): a window holds, per
producer, the COMMIT of its last transaction and the PREPARE of its next one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import collected, collecting, stop  # noqa: E402
from bench.ab_rounds import fmq_command, parser, trees  # noqa: E402
from bench.bench_network import free_port  # noqa: E402
from fmq.protocol import HEADER_SIZE, Frame, Op, decode_response, encode_request  # noqa: E402
from fmq.protocol.framing import HEADER, LENGTH  # noqa: E402

WINDOW = 64
BATCH = 16  # messages per SEND_BATCH of ``batch``
BODY = b"x" * 1024
TOPIC = "fmq-instr"


def _message() -> dict:
    return {"topic": TOPIC, "body": BODY, "key": None, "tags": None, "properties": {},
            "queue_id": -1}


class RawClient:
    """Frames written and answers read on one socket, without the SDK (the client's own
    work is not what is measured, and this keeps every window the same)."""

    def __init__(self, port: int) -> None:
        deadline = time.monotonic() + 600  # a server under valgrind starts slowly
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.rid = 0

    def window(self, requests: list[tuple[int, dict]]) -> list[dict]:
        """Send ``requests`` (opcode, fields) in one write; their answers' fields."""
        self.write(requests)
        return [self._answer() for _ in requests]

    def write(self, requests: list[tuple[int, dict]]) -> None:
        """Send ``requests`` (opcode, fields) in one write."""
        out = []
        for op, fields in requests:
            self.rid += 1
            out.append(encode_request(op, self.rid, fields))
        self.sock.sendall(b"".join(out))

    def answers(self, count: int) -> list[dict]:
        """The fields of the next ``count`` answers."""
        return [self._answer() for _ in range(count)]

    def _answer(self) -> dict:
        while True:
            if len(self.buf) >= 4:
                (n,) = LENGTH.unpack_from(self.buf, 0)
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    version, op, flags, rid = HEADER.unpack_from(frame, 0)
                    if flags & 2:
                        raise SystemExit(f"the server refused a request: {frame[HEADER_SIZE:]!r}")
                    return decode_response(Frame(version, op, flags, rid, frame[HEADER_SIZE:]))
            data = self.sock.recv(1 << 20)
            if not data:
                raise SystemExit("the server closed the connection")
            self.buf += data


class Producers:
    """Several connections, each a producer with one SEND in flight: a window is one SEND
    written on each, then each one's answer read (row 1's load, ``--connections``)."""

    def __init__(self, port: int, connections: int) -> None:
        self.clients = [RawClient(port) for _ in range(connections)]

    def sends(self, requests: int) -> None:
        for _ in range(requests // len(self.clients)):
            for client in self.clients:
                client.write([(Op.SEND, {"message": _message()})])
            for client in self.clients:
                client.answers(1)

    def close(self) -> None:
        for client in self.clients:
            client.sock.close()


def drive_tx_with_next(client: RawClient, requests: int, window: int) -> None:
    """``requests`` transactions, each producer's COMMIT in the window of its next PREPARE;
    the last window's transactions committed by a window of COMMITs alone."""
    prepared: list[str] = []
    for _ in range(requests // window):
        frames: list[tuple[int, dict]] = []
        for i in range(window):
            if prepared:
                frames.append((Op.COMMIT, {"producer_group": "g", "tx_id": prepared[i]}))
            frames.append((Op.PREPARE, {"producer_group": "g", "tx_id": None,
                                        "messages": [_message()]}))
        prepared = [a["tx_id"] for a in client.window(frames) if "tx_id" in a]
    client.window([(Op.COMMIT, {"producer_group": "g", "tx_id": t}) for t in prepared])


def drive(client: RawClient, kind: str, requests: int, window: int = WINDOW) -> None:
    if kind == "tx-with-next":
        drive_tx_with_next(client, requests, window)
        return
    for _ in range(requests // window):
        if kind == "send":
            client.window([(Op.SEND, {"message": _message()})] * window)
            continue
        if kind == "batch":
            client.window([(Op.SEND_BATCH, {"messages": [_message()] * BATCH})] * window)
            continue
        prepared = client.window([(Op.PREPARE, {"producer_group": "g", "tx_id": None,
                                                "messages": [_message()]})] * window)
        client.window([(Op.COMMIT, {"producer_group": "g", "tx_id": a["tx_id"]})
                       for a in prepared])


def server_instructions(tree: str, kind: str, requests: int, scratch: str,
                        window: int = WINDOW, connections: int = 1) -> int:
    """The instructions a server of ``tree`` spent serving ``requests`` of ``kind``: counted
    only while the client drives them (``callgrind_control`` turns counting on after a
    warm-up window and off before the server stops), so start-up and shut-down are left out."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="data-", dir=scratch)
    out = os.path.join(scratch, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no",
         f"--callgrind-out-file={out}", *fmq_command(tree), "server", "--data-dir", data,
         "--port", str(port), "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
    try:
        if connections > 1:  # one SEND in flight on each
            producers = Producers(port, connections)
            producers.sends(WINDOW)  # the topic made, the first segment and caches warm
            with collecting(proc.pid):
                producers.sends(requests)
            producers.close()
        else:
            client = RawClient(port)
            drive(client, kind, WINDOW)  # the topic made, the first segment and caches warm
            with collecting(proc.pid):
                drive(client, kind, requests, window)
            client.sock.close()
    finally:
        err = stop(proc)
    instructions = collected(err)
    return instructions


WRITES = ("write", "writev", "sendmsg", "sendto")


def server_writes(tree: str, kind: str, requests: int, scratch: str,
                  calls_of: tuple[str, ...] | None = WRITES) -> dict[str, float]:
    """The write system calls a server of ``tree`` made per request while serving
    ``requests`` of ``kind`` (``strace -f -c`` of every thread, counted from a warm-up
    window on, as :func:`server_instructions` counts): ``write``, ``writev``, ``sendmsg``
    and ``sendto`` (answers, and the log's and the index's writes, which the same requests
    make on both trees); ``calls_of`` None: every system call, by name."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="data-", dir=scratch)
    out = os.path.join(scratch, "strace.out")
    proc = subprocess.Popen(
        [*fmq_command(tree), "server", "--data-dir", data, "--port", str(port),
         "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
    try:
        client = RawClient(port)
        drive(client, kind, WINDOW)
        only = ["-e", "trace=" + ",".join(calls_of)] if calls_of else []
        tracer = subprocess.Popen(["strace", "-f", "-c", "-q", "-o", out, *only, "-p",
                                   str(proc.pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # strace attaches to every thread
        drive(client, kind, requests)
        tracer.terminate()
        tracer.wait(60)
        client.sock.close()
    finally:
        proc.terminate()
        proc.wait(60)
    calls: dict[str, float] = {}
    with open(out, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            # % time, seconds, usecs/call, calls, [errors,] name
            if (len(parts) >= 5 and parts[3].isdigit() and parts[-1] != "total"
                    and (calls_of is None or parts[-1] in calls_of)):
                calls[parts[-1]] = int(parts[3]) / requests
    return calls


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=1024,
                    help="transactions or sends of the short run, a multiple of 64")
    ap.add_argument("--only", choices=("send", "tx", "batch", "tx-with-next"), default=None)
    ap.add_argument("--window", type=int, default=WINDOW,
                    help="requests written at once, each window answered before the next (1: "
                         "one request in flight, as a producer that waits for each answer)")
    ap.add_argument("--keep", default=None, help="a directory to keep the callgrind files in")
    ap.add_argument("--writes", action="store_true",
                    help="count write system calls per request (strace) instead of instructions")
    ap.add_argument("--connections", type=int, default=1,
                    help="SENDs on this many connections, one in flight on each (row 1's "
                         "load; --only send), instead of windows on one")
    ap.add_argument("--syscalls", action="store_true",
                    help="count every system call per request (strace), by name")
    args = ap.parse_args()
    if args.writes or args.syscalls:
        for kind in [args.only] if args.only else ["send"]:
            for name, tree in trees(args.old).items():
                with tempfile.TemporaryDirectory(prefix="fmq-send-writes-") as tmp:
                    calls = server_writes(tree, kind, args.requests, tmp,
                                          None if args.syscalls else WRITES)
                what = "system calls" if args.syscalls else "write system calls"
                print(f"{name}: {what} per {kind} request: {sum(calls.values()):.3f}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in sorted(calls.items())
                                  if v >= 0.001), flush=True)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    kinds = [args.only] if args.only else ["send", "tx"]
    for kind in kinds:
        for name, tree in trees(args.old).items():
            with tempfile.TemporaryDirectory(prefix="fmq-send-instr-") as tmp:
                count = server_instructions(tree, kind, args.requests, tmp, args.window,
                                            args.connections)
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    shutil.copy(os.path.join(tmp, "callgrind.out"),
                                os.path.join(args.keep, f"callgrind.{name}.{kind}"))
            what = {"send": "SEND", "tx": "transaction of one message",
                    "batch": f"message sent in SEND_BATCHes of {BATCH}",
                    "tx-with-next": "transaction of one message, its COMMIT written with "
                                    "the next PREPARE"}[kind]
            per = args.requests * (BATCH if kind == "batch" else 1)
            print(f"{name}: {count / per:,.0f} server instructions per {what}", flush=True)


if __name__ == "__main__":
    main()
