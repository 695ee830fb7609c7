"""A follower derives its dedup window from the records it copies with the same function as
the primary's send path and recovery: after a fail-over (the primary killed, the follower
promoted by hand) the new primary's window is the old primary's. A delivered scheduled
message is the case that used to differ; a user's principal is in the records it copies."""

from __future__ import annotations

from fmq.client import Client
from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire, result_from_wire
from tests.server.harness import broker_stats, run_cli, wait_until

from .cluster import SMALL, wait_caught_up

SCHEDULED = {MESSAGE_ID_PROPERTY: "order-1", PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "7"}


def _window(address: str) -> tuple[int, int]:
    s = broker_stats(address)
    return s["dedup_producers"], s["dedup_message_ids"]


def _keyed(c: Client, key: str) -> list[bytes]:
    return sorted(m["body"] for m in c.call(Op.QUERY_KEY, {"topic": "t", "key": key,
                                                           "limit": 10})["messages"])


def _send(c: Client, body: bytes, key: str, **props: str):
    return result_from_wire(c.call(Op.SEND, {"message": message_to_wire(Message(
        "t", body, key=key, properties=props))})["result"])


def test_a_promoted_follower_has_the_primary_s_window(node):
    primary = node("a", SMALL)
    follower = node("b", {**SMALL, "follow": primary.address})
    with Client(primary.address, retries=0, request_timeout=10) as c:
        c.call(Op.SEND_AT, {"message": message_to_wire(Message(
            "t", b"scheduled", key="k", properties=SCHEDULED)), "deliver_at": -1,
            "delay_ms": 0})
        wait_until(lambda: _keyed(c, "k") == [b"scheduled"], what="the scheduled delivery")
        plain = _send(c, b"plain", "p", **{MESSAGE_ID_PROPERTY: "order-2",
                                           PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "8"})
    live = _window(primary.address)
    wait_caught_up(follower, primary)
    primary.kill()
    promoted = run_cli("replica", "promote", "--server", follower.address, "--json")
    assert promoted.returncode == 0, promoted.stderr
    assert _window(follower.address) == live
    with Client(follower.address, retries=0, request_timeout=10) as c:
        # as on the old primary: the scheduled message's id is free, the plain one's not
        _send(c, b"sent", "k", **{MESSAGE_ID_PROPERTY: "order-1"})
        assert _send(c, b"plain", "p", **{MESSAGE_ID_PROPERTY: "order-2",
                                          PRODUCER_ID_PROPERTY: "p",
                                          SEQUENCE_PROPERTY: "8"}) == plain
        wait_until(lambda: _keyed(c, "k") == [b"scheduled", b"sent"], what="both messages")
        assert _keyed(c, "p") == [b"plain"]
