"""Thousands of well-framed requests with boundary values in every field, over every opcode,
against a real server: each answer is a success or a specific FMQError (never the root
code 1, which means an internal exception leaked), the server keeps answering PING, and
what was stored before is intact."""

from __future__ import annotations

import random
import socket
import time
from collections import Counter
from typing import Any

from fmq.client import Client, Consumer, Producer
from fmq.errors import FMQError, ProtocolError
from fmq.protocol import SCHEMA, FrameDecoder, Op, decode_error, encode_request
from fmq.protocol.structs import Struct
from fmq.protocol.types import (
    BOOL,
    BYTES,
    I32,
    I64,
    OPT_STR,
    PROPS,
    STR,
    TEXT,
    U8,
    U16,
    U32,
    U64,
    ListOf,
)

from .conftest import FAST

#: Small bodies keep 2000 requests quick; the wait cap keeps every long poll short.
CONFIG = dict(FAST, segment_size=4 * 1024 * 1024, max_message_size=64 * 1024,
              server=dict(FAST["server"], max_wait_ms=20))
MAX_BODY = CONFIG["max_message_size"]
REQUESTS = 2000
SEED = 20261123

#: The data the fuzz must never change: nothing in the pools below names it.
REF_TOPIC, REF_TX_TOPIC, REF_GROUP = "ref", "ref-tx", "ref-consumers"

