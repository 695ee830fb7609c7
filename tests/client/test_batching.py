"""The batching rules shared by the threaded and the asyncio producer, without a server:
when a batch closes, the order batches go out in, how a batch is cut to the server's
limits, what may be sent again, and the buffer's byte count."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from fmq.client.batching import Batch, BatchQueue, Limits, complete, resend_is_safe
from fmq.errors import (
    ConnectionLost,
    IndexUnavailable,
    InvalidArgument,
    LeadershipLost,
    NotEnoughReplicas,
    NotPrimary,
    ProtocolError,
    RequestTimeout,
    ServerBusy,
)
from fmq.message import SendResult
from fmq.protocol.batch import BATCH_FRAME_OVERHEAD


def queue(batch_size=100, max_messages=1000, max_frame=10_000, linger=0.005) -> BatchQueue:
    return BatchQueue(Limits(batch_size, max_messages, max_frame), linger)


def part(n: int, tag: int = 0) -> bytes:
    return bytes([tag % 256]) * n


def test_a_batch_closes_at_batch_size_and_at_max_messages():
    q = queue(batch_size=100, max_messages=3)
    assert q.add(part(40), "a", 0.0)  # opens a batch: the linger starts
    assert not q.add(part(40), "b", 0.0)
    assert q.add(part(40), "c", 0.0)  # would exceed 100 bytes: the first batch closes
    assert [b.handles for b in q.ready] == [["a", "b"]]
    q.add(part(1), "d", 0.0)
    q.add(part(1), "e", 0.0)  # three messages: closes at once
    assert [b.handles for b in q.ready] == [["a", "b"], ["c", "d", "e"]]
    assert q.open is None and q.buffered == 122
    q.add(part(500), "big", 0.0)  # larger than batch_size alone: a batch of its own
    assert [b.handles for b in q.ready][-1] == ["big"]


def test_the_open_batch_goes_out_when_its_linger_ends():
    q = queue(linger=0.005)
    q.add(part(10), "a", 1.0)
    batch, wait = q.next_batch(1.001, max_in_flight=4)
    assert batch is None and wait == pytest.approx(0.004)
    batch, _ = q.next_batch(1.005, max_in_flight=4)
    assert batch.handles == ["a"] and q.open is None
    assert q.next_batch(1.006, 4) == (None, None)


def test_in_flight_limit_and_answer_deadlines():
    q = queue(batch_size=10)
    for tag in range(3):
        q.add(part(10, tag), tag, 0.0)
    first, _ = q.next_batch(0.0, max_in_flight=1)
    q.sending(first, deadline=5.0)
    assert q.next_batch(1.0, max_in_flight=1) == (None, 4.0)  # waits for the slot
    assert q.expired(4.9) == [] and q.expired(5.0) == [first]
    q.finished(first)
    second, _ = q.next_batch(1.0, max_in_flight=1)
    assert second.handles == [1]


def test_a_batch_sent_again_holds_back_every_later_batch():
    q = queue(batch_size=10)
    for tag in range(3):
        q.add(part(10, tag), tag, 0.0)
    first, _ = q.next_batch(0.0, 2)
    second, _ = q.next_batch(0.0, 2)
    q.sending(first, 9.0)
    q.sending(second, 9.0)
    q.send_again(first, not_before=1.0)
    assert first.attempts == 1
    assert q.next_batch(0.5, 2) == (None, 0.5)  # the third batch waits too
    again, _ = q.next_batch(1.0, 2)
    assert again is first
    third, _ = q.next_batch(1.0, 3)
    assert third.handles == [2]


def test_fit_cuts_a_batch_to_the_frame_size_and_message_count_in_order():
    room = 100
    q = queue(batch_size=10_000, max_messages=3, max_frame=room + BATCH_FRAME_OVERHEAD)
    big = Batch(0.0)
    for tag in range(7):
        big.add(part(40, tag), tag)
    big.add(part(101, 99), "too large")
    big.add(part(10, 7), 7)
    q.unfinished.add(big)
    q.buffered = big.size
    first, too_large = q.fit(big)
    assert too_large.handles == ["too large"] and too_large.size == 101
    pieces = [first, *q.ready]
    assert [p.handles for p in pieces] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(p.size <= room and len(p.parts) <= 3 for p in pieces)
    assert q.unfinished == {*pieces, too_large} and q.waiting_before(1) == 9
    for p in [*pieces, too_large]:
        q.finished(p)
    assert q.buffered == 0 and q.idle and big.done


def test_a_batch_within_the_limits_is_sent_as_it_is():
    q = queue(max_frame=10_000)
    q.add(part(50), "a", 0.0)
    q.close_open()
    batch = q.ready.popleft()
    assert q.fit(batch) == (batch, None)


@pytest.mark.parametrize(("error", "written", "safe"), [
    (ServerBusy("busy"), True, True),
    (IndexUnavailable("lag"), True, True),
    (ConnectionLost("lost"), False, True),
    (ConnectionLost("lost"), True, False),  # it may be stored: never twice
    (RequestTimeout("late"), True, False),
    (NotEnoughReplicas(0, 1), True, False),  # refused, but its records may be in the log
    (NotPrimary("h:1"), True, True),  # a follower stores nothing
    (LeadershipLost("h:1"), True, False),  # a fenced primary stored it, unacknowledged
    (InvalidArgument("bad"), True, False),
    (ProtocolError("bad"), False, False),
    (OSError("not ours"), False, False),
])
def test_only_a_failure_that_stored_nothing_is_sent_again(error, written, safe):
    assert resend_is_safe(error, written) is safe


def test_complete_gives_each_handle_its_result_or_the_error():
    batch = Batch(0.0)
    handles = [Future(), Future(), Future()]
    for h in handles:
        batch.add(b"m", h)
    assert handles[1].cancel()  # the owner gave up waiting: the others still get theirs
    results = [SendResult(1, 0, 0), SendResult(2, 0, 1), SendResult(3, 0, 2)]
    complete(batch, results)
    assert [handles[0].result(), handles[2].result()] == [results[0], results[2]]

    short = Batch(0.0)
    h = Future()
    short.add(b"m", h)
    short.add(b"m", Future())
    complete(short, results[:1])  # a count that does not match is the server's fault
    with pytest.raises(ProtocolError):
        h.result(0)


def test_a_batch_waits_while_sending_it_would_spread_unanswered_sequences_over_the_window():
    q = BatchQueue(Limits(1000, 5, 10_000), 0.0, window=12)
    for seq in range(15):  # three batches of 5: sequences 0-4, 5-9, 10-14
        q.add(part(10), f"m{seq}", 0.0, seq)
    first, _ = q.next_batch(0.0, 8)
    q.sending(first, 5.0)
    second, _ = q.next_batch(0.0, 8)
    q.sending(second, 5.0)
    assert (first.low, first.high, second.low, second.high) == (0, 4, 5, 9)
    # 14 - 0 >= 12: the third waits until the first is answered (its deadline bounds that)
    assert q.next_batch(0.0, 8) == (None, 5.0)
    q.finished(first)
    third, _ = q.next_batch(0.0, 8)
    assert (third.low, third.high) == (10, 14)
    unnumbered = BatchQueue(Limits(1000, 5, 10_000), 0.0, window=1)
    for i in range(10):
        unnumbered.add(part(10), i, 0.0)
    a, _ = unnumbered.next_batch(0.0, 8)
    unnumbered.sending(a, 5.0)
    assert unnumbered.next_batch(0.0, 8)[0] is not None  # nothing numbered: no hold-back
