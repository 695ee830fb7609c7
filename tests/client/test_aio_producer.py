"""fmq.client.aio.AsyncProducer against a real server: send, send_batch, batched
send_async with flush and close, order, limits, a killed server, back-pressure."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from fmq.client import BufferFull
from fmq.client.aio import AsyncProducer
from fmq.errors import BrokerClosed, ConnectionLost, FMQError, MessageTooLarge, RequestTimeout
from fmq.message import Message

from .conftest import FAST
from .helpers import read_topic

WAIT = 60  # seconds: the bound of every wait here


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT))


def test_round_trip_send_send_batch_and_send_async(start_server):
    srv = start_server(FAST)

    async def produce():
        async with AsyncProducer(srv.address, max_in_flight=1) as p:
            one = await p.send("aio", b"one", key="k", tags="t", properties={"p": "1"},
                               queue_id=0)
            batch = await p.send_batch([Message("aio", b"two", queue_id=0),
                                        Message("aio", b"three", queue_id=0)])
            assert await p.send_batch([]) == []
            futs = [await p.send_async("aio", f"m{i}".encode(), queue_id=0)
                    for i in range(3000)]
            await p.flush()
            assert all(f.done() for f in futs)
            return one, batch, [f.result() for f in futs]

    one, batch, results = run(produce())
    assert (one.queue_offset, [r.queue_offset for r in batch]) == (0, [1, 2])
    assert [r.queue_offset for r in results] == list(range(3, 3003))  # send order
    stored = read_topic(srv.address, "aio")[0]
    assert [m.body for m in stored] == [b"one", b"two", b"three"] + [
        f"m{i}".encode() for i in range(3000)]
    assert (stored[0].key, stored[0].tags, stored[0].properties) == ("k", "t", {"p": "1"})


def test_concurrent_tasks_all_stored_exactly_once(start_server):
    srv = start_server(FAST)

    async def produce():
        async with AsyncProducer(srv.address) as p:
            async def task(t):
                return [await p.send_async("tasks", f"{t}-{i}".encode()) for i in range(500)]
            per_task = await asyncio.gather(*(task(t) for t in range(8)))
            await p.flush()
            return [f.result() for futs in per_task for f in futs]

    results = run(produce())
    assert len({(r.queue_id, r.queue_offset) for r in results}) == 4000
    bodies = sorted(m.body for msgs in read_topic(srv.address, "tasks").values() for m in msgs)
    assert bodies == sorted(f"{t}-{i}".encode() for t in range(8) for i in range(500))


def test_batches_are_cut_to_the_servers_limits(start_server):
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_frame_size=8192,
                                              max_batch_messages=10)))

    async def produce():
        async with AsyncProducer(srv.address, max_batch_messages=10, linger_ms=50) as p:
            await p.ping()  # learn the limits before the batches form
            futs = [await p.send_async("cut", bytes(1000)) for _ in range(40)]
            huge = await p.send_async("cut", bytes(9000))
            await p.flush()
            with pytest.raises(MessageTooLarge):
                huge.result()
            return [f.result() for f in futs]

    assert len(run(produce())) == 40
    assert sum(len(m) for m in read_topic(srv.address, "cut").values()) == 40


def test_a_killed_server_fails_every_future_none_hangs(start_server):
    srv = start_server(FAST)

    async def produce():
        p = AsyncProducer(srv.address, retries=2, request_timeout=5, connect_timeout=1)
        futs = []
        for i in range(15_000):
            futs.append(await p.send_async("kill", bytes(500)))
            if i == 4000:
                srv.kill()
        await p.flush()
        await p.close()
        return futs

    futs = run(produce())
    assert all(f.done() for f in futs)
    errors = [f.exception() for f in futs if f.exception() is not None]
    assert errors and all(isinstance(e, (ConnectionLost, RequestTimeout)) for e in errors)


def test_a_full_buffer_raises_buffer_full_then_recovers(start_server):
    srv = start_server(FAST)

    async def produce():
        async with AsyncProducer(srv.address, buffer_memory=8 * 1024, max_block_s=0.3,
                                 linger_ms=0) as p:
            await p.send("full", b"warm", queue_id=0)
            os.kill(srv.proc.pid, signal.SIGSTOP)
            futs = []
            try:
                with pytest.raises(BufferFull):
                    for _ in range(100):
                        futs.append(await p.send_async("full", bytes(1000), queue_id=0))
            finally:
                os.kill(srv.proc.pid, signal.SIGCONT)
            await p.flush()
            return [f.result().queue_offset for f in futs]

    offsets = run(produce())
    assert 0 < len(offsets) < 100 and offsets == list(range(1, len(offsets) + 1))


def test_close_flushes_and_a_closed_producer_refuses(start_server):
    srv = start_server(FAST)

    async def produce():
        p = AsyncProducer(srv.address, linger_ms=600_000)
        futs = [await p.send_async("cl", b"x") for _ in range(5)]
        with pytest.raises(RequestTimeout, match="5 messages still wait"):
            await p.flush(0)
        await p.close()
        assert all(f.done() and f.exception() is None for f in futs)
        with pytest.raises(BrokerClosed):
            await p.send_async("cl", b"late")
        with pytest.raises(FMQError):
            await p.send("cl", b"late")

    run(produce())
    assert sum(len(m) for m in read_topic(srv.address, "cl").values()) == 5
