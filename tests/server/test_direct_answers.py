"""The send pipeline answers its requests directly (SendBatcher.answer_directly): a session's
answer is written as the pipeline ends the request, in the same loop turn, not from a done
callback a turn later; exactly once, on every way a request ends (placed and flushed,
refused by place(), answered at once, or ended by an awaitable it gave)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import fmq
from fmq.errors import InvalidArgument
from fmq.message import Message
from fmq.server.ops.batcher import SendBatcher
from fmq.server.ops.placed import PlacedSends


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


# ---- flushes handed back: answered by the loop's next read or placement, or its wake-up


def in_thread(work):
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()


def test_a_flush_handed_back_is_answered_by_the_next_look_once(broker):
    """A flush the acknowledger hands back is answered by whoever looks first on the loop
    (a session's read: answer_handed_back), and the wake-up callback that follows finds
    nothing left: each request answered once, in the order of the flushes."""
    async def scenario(batcher):
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(6)]
        answered = []
        flushes = [PlacedSends(0, [([Message("handed", b"x")], fut, None, answered.append)],
                               [f"result {i}"]) for i, fut in enumerate(futs)]
        # From another thread, as the acknowledger does, while the loop is busy here (it
        # waits for the thread without yielding): the wake-up callback cannot run yet.
        in_thread(lambda: [batcher._hand_back([p], None) for p in flushes[:3]])
        assert [f.done() for f in futs[:3]] == [False] * 3
        assert len(batcher.handed_back) == 3
        batcher.answer_handed_back()  # a session's read looks first
        assert answered == futs[:3] and not batcher.handed_back
        in_thread(lambda: [batcher._hand_back([p], None) for p in flushes[3:]])
        for _ in range(50):  # the wake-up callbacks run: the earlier one finds nothing
            await asyncio.sleep(0)
            if len(answered) == 6:
                break
        await asyncio.sleep(0.01)
        return futs, answered

    futs, answered = run_with_batcher(broker, scenario)
    assert answered == futs
    assert [f.result() for f in futs] == [[f"result {i}"] for i in range(6)]


def test_flushes_handed_back_from_two_threads_while_the_loop_looks_are_each_answered_once(
        broker):
    """The acknowledger and the replica stage hand flushes back from their own threads while
    the loop drains the queue at its reads: no flush is lost between a hand-back that finds
    a wake-up pending and that wake-up's run, and none is answered twice."""
    per_thread = 2000

    async def scenario(batcher):
        loop = asyncio.get_running_loop()
        answered = []
        futs = [loop.create_future() for _ in range(2 * per_thread)]
        flushes = [PlacedSends(0, [([Message("handed", b"x")], fut, None, answered.append)],
                               [i]) for i, fut in enumerate(futs)]

        def hand_back(part):
            for p in part:
                batcher._hand_back([p], None)

        threads = [loop.run_in_executor(None, hand_back, flushes[:per_thread]),
                   loop.run_in_executor(None, hand_back, flushes[per_thread:])]
        while not all(t.done() for t in threads):
            batcher.answer_handed_back()  # the reads between the wake-ups
            await asyncio.sleep(0)
        await asyncio.gather(*threads)
        await asyncio.wait_for(asyncio.gather(*futs), 10)  # the last wake-up's work
        return futs, answered

    futs, answered = run_with_batcher(broker, scenario)
    assert sorted(map(id, answered)) == sorted(map(id, futs))  # each once
    assert answered[:per_thread] != [] and len(answered) == len(futs)
