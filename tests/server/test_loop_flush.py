"""The event loop leads the send pipeline's flushes (fmq.server.ops.loop_flush): each
acknowledged send is durable when answered and answered once, with 64 producers and other
threads' wait_durable mixed in; a failed write through the flusher fails every waiter, every
placed request and every later append; a shutdown with a flush in flight ends it; the
fall-back (a segment roll, an I/O that counts its steps) still flushes through a leader.
Real brokers on real files; both paths (the compiled flusher or the pure one)."""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest

import fmq
from fmq import native
from fmq.errors import LogFailed
from fmq.log.fileio import FileIO
from fmq.message import Message
from fmq.server.ops import loop_flush
from fmq.server.ops.batcher import SendBatcher

PRODUCERS = 64


@pytest.fixture
def broker(tmp_path):
    b = fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig())
    yield b
    b.close()


def test_the_flusher_is_the_compiled_one_unless_the_pure_path_is_asked_for():
    expected = "fmq.log.flusher" if native.no_extensions() else "fmq.log._flusher_c"
    if not native.no_extensions() and native.load("fmq.log._flusher_c") is None:
        pytest.skip("the compiled modules are not installed")
    assert loop_flush.Flusher.__module__ == expected


def run_with_batcher(broker, scenario, timeout: float = 120):
    async def main():
        batcher = SendBatcher(broker, asyncio.get_running_loop(), 1000,
                              loop_flush=True)
        try:
            return await asyncio.wait_for(scenario(batcher), timeout)
        finally:
            await asyncio.to_thread(batcher.close)
    return asyncio.run(main())


def _producers_with_thread_waits(broker, sends_each: int, pad: int = 0
                                 ) -> tuple[dict, list, list, int]:
    """64 producers on the loop, one send in flight each, and 4 threads sending through
    Broker.send (whose wait_durable follows the loop's flushes or leads its own). Returns
    each loop send's answers, the answers not durable when made, the threads' results, and
    the flushes the loop led."""
    answers: dict[asyncio.Future, int] = {}
    not_durable: list = []
    thread_results: list = []
    stop = threading.Event()

    def thread_sender(i: int) -> None:
        n = 0
        while not stop.is_set():
            result = broker.send(Message("mixed", f"t{i}-{n}".encode()))
            assert broker.durable_end > result.offset
            thread_results.append(result)
            n += 1
            # Threads waiting back to back would lead every flush (one of them is always
            # waiting when a flush ends): let the loop lead some too.
            stop.wait(0.002)

    async def producer(batcher, i: int) -> None:
        for n in range(sends_each):
            fut = batcher.submit([Message("mixed", f"p{i}-{n}".encode() + bytes(pad))])

            def answered(f, fut=fut):
                answers[fut] = answers.get(fut, 0) + 1
                if not f.exception() and broker.durable_end <= f.result()[0].offset:
                    not_durable.append(f.result()[0])
            batcher.answer_directly(fut, answered)
            await fut

    async def scenario(batcher):
        assert batcher._loop_flush is not None
        threads = [threading.Thread(target=thread_sender, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        try:
            await asyncio.gather(*(producer(batcher, i) for i in range(PRODUCERS)))
        finally:
            stop.set()
            await asyncio.to_thread(lambda: [t.join(30) for t in threads])
        return batcher._loop_flush.flushes

    flushes = run_with_batcher(broker, scenario)
    return answers, not_durable, thread_results, flushes


def test_64_producers_are_each_answered_once_once_durable_with_thread_waits_mixed_in(broker):
    answers, not_durable, thread_results, flushes = _producers_with_thread_waits(broker, 40)
    assert len(answers) == PRODUCERS * 40
    assert set(answers.values()) == {1}, "a send was answered more than once"
    assert not not_durable, f"answered before durable: {not_durable[:3]}"
    assert thread_results, "the threads' sends never completed"
    assert flushes > 0, "the loop led no flush: the test proved nothing about it"
    offsets = [r.offset for r in thread_results]
    assert len(set(offsets)) == len(offsets)


def test_segment_rolls_go_through_a_leader_and_every_send_is_still_answered(tmp_path):
    b = fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(segment_size=64 * 1024,
                                                      max_message_size=16 * 1024))
    try:
        answers, not_durable, _thread_results, _flushes = _producers_with_thread_waits(b, 30, 1024)
        assert len(b.replica.log.segments) > 10, "too few segment rolls"
    finally:
        b.close()
    assert len(answers) == PRODUCERS * 30 and set(answers.values()) == {1}
    assert not not_durable


class CountingIO(FileIO):
    """An I/O that counts its syncs (as the crash tests' I/O counts its steps)."""

    def __init__(self) -> None:
        self.syncs = 0

    def fdatasync(self, fd: int) -> None:
        self.syncs += 1
        super().fdatasync(fd)


def test_an_io_that_counts_its_steps_sees_every_flush_through_a_leader(tmp_path):
    io = CountingIO()
    b = fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(), io=io)

    async def scenario(batcher):
        futs = [batcher.submit([Message("counted", str(i).encode())]) for i in range(20)]
        await asyncio.gather(*futs)
        return batcher._loop_flush.flushes, futs

    try:
        syncs_before = io.syncs
        flushes, futs = run_with_batcher(b, scenario)
        assert flushes == 0  # the flusher's own calls would bypass the counting I/O
        assert io.syncs > syncs_before
        assert all(b.durable_end > f.result()[0].offset for f in futs)
    finally:
        b.close()


