"""Idempotent sends across a server SIGKILL between the write and the reply.

The crashing server (tests.workloads.crashing_server) dies right after the fdatasync that
made the first send durable, so its reply never leaves. A normal server then restarts on
the same data directory and port; the resend of the same producer id and sequence gets the
original's result and the log holds one copy. The SDK's producers do the same by
themselves: a send whose connection was lost is retried, safely, until the server is back.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from fmq import Message
from fmq.client import Client, Producer
from fmq.client.aio import AsyncProducer
from fmq.errors import ConnectionLost, OutOfOrderSequence
from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire, result_from_wire

from .harness import ServerProcess, broker_stats, free_port
from .test_crash_and_feedback import consume_all
from .test_cut_transactions import start_crashing_server

CONFIG = {"segment_size": 256 * 1024, "max_message_size": 4096, "checkpoint_interval_ms": 0,
          "retention_interval_ms": 0}
CRASH_AFTER_FIRST_SYNC = {"op": "fdatasync", "nth": 1, "mode": "after"}


def crash_then_restart(tmp_path, while_down) -> tuple[ServerProcess, str]:
    """Start a server that dies after its first fdatasync, run ``while_down(address)``
    (which makes it die), restart a normal server on the same port."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    crashing = start_crashing_server(tmp_path, port, CRASH_AFTER_FIRST_SYNC, "start",
                                     CONFIG)
    try:
        while_down(address)
        assert crashing.wait(60) == -signal.SIGKILL, \
            (tmp_path / "crashing-server.log").read_text()
    finally:
        if crashing.poll() is None:
            crashing.kill()
    return ServerProcess(str(tmp_path / "data"), CONFIG, port=port).start(), address


def send_raw(address: str, message: Message):
    with Client(address, retries=0, request_timeout=10, connect_timeout=2) as c:
        return result_from_wire(c.call(Op.SEND, {"message": message_to_wire(message)})
                                ["result"])


@pytest.mark.parametrize("dedup", ["sequence", "message id"])
def test_a_resend_after_a_crash_between_write_and_reply_gets_the_original(tmp_path, dedup):
    props = ({PRODUCER_ID_PROPERTY: "p-7", SEQUENCE_PROPERTY: "41"} if dedup == "sequence"
             else {MESSAGE_ID_PROPERTY: "order-41"})
    message = Message("orders", b"the one", key="k", properties=props)

    def first_attempt(address: str) -> None:
        with pytest.raises(ConnectionLost):  # durable, but the reply never left
            send_raw(address, message)

    server, address = crash_then_restart(tmp_path, first_attempt)
    try:
        again = send_raw(address, message)
        got = consume_all(address, "orders", "audit", idle=1.0)
        assert [m.body for m in got] == [b"the one"]  # one copy
        [original] = got
        assert (again.offset, again.queue_id, again.queue_offset) == (
            original.offset, original.queue_id, original.queue_offset)
        assert broker_stats(address)["duplicates_dropped"] == 1
        if dedup == "sequence":  # the bookkeeping is not delivered; the rest is
            assert original.properties == {}
            send_raw(address, Message("orders", b"gap", properties={
                PRODUCER_ID_PROPERTY: "p-7", SEQUENCE_PROPERTY: "20000"}))
            with pytest.raises(OutOfOrderSequence):  # now far below the last: refused
                send_raw(address, message)
        else:
            assert original.properties == props
    finally:
        server.kill()


async def produce_aio(address: str, bodies: list[bytes]) -> list:
    async with AsyncProducer(address, retries=200, request_timeout=5, connect_timeout=1,
                             backoff_max=0.2) as p:
        futures = [await p.send_async("orders", b) for b in bodies]
        await p.flush(60)
        return [f.result() for f in futures]


@pytest.mark.parametrize("mode", ["send", "send_async", "aio"])
def test_the_sdk_producer_retries_a_send_lost_in_a_crash_without_duplicates(tmp_path, mode):
    bodies = [b"m%03d" % i for i in range(100)]
    outcome: dict = {}

    def produce(address: str) -> None:
        try:
            if mode == "aio":
                outcome["results"] = asyncio.run(produce_aio(address, bodies))
                return
            with Producer(address, retries=200, request_timeout=5, connect_timeout=1,
                          backoff_max=0.2) as p:
                if mode == "send":
                    outcome["results"] = [p.send("orders", b) for b in bodies]
                else:
                    futures = [p.send_async("orders", b) for b in bodies]
                    p.flush(60)
                    outcome["results"] = [f.result() for f in futures]
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome["error"] = exc

    threads: list[threading.Thread] = []

    def start_producing(address: str) -> None:
        threads.append(threading.Thread(target=produce, args=(address,), daemon=True))
        threads[0].start()

    server, address = crash_then_restart(tmp_path, start_producing)
    [client] = threads
    try:
        client.join(90)
        assert not client.is_alive()
        assert "error" not in outcome, outcome
        got = consume_all(address, "orders", "audit", idle=1.0)
        assert sorted(m.body for m in got) == bodies  # each once
        by_body = {m.body: (m.offset, m.queue_id, m.queue_offset) for m in got}
        assert [(r.offset, r.queue_id, r.queue_offset) for r in outcome["results"]] == [
            by_body[b] for b in bodies]
    finally:
        server.kill()
