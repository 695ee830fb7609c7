"""``ack_mode = "sync"``: an acknowledged write is on the follower's disk; without an
in-sync follower writes fail with NotEnoughReplicas, and work again once it is back."""

from __future__ import annotations

import threading
import time

import pytest

from fmq.client import Producer, TransactionProducer
from fmq.errors import NotEnoughReplicas
from fmq.message import Message
from fmq.protocol import Op

from .cluster import SMALL, record_on_disk, status, wait_in_sync

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