def test_a_failed_write_through_the_flusher_fails_every_waiter_and_later_appends(broker):
    """The active segment's descriptor is made read-only (dup2 of a read-only descriptor of
    the same file over it): the kernel refuses the flusher's pwrite with EBADF."""
    broker.send(Message("failing", b"before"))  # the segment exists
    durable_before = broker.durable_end
    seg = broker.replica.log.active_segment
    read_only = os.open(seg.path, os.O_RDONLY)
    os.dup2(read_only, seg.fd)
    os.close(read_only)
    thread_errors: list[BaseException] = []

    def thread_send() -> None:
        try:
            broker.send(Message("failing", b"from a thread"))
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            thread_errors.append(exc)

    async def scenario(batcher):
        answered: list = []
        futs = []
        for i in range(PRODUCERS):
            fut = batcher.submit([Message("failing", str(i).encode())])
            batcher.answer_directly(fut, answered.append)
            futs.append(fut)
        outcomes = await asyncio.gather(*futs, return_exceptions=True)
        flushes = batcher._loop_flush.flushes
        await asyncio.to_thread(thread_send)
        later = batcher.submit([Message("failing", b"later")])
        later_outcome = (await asyncio.gather(later, return_exceptions=True))[0]
        return outcomes, answered, futs, flushes, later_outcome

    outcomes, answered, futs, flushes, later = run_with_batcher(broker, scenario)
    assert flushes == 1, "the failing write was not the flusher's"
    assert answered == futs
    assert all(isinstance(o, LogFailed) for o in outcomes), outcomes[:3]
    cause = broker.log_failure
    assert isinstance(cause, OSError) and cause.errno == errno.EBADF
    assert len(thread_errors) == 1 and isinstance(thread_errors[0], LogFailed)
    assert isinstance(later, LogFailed)
    with pytest.raises(LogFailed):
        broker.send(Message("failing", b"refused"))
    assert broker.durable_end == durable_before  # nothing more was called durable


def test_a_shutdown_with_a_flush_in_flight_answers_it_first(broker):
    async def scenario(batcher):
        futs = [batcher.submit([Message("closing", str(i).encode())])
                for i in range(PRODUCERS)]
        await asyncio.sleep(0)  # the turn's placement starts the flush
        assert batcher._loop_flush._flush is not None, "no flush in flight"
        closing = asyncio.ensure_future(asyncio.to_thread(batcher.close))
        results = await asyncio.gather(*futs)
        await closing
        return results

    async def main():
        batcher = SendBatcher(broker, asyncio.get_running_loop(), 1000,
                              loop_flush=True)
        return await asyncio.wait_for(scenario(batcher), 60)

    results = asyncio.run(main())
    assert len(results) == PRODUCERS
    assert all(broker.durable_end > r[0].offset for r in results)


def test_a_loop_gone_with_a_flush_in_flight_is_ended_by_close(broker):
    """The loop stops (its requests abandoned) while its flush runs: close(), from another
    thread, still ends that flush, so the broker's own close does not wait for it forever."""
    holder: dict = {}

    async def main():
        batcher = holder["batcher"] = SendBatcher(broker, asyncio.get_running_loop(), 1000,
                              loop_flush=True)
        holder["futs"] = [batcher.submit([Message("gone", b"x")]) for _ in range(8)]
        await asyncio.sleep(0)
        assert batcher._loop_flush._flush is not None, "no flush in flight"

    asyncio.run(main())
    closer = threading.Thread(target=holder["batcher"].close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() hung on the flush in flight"
    end = broker.replica.log.next_offset
    assert broker.durable_end == end
    broker.close()  # its flush finds nothing under way
