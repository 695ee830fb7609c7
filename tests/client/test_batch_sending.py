"""A batching producer's decisions shared by the threaded and the asyncio sender, without a
server: the server's limits, buffer room, what a failed or overdue batch becomes, and
what closing fails."""

from __future__ import annotations

from concurrent.futures import Future

from fmq.client.batch_sending import BatchSending
from fmq.client.batching import Limits
from fmq.client.deadline import Attempts
from fmq.errors import (
    BrokerClosed,
    ConnectionLost,
    DeliveryTimeout,
    InvalidArgument,
    MessageTooLarge,
    RequestTimeout,
    ServerBusy,
)


def core(buffer_memory=100, retries=2, idempotent=False, max_in_flight=128,
         delivery_timeout=None) -> BatchSending:
    def attempts(started: float) -> Attempts:
        return Attempts(retries, delivery_timeout, lambda attempt: 0.5 * (attempt + 1),
                        started)

    return BatchSending(Limits(1000, 1000, 10_000), 0.0, buffer_memory=buffer_memory,
                        max_block_s=3.0, max_in_flight=max_in_flight, attempts=attempts,
                        idempotent=idempotent)


def closed_batch(c: BatchSending, *sizes: int):
    for n in sizes:
        c.queue.add(b"x" * n, Future(), 0.0)
    c.queue.close_open()
    batch, _wait = c.queue.next_batch(0.0, c.max_in_flight)
    return batch


def test_the_server_limits_cap_in_flight_batches_and_the_frame():
    c = core(max_in_flight=16)
    c.adopt_server_limits({"max_in_flight": 64, "max_frame_size": 5000})
    assert c.max_in_flight == 16 and c.queue.limits.max_frame == 5000
    c.adopt_server_limits({"max_in_flight": 0, "max_frame_size": 5000})
    assert c.max_in_flight == 1
    assert isinstance(c.too_large(), MessageTooLarge)
    assert "max_frame_size of 5000 bytes" in str(c.too_large())


def test_a_full_buffer_makes_callers_wait_but_an_empty_one_takes_any_message():
    c = core(buffer_memory=100)
    assert not c.no_room_for(500)  # empty: a message larger than the buffer goes in
    c.queue.add(b"x" * 60, Future(), 0.0)
    assert not c.no_room_for(40) and c.no_room_for(41)
    assert "buffer of 100 bytes stayed full for 3.0s" in str(c.buffer_full())


def test_a_failure_that_stored_nothing_sends_the_batch_again_after_a_back_off():
    c = core(retries=1)
    batch = closed_batch(c, 10)
    c.queue.sending(batch, 5.0)
    assert c.failed(batch, ServerBusy("busy"), written=True, closing=False, now=10.0)[0] == []
    assert c.queue.resend[0] == (10.5, batch) and batch not in c.queue.in_flight
    assert c.queue.next_batch(10.5, 8) == (batch, None)
    busy = ServerBusy("busy")
    assert c.failed(batch, busy, True, False, 11.0) == ([batch], busy)  # retries used


def test_without_a_count_a_batch_is_sent_again_until_its_delivery_deadline():
    c = core(retries=None, delivery_timeout=30.0, idempotent=True)
    batch = closed_batch(c, 10)  # opened at 0.0: due by 30.0
    lost = ConnectionLost("the primary went away")
    now = 0.0
    for _ in range(20):  # far more than any count of retries
        c.queue.sending(batch, now + 1)
        assert c.failed(batch, lost, written=True, closing=False, now=now)[0] == []
        now, resent = c.queue.resend.popleft()
        c.queue.in_flight[batch] = now
        if now > 25:
            break
    assert now > 25
    failing, error = c.failed(batch, lost, written=True, closing=False, now=29.9)
    assert failing == [batch]
    assert isinstance(error, DeliveryTimeout) and error.last_error is lost
    assert "delivery_timeout (30s)" in str(error) and "the primary went away" in str(error)


def test_a_written_batch_that_may_be_stored_fails_unless_the_producer_is_idempotent():
    lost = ConnectionLost("lost")
    plain, idem = core(), core(idempotent=True)
    b1, b2 = closed_batch(plain, 10), closed_batch(idem, 10)
    assert plain.failed(b1, lost, written=True, closing=False, now=0.0) == ([b1], lost)
    assert idem.failed(b2, lost, written=True, closing=False, now=0.0) == ([], lost)
    assert core().failed(closed_batch(core(), 1), lost, True, closing=True, now=0.0)


def test_no_connection_at_all_fails_every_waiting_batch_with_it():
    c = core(retries=0)
    first = closed_batch(c, 10)
    c.queue.add(b"y" * 10, Future(), 0.0)
    waiting = c.queue.open
    down = ConnectionLost("down")
    assert c.failed(first, down, written=False, closing=False,
                    now=0.0) == ([first, waiting], down)
    assert c.failed(closed_batch(c, 5), InvalidArgument("bad"), False, False, 0.0)[0] != []


def test_a_batch_with_its_outcome_is_left_alone():
    c = core()
    batch = closed_batch(c, 10)
    c.queue.finished(batch)
    assert c.failed(batch, ServerBusy("busy"), True, False, 0.0) is None


def test_an_overdue_batch_is_reported_once_with_its_size():
    c = core()
    batch = closed_batch(c, 10, 10)
    c.queue.sending(batch, 1.0)
    assert c.queue.expired(2.0) == [batch]
    error = c.overdue(batch, 1.0)
    assert isinstance(error, RequestTimeout) and "SEND_BATCH of 2 messages" in str(error)
    assert c.queue.expired(2.0) == []


def test_closing_finishes_every_unsent_batch_and_names_the_error():
    c = core()
    c.queue.add(b"x" * 10, Future(), 0.0)
    left, error = c.abandon()
    assert len(left) == 1 and left[0].done and c.queue.buffered == 0 and c.queue.idle
    assert isinstance(error, BrokerClosed)


def test_a_flush_that_timed_out_says_how_many_messages_still_wait():
    c = core()
    c.queue.add(b"x" * 10, Future(), 0.0)
    c.queue.add(b"x" * 10, Future(), 0.0)
    upto = c.queue.close_open()
    assert "flush: 2 messages still wait for the server after 2.0s" in str(
        c.flush_timed_out(upto, 2.0))
