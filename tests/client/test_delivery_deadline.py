"""A producer's delivery deadline against a real server on 127.0.0.1: a send keeps being
retried through an outage longer than any short count of retries would cover, and fails
with DeliveryTimeout naming the last error only once its deadline passes."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from fmq.client import Client, Producer, TransactionProducer
from fmq.client.aio import AsyncProducer
from fmq.errors import ConnectionLost, DeliveryTimeout, InvalidArgument
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState

#: Longer than the old default of 3 retries (0.05 + 0.1 + 0.2 s of back-off) lasts.
OUTAGE_S = 3.0


def bodies(address: str, topic: str) -> Counter:
    got: Counter = Counter()
    with Client(address) as c:
        for q in range(4):
            ans = c.call(Op.PULL, {"topic": topic, "queue_id": q, "offset": 0,
                                   "max_messages": 1000, "wait_ms": 0})
            got.update(bytes(m["body"]) for m in ans["messages"])
    return got


def test_sends_and_a_transaction_wait_out_a_server_restart_within_the_deadline(start_server):
    server = start_server()
    with Producer(server.address, linger_ms=1) as p, \
            TransactionProducer(server.address, "shop", lambda u: TxState.UNKNOWN) as tp:
        p.send("t", b"before")  # connected: the outage cuts a live connection
        tp.prepare([Message("t", b"warm-up")], tx_id="warm")
        tp.rollback("warm")
        server.kill()
        outcome: dict = {}

        def send() -> None:
            try:
                outcome["send"] = p.send("t", b"during")
                outcome["async"] = p.send_async("t", b"async").result(60)
                result = tp.send_in_transaction(Message("t", b"tx"),
                                                lambda tx_id, arg: TxState.COMMIT)
                outcome["tx"] = result
            except Exception as exc:  # noqa: BLE001 - the test reports it
                outcome["error"] = exc

        worker = threading.Thread(target=send)
        worker.start()
        time.sleep(OUTAGE_S)
        assert worker.is_alive(), f"gave up during the outage: {outcome}"
        server.start()
        worker.join(60)
    assert "error" not in outcome, outcome["error"]
    assert outcome["tx"].state == TxState.COMMIT and outcome["tx"].error is None
    assert bodies(server.address, "t") == Counter({b"before": 1, b"during": 1, b"async": 1,
                                                   b"tx": 1})


def test_the_deadline_ends_the_retries_with_the_last_error_named(start_server):
    server = start_server()
    with Producer(server.address, delivery_timeout=1.5, linger_ms=1) as p:
        p.send("t", b"before")
        server.kill()
        started = time.monotonic()
        with pytest.raises(DeliveryTimeout, match=r"delivery_timeout \(1.5s\).*ConnectionLost"
                           ) as caught:
            p.send("t", b"lost")
        assert isinstance(caught.value.last_error, ConnectionLost)
        assert time.monotonic() - started < 30  # it ended (no claim on how fast)
        with pytest.raises(DeliveryTimeout):
            p.send_async("t", b"lost too").result(30)


def test_the_asyncio_producer_waits_out_a_restart_too(start_server):
    import asyncio

    server = start_server()

    async def run() -> None:
        async with AsyncProducer(server.address, linger_ms=1) as p:
            await p.send("t", b"a-before")
            server.kill()
            later = asyncio.get_running_loop().run_in_executor(
                None, lambda: (time.sleep(OUTAGE_S), server.start()))
            await p.send("t", b"a-during")
            fut = await p.send_async("t", b"a-async")
            await asyncio.wait_for(fut, 60)
            await later

    asyncio.run(run())
    assert bodies(server.address, "t") == Counter({b"a-before": 1, b"a-during": 1,
                                                   b"a-async": 1})


def test_options_that_would_retry_for_ever_or_never_make_sense_are_refused(start_server):
    server = start_server()
    for bad in ({"retries": None, "delivery_timeout": None}, {"delivery_timeout": 0},
                {"retries": -1}):
        with pytest.raises(InvalidArgument):
            Producer(server.address, **bad)
