"""Producer.send_async against a real server: completeness and order, the server's
limits, a server that dies mid-stream, back-pressure, flush and close."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import wait

import pytest

from fmq.client import BufferFull, Producer
from fmq.errors import BrokerClosed, ConnectionLost, FMQError, MessageTooLarge, RequestTimeout
from fmq.protocol import Op
from tests.server.harness import server_stats

from .conftest import FAST
from .helpers import QUEUES, read_topic

WAIT = 60  # seconds: the bound of every wait here


def test_every_message_is_stored_once_and_each_queue_keeps_send_order(start_server):
    srv = start_server(FAST)
    threads, per_thread = 4, 1500
    futures: dict[int, list] = {}
    with Producer(srv.address, max_in_flight=1, linger_ms=2, batch_size=16 * 1024) as p:
        def produce(t: int) -> None:
            futures[t] = [p.send_async("ord", f"{t}-{i}".encode() + bytes(200), queue_id=t,
                                       key=f"k{i}") for i in range(per_thread)]
        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(WAIT)
        p.flush(WAIT)
        for t in range(threads):
            assert all(f.done() for f in futures[t])
            results = [f.result() for f in futures[t]]
            assert [r.queue_id for r in results] == [t] * per_thread
            # One batch in flight: the queue holds them in the order they were sent.
            assert [r.queue_offset for r in results] == list(range(per_thread))
    stored = read_topic(srv.address, "ord")
    for t in range(threads):
        assert [m.body[:-200].decode() for m in stored[t]] == [f"{t}-{i}"
                                                               for i in range(per_thread)]
        assert [m.key for m in stored[t]] == [f"k{i}" for i in range(per_thread)]


def test_messages_placed_by_the_server_are_all_stored_exactly_once(start_server):
    srv = start_server(FAST)
    n = 5000
    with Producer(srv.address) as p:  # many batches in flight
        futs = [p.send_async("spread", str(i).encode()) for i in range(n)]
        p.flush(WAIT)
        results = [f.result() for f in futs]
    assert len({(r.queue_id, r.queue_offset) for r in results}) == n
    stored = read_topic(srv.address, "spread")
    assert {q for q, msgs in stored.items() if msgs} == set(range(QUEUES))  # round robin
    bodies = [m.body for msgs in stored.values() for m in msgs]
    assert sorted(bodies) == sorted(str(i).encode() for i in range(n))
    for r, i in zip(results, range(n), strict=True):
        assert stored[r.queue_id][r.queue_offset].body == str(i).encode()


def test_batches_are_cut_to_the_servers_frame_size_and_message_count(start_server):
    """The server accepts frames of 8 KiB and 10 messages per SEND_BATCH; the client's
    64 KiB batches would break both, so they are cut: every message is stored, and the
    one message too large for any frame fails alone."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_frame_size=8192,
                                              max_batch_messages=10)))
    with Producer(srv.address, max_batch_messages=10, linger_ms=50) as p:
        futs = [p.send_async("cut", bytes([i % 256]) * 1000) for i in range(60)]
        futs.insert(30, p.send_async("cut", bytes(9000)))
        futs += [p.send_async("cut", bytes(10)) for i in range(35)]
        assert wait(futs, WAIT).not_done == set()
        with pytest.raises(MessageTooLarge, match="max_frame_size of 8192"):
            futs[30].result()
        ok = [f.result() for i, f in enumerate(futs) if i != 30]
        assert p.send("cut", b"still connected").queue_offset >= 0
    stored = read_topic(srv.address, "cut")
    assert sum(len(m) for m in stored.values()) == len(ok) + 1
    assert not any(len(m.body) == 9000 for msgs in stored.values() for m in msgs)


def test_client_batch_over_the_servers_message_limit_fails_its_messages(start_server):
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_batch_messages=10)))
    with Producer(srv.address, max_batch_messages=11, linger_ms=1000) as p:
        futs = [p.send_async("lim", b"m") for _ in range(11)]
        p.flush(WAIT)
        for f in futs:
            with pytest.raises(FMQError, match="max_batch_messages"):
                f.result()
        assert p.send("lim", b"the connection stays usable").queue_offset == 0


def test_a_server_killed_mid_stream_fails_futures_with_typed_errors_and_none_hangs(
        start_server):
    srv = start_server(FAST)
    p = Producer(srv.address, retries=2, backoff_initial=0.05, request_timeout=5,
                 connect_timeout=1)
    futs = []
    for i in range(20_000):
        futs.append(p.send_async("kill", str(i).encode() + bytes(500)))
        if i == 5000:
            srv.kill()
    done, not_done = wait(futs, WAIT)
    assert not not_done
    failed = [f.exception() for f in futs if f.exception() is not None]
    assert failed and all(isinstance(e, (ConnectionLost, RequestTimeout)) for e in failed)
    stored_ok = [(i, f.result()) for i, f in enumerate(futs) if f.exception() is None]
    p.close(WAIT)
    # What was acknowledged is durable: it is there after a restart.
    srv.start()
    stored = read_topic(srv.address, "kill")
    for i, r in stored_ok:
        assert stored[r.queue_id][r.queue_offset].body.startswith(str(i).encode() + b"\0")


