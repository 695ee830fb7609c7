"""``ack_mode = "sync"``: an acknowledged write is on the follower's disk; without an
in-sync follower writes fail with NotEnoughReplicas, and work again once it is back."""

from __future__ import annotations

import threading
import time

import pytest

from fmq.client import Client, Producer, TransactionProducer
from fmq.errors import NotEnoughReplicas
from fmq.log.record import RecordType
from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire, result_from_wire
from tests.faults.invariants import log_records
from tests.server.harness import wait_until

from .cluster import SMALL, record_on_disk, status, wait_caught_up, wait_in_sync

SYNC = {**SMALL, "ack_mode": "sync", "min_insync": 1, "max_lag_ms": 1000}


def test_acknowledged_sends_are_on_the_followers_disk(node):
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    acked: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        with Producer(primary.address, retries=0) as p:
            for i in range(25):
                body = f"{n}-{i}".encode()
                result = p.send("t", body)
                # Acknowledged: the follower's file holds it now, before anything else.
                on_follower = record_on_disk(follower, result.offset)
                assert on_follower.body == body
                with lock:
                    acked.append((result.offset, body))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(acked) == 100
    with TransactionProducer(primary.address, "g", None, feedback=False, retries=0) as tp:
        tx = tp.prepare([Message("t", b"in a transaction")])
        tp.commit(tx)
        committed_end = status(primary)["durable_end"]
    assert status(follower)["durable_offset"] >= committed_end  # the COMMIT was copied


def test_without_an_in_sync_follower_writes_fail_then_recover(node):
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    with Producer(primary.address, retries=0) as p:
        p.send("t", b"replicated")
        follower.kill()
        deadline = time.monotonic() + 20
        with pytest.raises(NotEnoughReplicas) as info:
            while time.monotonic() < deadline:  # in sync until max_lag_ms passes
                p.send("t", b"maybe")
        assert info.value.retriable and info.value.min_insync == 1
        with TransactionProducer(primary.address, "g", None, feedback=False,
                                 retries=0) as tp, pytest.raises(NotEnoughReplicas):
            tp.prepare([Message("t", b"not acknowledged")])
        # Offset commits are OFFSET records: acknowledged on as many copies as sends.
        with pytest.raises(NotEnoughReplicas):
            p.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "t", "queue_id": 0,
                                      "next_offset": 0})
        follower.start()
        wait_in_sync(primary)
        result = p.send("t", b"after the follower came back")
        assert record_on_disk(follower, result.offset).body == b"after the follower came back"


def _stored(server, producer: str) -> list[int]:
    """Log offsets of the MESSAGE records of ``producer`` in ``server``'s segment files."""
    return [r.log_offset for r in log_records(server.data_dir)
            if r.type == RecordType.MESSAGE and (r.properties or {}).get(
                PRODUCER_ID_PROPERTY) == producer]


def test_a_resend_of_a_send_stored_but_not_acknowledged_is_answered_from_it(node):
    """The dedup window holds an idempotent send from the moment it is placed, not from
    its acknowledgement: resent while NotEnoughReplicas refuses it, and once the follower is
    back, it is answered with the first copy's result and never stored again."""
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    wire = message_to_wire(Message("t", b"once", properties={
        PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: "0"}))
    with Client(primary.address, retries=0, request_timeout=10) as c:
        follower.kill()
        wait_until(lambda: not status(primary)["in_sync"], timeout=20,
                   what="the follower out of the in-sync set")
        for _ in range(3):
            with pytest.raises(NotEnoughReplicas):
                c.call(Op.SEND, {"message": wire})
        [first] = _stored(primary, "p")  # stored by the first attempt, and only there
        follower.start()
        wait_in_sync(primary)
        result = result_from_wire(c.call(Op.SEND, {"message": wire})["result"])
    assert result.offset == first
    wait_caught_up(follower, primary)
    assert _stored(primary, "p") == [first]
    assert _stored(follower, "p") == [first]