_INTS = [0, 1, 2, (1 << 15), (1 << 16) - 1, (1 << 31) - 1, 1 << 31, (1 << 32) - 1,
         (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
_NAMES = ["", "a", "fz", "fz-2", "t\n", "t\r\nINFO forged line", "\x00", "g\x1b[31m", "\u2028",
          "é", "x" * 127, "x" * 128, "x" * 255, "x" * 256, None, " ", "a b", "commit",
          "rollback", "unknown", "open", "COMMIT"]
_STATES = ["commit", "rollback", "unknown", "open", "committing", "", "Commit", "\n"]


class Fuzz:
    """Boundary values for each wire type, drawn from a seeded generator."""

    def __init__(self, rng: random.Random, tx_ids: list[str]) -> None:
        self.rng = rng
        self.tx_ids = tx_ids

    def value(self, name: str, ftype: Any) -> Any:
        rng = self.rng
        if ftype in (U8, U16, U32, U64):
            if name == "queue_id" and rng.random() < 0.5:
                return rng.choice([0, 1, 3, 4])
            return min(rng.choice(_INTS), ftype.hi)
        if ftype is I32:
            return rng.choice([-(1 << 31), -2, -1, -1, 0, 1, 3, 4, (1 << 31) - 1])
        if ftype is I64:
            return rng.choice([-(1 << 63), -1, 0, 1, (1 << 63) - 1])
        if ftype is BOOL:
            return rng.random() < 0.5
        if ftype in (STR, OPT_STR, TEXT):
            if ftype is OPT_STR and rng.random() < 0.3:
                return None
            if name in ("state", "decision"):
                return rng.choice(_STATES)
            if name == "tx_id" and rng.random() < 0.5:
                return rng.choice(self.tx_ids)
            value = rng.choice(_NAMES)
            return "y" * min(ftype.max, 65535) if value is None else value  # longest
        if ftype is BYTES:
            return rng.choice([b"", b"x", b"\x00" * 3, b"b" * MAX_BODY, b"b" * (MAX_BODY + 1)])
        if ftype is PROPS:
            return rng.choice([{}, {"k": "v"}, {"": ""}, {"\x00": "\n"}, {"k" * 65535: ""}])
        if isinstance(ftype, ListOf):
            return [self.value(name, ftype.item) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        if isinstance(ftype, Struct):
            return self.fields(ftype.fields)
        raise AssertionError(f"no boundary values for {ftype!r}")

    def fields(self, spec: list[tuple[str, Any]]) -> dict[str, Any]:
        return {name: self.value(name, ftype) for name, ftype in spec}


def exchange(sock: socket.socket, dec: FrameDecoder, frame: bytes, timeout: float = 30.0):
    """Send one request, return its answer frame (None: the server closed the connection)."""
    sock.sendall(frame)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            return None
        frames = dec.feed(data)
        if frames:
            assert len(frames) == 1
            return frames[0]
    raise AssertionError(f"no answer within {timeout}s")


def store_reference(address: str) -> tuple[list[bytes], str, int]:
    bodies = [f"ref-{i}".encode() for i in range(20)]
    with Producer(address) as p:
        queues = [p.send(REF_TOPIC, b, key=b.decode()).queue_id for b in bodies]
        tx_id = p.call(Op.PREPARE, {"producer_group": "ref-producers", "tx_id": None,
                                    "messages": [{"topic": REF_TX_TOPIC, "body": b"ref-tx",
                                                  "key": None, "tags": None, "properties": {},
                                                  "queue_id": 0}]})["tx_id"]
        p.call(Op.COMMIT, {"producer_group": "ref-producers", "tx_id": tx_id})
        p.call(Op.COMMIT_OFFSET, {"group": REF_GROUP, "topic": REF_TOPIC,
                                  "queue_id": queues[0], "next_offset": 1})
    return bodies, tx_id, queues[0]


def read_topic(address: str, topic: str, want: int) -> list[bytes]:
    got: list[bytes] = []
    with Consumer(address, f"verify-{topic}", topic, start="earliest") as c:
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got.extend(m.body for m in c.poll(0.5))
        got.extend(m.body for m in c.poll(0.3))  # nothing more may come
    return got


def test_boundary_value_requests_get_typed_answers(start_server):
    srv = start_server(CONFIG)
    bodies, ref_tx, ref_queue = store_reference(srv.address)
    fuzz = Fuzz(random.Random(SEED), [ref_tx, "", "no-such-tx", "x" * 255, "x" * 256, "t\n"])
    ops = sorted(SCHEMA)
    outcomes: Counter = Counter()
    leaked: list[str] = []
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    dec = FrameDecoder()
    try:
        for i in range(REQUESTS):
            op = ops[i % len(ops)]
            fields = fuzz.fields(SCHEMA[op].request)
            answer = exchange(sock, dec, encode_request(op, i + 1, fields))
            assert answer is not None, (
                f"request {i + 1} {Op(op).name} {fields!r:.300}: the server closed the "
                f"connection on a well-framed request")
            assert answer.request_id == i + 1
            if not answer.is_error:
                outcomes[(Op(op).name, "ok")] += 1
                continue
            err = decode_error(answer)
            outcomes[(Op(op).name, type(err).__name__)] += 1
            if type(err) in (FMQError, ProtocolError):
                leaked.append(f"{Op(op).name} {fields!r:.200} -> {type(err).__name__}: "
                              f"{str(err)[:200]}")
    finally:
        sock.close()
    print(f"\n{REQUESTS} requests: {sum(1 for k in outcomes if k[1] == 'ok')} ops answered "
          f"ok at least once; {len(leaked)} leaked an untyped error")
    for key, n in sorted(outcomes.items()):
        print(f"  {key[0]:<17} {key[1]:<22} {n}")
    assert not leaked, f"{len(leaked)} of {REQUESTS} answers were untyped:\n" + "\n".join(
        leaked[:60])

    # the server still serves, nothing unexpected was logged, the stored data is intact
    with Client(srv.address) as c:
        assert c.ping()["protocol_version"] == 1
        assert c.call(Op.FETCH_OFFSET, {"group": REF_GROUP, "topic": REF_TOPIC,
                                        "queue_id": ref_queue})["offset"] == 1
        assert c.call(Op.COMMIT, {"producer_group": "ref-producers", "tx_id": ref_tx})["state"] == "commit"
    assert srv.alive
    log = srv.log()
    assert "failed unexpectedly" not in log
    # names with newlines were sent: none may have started a line of its own
    assert not any(line.startswith(("INFO forged", "\x1b")) for line in log.splitlines())
    assert sorted(read_topic(srv.address, REF_TOPIC, len(bodies))) == sorted(bodies)
    assert read_topic(srv.address, REF_TX_TOPIC, 1) == [b"ref-tx"]