def test_a_batch_not_written_is_sent_again_once_the_server_is_back(start_server):
    srv = start_server(FAST)
    with Producer(srv.address, retries=8, backoff_initial=0.3, backoff_max=2,
                  connect_timeout=1) as p:
        assert p.send_async("back", b"first").result(WAIT).queue_offset == 0
        srv.kill()
        for _ in range(WAIT * 20):  # the reader thread notices the closed socket
            if p._conn is None or p._conn.closed:
                break
            threading.Event().wait(0.05)
        fut = p.send_async("back", b"second")  # cannot connect: nothing written yet
        srv.start()
        assert fut.result(WAIT).queue_offset == 1
    assert [m.body for m in sum(read_topic(srv.address, "back").values(), [])] == [
        b"first", b"second"]


def test_a_full_buffer_blocks_then_raises_buffer_full(start_server):
    srv = start_server(FAST)
    p = Producer(srv.address, buffer_memory=8 * 1024, max_block_s=0.3, linger_ms=0)
    try:
        assert p.send_async("full", b"warm", queue_id=0).result(WAIT).queue_offset == 0
        os.kill(srv.proc.pid, signal.SIGSTOP)  # answers stop: the buffer cannot drain
        try:
            futs = []
            with pytest.raises(BufferFull, match="buffer of 8192 bytes"):
                for _ in range(100):
                    futs.append(p.send_async("full", bytes(1000), queue_id=0))
            assert 0 < len(futs) < 100
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        p.flush(WAIT)
        assert [f.result().queue_offset for f in futs] == list(range(1, len(futs) + 1))
    finally:
        p.close(WAIT)


def test_flush_sends_at_once_and_close_flushes(start_server):
    srv = start_server(FAST)
    p = Producer(srv.address, linger_ms=600_000)  # only flush or close can send these
    first = [p.send_async("fl", f"a{i}".encode()) for i in range(10)]
    p.flush(WAIT)
    assert all(f.done() for f in first)
    second = [p.send_async("fl", f"b{i}".encode()) for i in range(10)]
    assert not any(f.done() for f in second)
    with pytest.raises(RequestTimeout, match="10 messages still wait"):
        p.flush(0)  # gives up at once, sends them anyway
    p.close(WAIT)
    assert all(f.done() and f.exception() is None for f in second)
    with pytest.raises(BrokerClosed):
        p.send_async("fl", b"too late")
    stored = read_topic(srv.address, "fl")
    assert sum(len(m) for m in stored.values()) == 20


def test_an_invalid_message_fails_at_once_and_a_refused_one_fails_its_future(start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as p:
        with pytest.raises(FMQError):
            p.send_async("t", "not bytes")
        bad = p.send_async("bad topic!", b"x")  # the server checks topics: its batch fails
        with pytest.raises(FMQError, match="invalid topic"):
            bad.result(WAIT)
        assert p.send_async("t", b"ok").result(WAIT).queue_offset >= 0


def test_a_batch_refused_as_busy_is_sent_again_until_stored(start_server):
    """The server allows one request in flight per connection; a long-poll PULL holds it,
    so the batch behind it is refused with ServerBusy (nothing stored) and sent again."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_in_flight=1)))
    with Producer(srv.address, retries=20, backoff_initial=0.1, backoff_max=0.3) as p:
        p.ping()
        poll = p.submit(Op.PULL, {"topic": "busy", "queue_id": 3, "offset": 0,
                                  "max_messages": 1, "wait_ms": 1500})
        futs = [p.send_async("busy", f"m{i}".encode(), queue_id=0) for i in range(50)]
        p.flush(WAIT)
        assert [f.result().queue_offset for f in futs] == list(range(50))
        assert poll.result(WAIT)["messages"] == []
        busy = server_stats(p)["busy_refusals"]
    assert busy >= 1
    assert [m.body for m in read_topic(srv.address, "busy")[0]] == [
        f"m{i}".encode() for i in range(50)]  # each stored once, in order


def test_an_unreachable_server_fails_every_waiting_batch_at_once(start_server):
    """Once one batch has used its reconnect attempts, the batches behind it fail with the
    same error instead of each trying a round of reconnects of its own."""
    srv = start_server(FAST)
    p = Producer(srv.address, retries=2, backoff_initial=0.05, batch_size=100,
                 connect_timeout=1)
    try:
        p.ping()
        srv.kill()
        for _ in range(WAIT * 20):  # the reader thread notices the closed socket
            if p._conn is None or p._conn.closed:
                break
            threading.Event().wait(0.05)
        futs = [p.send_async("down", bytes(200)) for _ in range(200)]  # 200 batches
        p.flush(WAIT)
        errors = {id(f.exception()): f.exception() for f in futs}
        assert len(errors) == 1
        assert isinstance(next(iter(errors.values())), ConnectionLost)
    finally:
        p.close(WAIT)
