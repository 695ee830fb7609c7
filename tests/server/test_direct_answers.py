"""The send pipeline answers its requests directly (SendBatcher.answer_directly): a session's
answer is written as the pipeline ends the request, in the same loop turn, not from a done
callback a turn later; exactly once, on every way a request ends (placed and flushed,
refused by place(), answered at once, or ended by an awaitable it gave)."""

from __future__ import annotations

import asyncio

import pytest

import fmq
from fmq.errors import InvalidArgument
from fmq.message import Message
from fmq.server.ops.batcher import SendBatcher


@pytest.fixture
def broker(tmp_path):
    b = fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig())
    yield b
    b.close()


def run_with_batcher(broker, scenario):
    async def main():
        batcher = SendBatcher(broker, asyncio.get_running_loop(), 1000)
        try:
            return await asyncio.wait_for(scenario(batcher), 60)
        finally:
            await asyncio.to_thread(batcher.close)
    return asyncio.run(main())


def test_a_send_is_answered_before_a_done_callback_could_run(broker):
    async def scenario(batcher):
        order = []
        fut = batcher.submit([Message("direct", b"x")])
        fut.add_done_callback(lambda f: order.append("done callback"))
        batcher.answer_directly(fut, lambda f: order.append(("answered", f.done())))
        await fut
        await asyncio.sleep(0)  # the done callback's turn
        return order, fut.result()

    order, results = run_with_batcher(broker, scenario)
    assert order == [("answered", True), "done callback"]
    assert len(results) == 1 and results[0].queue_offset == 0


def test_every_send_of_a_flush_is_answered_once(broker):
    async def scenario(batcher):
        answered = []
        futs = []
        for i in range(50):
            fut = batcher.submit([Message("direct-many", str(i).encode())])
            batcher.answer_directly(fut, answered.append)
            futs.append(fut)
        await asyncio.gather(*futs)
        return futs, answered

    futs, answered = run_with_batcher(broker, scenario)
    assert answered == futs  # once each, in the order they were sent


def test_a_write_whose_placing_fails_is_answered_once_with_its_error(broker):
    def place():
        raise InvalidArgument("refused by place()")

    async def scenario(batcher):
        answered = []
        fut = batcher.submit_write(place, lambda token, failure: token)
        batcher.answer_directly(fut, answered.append)
        with pytest.raises(InvalidArgument, match="refused by place"):
            await fut
        return fut, answered

    fut, answered = run_with_batcher(broker, scenario)
    assert answered == [fut]


def test_a_write_answered_at_once_or_by_an_awaitable_is_answered_once(broker):
    async def scenario(batcher):
        loop = asyncio.get_running_loop()
        later = loop.create_future()
        answered = []
        now = batcher.submit_write(lambda: ("at once", None), lambda token, failure: token)
        batcher.answer_directly(now, answered.append)
        by_awaitable = batcher.submit_write(lambda: (later, None), lambda t, f: t)
        batcher.answer_directly(by_awaitable, answered.append)
        assert await now == "at once"
        loop.call_later(0.05, later.set_result, "later")
        assert await by_awaitable == "later"
        await asyncio.sleep(0)
        return [now, by_awaitable], answered

    futs, answered = run_with_batcher(broker, scenario)
    assert answered == futs


def test_a_future_not_just_submitted_gets_a_done_callback_instead(broker):
    async def scenario(batcher):
        answered = []
        first = batcher.submit([Message("direct-old", b"a")])
        batcher.submit([Message("direct-old", b"b")])
        batcher.answer_directly(first, answered.append)  # not the latest: a done callback
        await first
        await asyncio.sleep(0)
        return first, answered

    first, answered = run_with_batcher(broker, scenario)
    assert answered == [first]
