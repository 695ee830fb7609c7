"""Who may claim a producer id, and which `%` properties a client may set, on a real
server on 127.0.0.1.

* With users, the dedup window is per principal: a user allowed to write only ``mal.*``
  who claims another user's producer id (or message id) can neither have that user's next
  send answered with its own result nor lock it out with a huge sequence, also after a
  kill -9 (the principal is in the stored record, so the recovered window is the same).
* Properties starting with ``%`` belong to the broker, except the idempotence ones the SDK
  sends (``%producer``, ``%seq``, ``%msgid``): any other is refused in every request that
  stores a message, naming the property, and nothing is stored.
"""

from __future__ import annotations

import time

import pytest

from fmq.client import Client
from fmq.errors import InvalidArgument
from fmq.message import (
    MAX_OFFSET,
    MESSAGE_ID_PROPERTY,
    PRODUCER_ID_PROPERTY,
    SEQUENCE_PROPERTY,
    Message,
)
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire, result_from_wire

from .conftest import PASSWORD, QUICK_SLOW_DOWN, add_rule_offline, add_user_offline

pytestmark = pytest.mark.timeout(300)

RULES = [
    ("--principal", "admin", "--operation", "all", "--cluster"),
    ("--principal", "admin", "--operation", "all", "--topic", "", "--prefix"),
    ("--principal", "admin", "--operation", "all", "--group", "", "--prefix"),
    ("--principal", "victim", "--operation", "produce", "--topic", "orders"),
    ("--principal", "victim", "--operation", "produce", "--topic", "shared"),
    ("--principal", "mal", "--operation", "produce", "--topic", "mal.", "--prefix"),
    ("--principal", "mal", "--operation", "produce", "--topic", "shared"),
]


@pytest.fixture
def users_server(tmp_path, secure_server):
    """A server with users admin, victim and mal (see RULES)."""
    data = str(tmp_path / "data")
    for user in ("admin", "victim", "mal"):
        add_user_offline(data, user)
    for rule in RULES:
        add_rule_offline(data, *rule)
    return secure_server(QUICK_SLOW_DOWN, {"user": "admin", "password": PASSWORD})


def as_user(address: str, user: str) -> Client:
    return Client(address, user=user, password=PASSWORD, retries=0, request_timeout=10)


def send(address: str, user: str, topic: str, body: bytes, **props: str):
    with as_user(address, user) as c:
        message = message_to_wire(Message(topic, body, key=body.decode(), properties=props))
        return result_from_wire(c.call(Op.SEND, {"message": message})["result"])


def seq(producer: str, n: int) -> dict[str, str]:
    return {PRODUCER_ID_PROPERTY: producer, SEQUENCE_PROPERTY: str(n)}


def query_key(address: str, topic: str, key: str) -> list[dict]:
    with as_user(address, "admin") as c:
        return c.call(Op.QUERY_KEY, {"topic": topic, "key": key, "limit": 10})["messages"]


def bodies_with_key(address: str, topic: str, key: str, want: int, patience: float = 10.0
                    ) -> list[bytes]:
    """The bodies of ``topic``'s messages with ``key`` (read as admin), once ``want`` of
    them are indexed or after ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        got = [m["body"] for m in query_key(address, topic, key)]
        if len(got) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_another_user_cannot_lock_out_a_producer_id(users_server):
    address = users_server.address
    send(address, "mal", "mal.x", b"mal-max", **seq("victim-outbox", MAX_OFFSET))
    # not refused as too old for the window
    send(address, "victim", "orders", b"v0", **seq("victim-outbox", 0))
    assert bodies_with_key(address, "orders", "v0", 1) == [b"v0"]


def test_another_user_cannot_hijack_a_producer_id_or_message_id(users_server):
    srv = users_server
    address = srv.address
    # mal claims the victim's producer id in its own topic
    stolen = send(address, "mal", "mal.x", b"mal-3", **seq("victim-outbox", 3))
    mine = send(address, "victim", "orders", b"v3", **seq("victim-outbox", 3))
    assert mine != stolen  # not answered with mal's result: stored
    assert bodies_with_key(address, "orders", "v3", 1) == [b"v3"]
    # the same message id in a topic both may write: each user's is its own
    theirs = send(address, "mal", "shared", b"mal-id", **{MESSAGE_ID_PROPERTY: "order-1"})
    ours = send(address, "victim", "shared", b"victim-id", **{MESSAGE_ID_PROPERTY: "order-1"})
    assert ours != theirs
    assert bodies_with_key(address, "shared", "victim-id", 1) == [b"victim-id"]

    # The stored records carry the principal: after a kill -9 the window is the same.
    srv.kill()
    srv.start()
    assert send(address, "victim", "orders", b"v3", **seq("victim-outbox", 3)) == mine
    assert send(address, "mal", "mal.x", b"mal-3", **seq("victim-outbox", 3)) == stolen
    assert send(address, "victim", "shared", b"victim-id",
                **{MESSAGE_ID_PROPERTY: "order-1"}) == ours
    assert send(address, "mal", "shared", b"mal-id",
                **{MESSAGE_ID_PROPERTY: "order-1"}) == theirs
    assert bodies_with_key(address, "orders", "v3", 2, 1.0) == [b"v3"]  # stored once
    assert bodies_with_key(address, "shared", "victim-id", 2, 1.0) == [b"victim-id"]
    # the principal is the window's bookkeeping: consumers do not get it
    assert [m["properties"] for m in query_key(address, "orders", "v3")] == [{}]
    assert [m["properties"] for m in query_key(address, "shared", "victim-id")] == [
        {MESSAGE_ID_PROPERTY: "order-1"}]


BROKER_OWNED = ["%RECONSUME_TIMES", "%ORIGIN_TOPIC", "%ORIGIN_QUEUE", "%ORIGIN_OFFSET",
                "%principal", "%anything-else"]


def _request(op: Op, message: dict) -> dict:
    if op == Op.SEND:
        return {"message": message}
    if op == Op.SEND_BATCH:
        return {"messages": [message_to_wire(Message("t", b"fine")), message]}
    if op == Op.SEND_AT:
        return {"message": message, "deliver_at": -1, "delay_ms": 0}
    return {"producer_group": "pg", "tx_id": None, "messages": [message]}


@pytest.mark.parametrize("op", [Op.SEND, Op.SEND_BATCH, Op.SEND_AT, Op.PREPARE],
                         ids=lambda op: op.name)
def test_broker_owned_properties_are_refused_in_every_client_message(start_server, op):
    srv = start_server()
    with Client(srv.address, retries=0, request_timeout=10) as c:
        for name in BROKER_OWNED:
            message = message_to_wire(Message("t", b"x", properties={name: "99"}))
            with pytest.raises(InvalidArgument, match=f"'{name}'.*reserved"):
                c.call(op, _request(op, message))
        # the idempotence properties the SDK sends are the client's own
        fine = message_to_wire(Message("t", b"ok", properties={
            **seq("p", 0), MESSAGE_ID_PROPERTY: "m-1"}))
        c.call(op, _request(op, fine))
        if op in (Op.SEND, Op.SEND_BATCH):  # nothing of a refused request was stored
            want = 2 if op == Op.SEND_BATCH else 1
            deadline = time.monotonic() + 10
            while (count := stored_count(c, "t")) < want and time.monotonic() < deadline:
                time.sleep(0.05)
            assert count == want


def stored_count(c: Client, topic: str) -> int:
    ranges = [c.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": q}) for q in range(4)]
    return sum(r["next_offset"] - r["min_offset"] for r in ranges)
