"""Server instructions per PULL and per COMMIT_OFFSET request (callgrind), this checkout next
to an older one: what a consumer's requests cost the server, the request step included
(``bench/pull_instructions.py`` counts the read alone).

Per checkout, an ``fmq server`` (flush_mode sync) runs under ``valgrind --tool=callgrind``;
a raw client (``send_path_instructions.RawClient``) fills a topic of four queues with 1 KiB
messages and pulls each queue once (so the server keeps their tails), all before counting;
then, counted (``callgrind_control`` turns the instrumentation on and off, every thread of
the server), it sends ``--requests`` requests in windows of 64 frames written at once,
each window answered before the next goes. Divided by the requests, what is left is one
request's cost on the server. Not part of the test run::

    python bench/read_request_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT]
        [--requests 1024] [--messages 1] [--groups 2]
        [--only pull|shared|commit|woken|follow] [--keep DIR]

``pull``: a following consumer's PULL of one message from a queue's tail, answered at once
(``wait_ms`` 1000: a long poll that finds its message); ``--messages N``: of N messages
each (a consumer that fell behind; ``--requests 128`` keeps the fill small). ``shared``: the same pulls by two
connections (``--groups N``: N; consumer groups of one queue) one window after the other, so
the others find what the first kept; counted per PULL. ``commit``: COMMIT_OFFSET of one queue.
``woken``: a window of one-message PULLs of offsets not yet written (``wait_ms`` 10000: long
polls that wait), then, from a second connection a second later, one SEND_BATCH of a message
for each of them, which wakes them; counted per PULL, the SEND_BATCH's 64 messages included
(the same in both checkouts). ``follow``: compare.py row 6's cycle, ``--groups`` connections
(consumer groups) each with a PULL waiting at the end of each of the four queues
(``max_messages`` 256, ``wait_ms`` 10000), then one SEND_BATCH of ``--messages`` messages per
queue from another connection, which wakes all of them; each answered with those messages,
then the next round's PULLs find nothing and wait; counted per PULL answered, the SEND_BATCH's
share included (the same in both checkouts).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._callgrind import collected, collecting, stop  # noqa: E402
from bench.ab_rounds import fmq_command, parser, trees  # noqa: E402
from bench.bench_network import free_port  # noqa: E402
from bench.send_path_instructions import BODY, WINDOW, RawClient  # noqa: E402
from fmq.protocol import Op, encode_request  # noqa: E402

TOPIC = "fmq-read-instr"
QUEUES = 4


def _pulls(at: int, messages: int) -> list[tuple[int, dict]]:
    """A window of PULLs of ``messages`` each: each queue's next offsets from ``at`` on."""
    per_queue = WINDOW // QUEUES
    return [(Op.PULL, {"topic": TOPIC, "queue_id": i % QUEUES,
                       "offset": at + (i // QUEUES) * messages, "max_messages": messages,
                       "wait_ms": 1000})
            for i in range(per_queue * QUEUES)]


def fill(client: RawClient, requests: int, messages: int = 1, batches: bool = True) -> None:
    """Each queue's tail asked for once, then (``batches``) enough messages for
    ``requests`` pulls."""
    message = {"topic": TOPIC, "body": BODY, "key": None, "tags": None, "properties": {}}
    client.window([(Op.SEND, {"message": {**message, "queue_id": q}}) for q in range(QUEUES)])
    client.window([(Op.PULL, {"topic": TOPIC, "queue_id": q, "offset": 0, "max_messages": 1,
                              "wait_ms": 0}) for q in range(QUEUES)])
    per_queue = requests // QUEUES * messages + WINDOW
    for _ in range(per_queue // 16 + 1 if batches else 0):
        client.window([(Op.SEND_BATCH, {"messages": [{**message, "queue_id": q}] * 16})
                       for q in range(QUEUES)])


def drive(clients: list[RawClient], kind: str, requests: int, first: int,
          messages: int = 1) -> int:
    """Send ``requests`` of ``kind`` (PULLs of ``messages`` each) from queue offset
    ``first`` on; the next offset."""
    at = first
    rounds = (requests // WINDOW // len(clients) if kind == "shared"
              else requests // QUEUES // (len(clients) - 1) if kind == "follow"
              else requests // WINDOW)
    for _ in range(rounds):
        if kind == "woken":
            waiting = [(op, {**fields, "wait_ms": 10_000}) for op, fields in _pulls(at, 1)]
            puller, producer = clients
            frames = []
            for op, fields in waiting:
                puller.rid += 1
                frames.append(encode_request(op, puller.rid, fields))
            puller.sock.sendall(b"".join(frames))
            time.sleep(1.0)  # they wait (a server under callgrind is slow)
            message = {"topic": TOPIC, "body": BODY, "key": None, "tags": None,
                       "properties": {}}
            producer.window([(Op.SEND_BATCH, {"messages": [
                {**message, "queue_id": q} for q in range(QUEUES)
                for _ in range(WINDOW // QUEUES)]})])
            answers = [puller._answer() for _ in waiting]
            assert all(len(a["messages"]) == 1 for a in answers), "a woken pull found nothing"
        elif kind == "follow":
            *followers, producer = clients
            for follower in followers:  # each group's consumers wait at every queue's end
                frames = []
                for q in range(QUEUES):
                    follower.rid += 1
                    frames.append(encode_request(Op.PULL, follower.rid, {
                        "topic": TOPIC, "queue_id": q, "offset": at, "max_messages": 256,
                        "wait_ms": 10_000}))
                follower.sock.sendall(b"".join(frames))
            time.sleep(1.0)  # they wait (a server under callgrind is slow)
            message = {"topic": TOPIC, "body": BODY, "key": None, "tags": None,
                       "properties": {}}
            producer.window([(Op.SEND_BATCH, {"messages": [
                {**message, "queue_id": q} for q in range(QUEUES) for _ in range(messages)]})])
            for follower in followers:
                answers = [follower._answer() for _ in range(QUEUES)]
                assert all(len(a["messages"]) == messages for a in answers), \
                    "a woken pull found too little"
            at += messages
            continue
        elif kind == "commit":
            clients[0].window([(Op.COMMIT_OFFSET, {"group": "g", "topic": TOPIC,
                                                   "queue_id": i % QUEUES,
                                                   "next_offset": at + i // QUEUES})
                               for i in range(WINDOW)])
        else:
            for client in clients:
                answers = client.window(_pulls(at, messages))
                assert all(len(a["messages"]) == messages for a in answers), \
                    "a pull found too little"
        at += WINDOW // QUEUES * (messages if kind != "commit" else 1)
    return at


def server_instructions(tree: str, kind: str, requests: int, scratch: str,
                        messages: int = 1, groups: int = 2) -> int:
    """The instructions a server of ``tree`` spent serving ``requests`` of ``kind``
    (counted only while they run)."""
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
        clients = [RawClient(port)] + [RawClient(port) for _ in range(
            groups - 1 if kind == "shared" else groups if kind == "follow"
            else 1 if kind == "woken" else 0)]
        # a woken pull's message is written as it waits
        fill(clients[0], requests + WINDOW, messages,
             batches=kind not in ("woken", "follow"))
        # warm: caches, shared queues
        at = drive(clients, kind, WINDOW * len(clients), 1, messages)
        with collecting(proc.pid):
            drive(clients, kind, requests, at, messages)
        for client in clients:
            client.sock.close()
    finally:
        err = stop(proc)
    instructions = collected(err)
    return instructions


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=1024,
                    help="requests counted, a multiple of 128")
    ap.add_argument("--messages", type=int, default=1, help="messages per PULL")
    ap.add_argument("--groups", type=int, default=2,
                    help="shared: that many connections pull each window (row 6: 4)")
    ap.add_argument("--only", choices=("pull", "shared", "commit", "woken", "follow"),
                    default=None)
    ap.add_argument("--keep", default=None, help="a directory to keep the callgrind files in")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    n = "one message" if args.messages == 1 else f"{args.messages} messages"
    what = {"pull": f"PULL of {n} (one consumer)",
            "shared": f"PULL of {n} ({args.groups} groups, the first's kept)",
            "commit": "COMMIT_OFFSET",
            "woken": "woken long-poll PULL of one message (a SEND_BATCH's 64th included)",
            "follow": f"woken PULL of {n} ({args.groups} groups following 4 queues, the "
                      f"SEND_BATCH's share included)"}
    for kind in [args.only] if args.only else list(what):
        for name, tree in trees(args.old).items():
            with tempfile.TemporaryDirectory(prefix="fmq-read-instr-") as tmp:
                count = server_instructions(tree, kind, args.requests, tmp, args.messages,
                                            args.groups)
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    shutil.copy(os.path.join(tmp, "callgrind.out"),
                                os.path.join(args.keep, f"callgrind.{name}.{kind}"))
            print(f"{name}: {count / args.requests:,.0f} server instructions per "
                  f"{what[kind]}", flush=True)


if __name__ == "__main__":
    main()
