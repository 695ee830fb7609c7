"""The dedup window is one function of the stored records: the window the send path keeps
live equals the one recovery's redo rebuilds from the same log (an index rebuild, a kill -9
of a real server process). Scheduled messages and retries are what used to tell them
apart: their delivery (a MESSAGE naming its TIMER) is the broker's write, not a client's
send, so it enters neither window."""

from __future__ import annotations

import fmq
from fmq import Message
from fmq.admin.rebuild_index import rebuild_index
from fmq.client import Client
from fmq.engine import retries
from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire, result_from_wire
from tests.server.harness import ServerProcess, broker_stats, wait_until

SCHEDULED = {MESSAGE_ID_PROPERTY: "order-1", PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "7"}
CONFIG = {"segment_size": 256 * 1024, "max_message_size": 4096, "checkpoint_interval_ms": 0,
          "retention_interval_ms": 0}


def _bodies(broker, topic: str) -> list[bytes]:
    broker.wait_indexed()
    return sorted(m.body for q in broker.reads.all_messages([topic]).values() for m in q)


def test_deliveries_of_timers_and_retries_enter_neither_window(tmp_path, small_config):
    path = str(tmp_path / "d")
    with fmq.Broker.open(path, small_config) as broker:
        keyed = broker.send(Message("t", b"plain-keyed", properties={
            MESSAGE_ID_PROPERTY: "order-2", PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "1"}))
        broker._timers.schedule([Message("t", b"scheduled", properties=SCHEDULED)], 0)
        wait_until(lambda: len(_bodies(broker, "t")) == 2, what="both deliveries")
        # a consumer group fails the keyed message: its retry copy is delivered too
        broker.deliveries.nack("g", "t", keyed.queue_id, keyed.queue_offset, delay_ms=0)
        wait_until(lambda: len(_bodies(broker, retries.retry_topic("g"))) == 1,
                   what="the retry")
        # a later send with the scheduled message's id is a new message
        again = broker.send(Message("t", b"sent", properties={MESSAGE_ID_PROPERTY: "order-1"}))
        assert _bodies(broker, "t") == [b"plain-keyed", b"scheduled", b"sent"]
        live_after = broker._idempotence.window.snapshot()
    rebuild_index(path, small_config)  # replays the whole log
    with fmq.Broker.open(path, small_config) as broker:
        assert broker._idempotence.window.snapshot() == live_after
        assert broker.send(Message("t", b"sent", properties={
            MESSAGE_ID_PROPERTY: "order-1"})) == again


def _window(address: str) -> tuple[int, int]:
    s = broker_stats(address)
    return s["dedup_producers"], s["dedup_message_ids"]


def _bodies_with_key(c: Client, topic: str, key: str) -> list[bytes]:
    return sorted(m["body"] for m in c.call(Op.QUERY_KEY, {"topic": topic, "key": key,
                                                           "limit": 10})["messages"])


def test_the_window_after_a_kill_9_is_the_window_before_it(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), CONFIG).start()
    try:
        with Client(srv.address, retries=0, request_timeout=10) as c:
            c.call(Op.SEND_AT, {"message": message_to_wire(Message(
                "t", b"scheduled", key="k", properties=SCHEDULED)), "deliver_at": -1,
                "delay_ms": 0})
            wait_until(lambda: _bodies_with_key(c, "t", "k") == [b"scheduled"],
                       what="the scheduled delivery")
            plain = result_from_wire(c.call(Op.SEND, {"message": message_to_wire(Message(
                "t", b"plain", key="p", properties={MESSAGE_ID_PROPERTY: "order-2"}))})
                ["result"])
        live = _window(srv.address)
        srv.kill()
        srv.start()
        assert _window(srv.address) == live
        with Client(srv.address, retries=0, request_timeout=10) as c:
            # as without the crash: the scheduled message's id is free, the plain one's not
            c.call(Op.SEND, {"message": message_to_wire(Message(
                "t", b"sent", key="k", properties={MESSAGE_ID_PROPERTY: "order-1"}))})
            again = result_from_wire(c.call(Op.SEND, {"message": message_to_wire(Message(
                "t", b"plain", key="p", properties={MESSAGE_ID_PROPERTY: "order-2"}))})
                ["result"])
            assert again == plain
            wait_until(lambda: _bodies_with_key(c, "t", "k") == [b"scheduled", b"sent"],
                       what="both messages")
    finally:
        srv.kill()
