"""Where a PULL is read (fmq.server.ops.pull_reads): records written lately on the event loop,
anything else in a reader thread, with the same answer either way. Function-level tests
against a real broker (its log and LMDB index in a temporary directory), then a real
server on 127.0.0.1 that counts where its pulls ran."""

from __future__ import annotations

import threading
import time

import pytest

import fmq
from fmq.client import Client, Producer
from fmq.engine.reads import NotInMemory
from fmq.engine.recent import RecentMessages
from fmq.message import Message
from fmq.protocol import Op
from fmq.server.ops.pull_reads import pull_now

from .harness import server_stats

BODY = b"m" * 1000
MAX_BYTES = 1024 * 1024


@pytest.fixture
def broker(tmp_path):
    b = fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(queues_per_topic=1))
    yield b
    b.close()


def read(broker: fmq.Broker, offset: int, **kwargs) -> tuple:
    """pull_now of queue t/0 from ``offset``, its encoded items as bytes (comparable)."""
    items, *rest = pull_now(broker, RecentMessages(1 << 20), False, "t", 0, offset, 50, None,
                            MAX_BYTES, **kwargs)
    return (items.count, items.data, *rest)


def test_a_read_of_the_logs_last_bytes_answers_as_a_threads_read(broker):
    broker.send_batch([Message("t", BODY + bytes([i])) for i in range(40)])
    broker.wait_indexed()
    for offset in (0, 13, 39, 40):
        assert read(broker, offset, resident=1 << 20) == read(broker, offset)


def test_a_read_of_older_records_is_refused_before_reading(broker):
    broker.send_batch([Message("t", BODY) for _ in range(40)])  # about 41 KB of log
    broker.wait_indexed()
    with pytest.raises(NotInMemory):
        read(broker, 0, resident=8 * 1024)  # the first records are 30 KB behind the end
    count, *_rest = read(broker, 35, resident=8 * 1024)  # the last five lie in the window
    assert count == 5


def test_with_the_index_behind_a_resident_read_never_blocks(broker):
    broker.send_batch([Message("t", BODY)])
    broker.wait_indexed()
    released = threading.Event()
    dispatch = broker._dispatcher._dispatch

    def held(target: int) -> None:  # the index applies nothing until released
        released.wait(30)
        dispatch(target)

    broker._dispatcher._dispatch = held
    broker.send(Message("t", b"acknowledged"))  # durable, not yet indexed
    t = time.monotonic()
    with pytest.raises(NotInMemory):  # no time to wait: a reader thread must wait for it
        read(broker, 1, resident=1 << 20, may_wait=False)
    count, *_rest = read(broker, 1, resident=1 << 20, may_wait=True)
    assert count == 0  # a long poll: its wait ends when the index applies the message
    assert time.monotonic() - t < 0.5  # neither waited (a reader thread's read waits 0.5 s)
    released.set()
    count, data, *_rest = read(broker, 1)  # a reader thread's read waits for the index
    assert count == 1 and b"acknowledged" in data


def test_a_pull_at_the_tail_runs_on_the_event_loop_and_an_old_one_in_a_thread(start_server):
    srv = start_server({"queues_per_topic": 1, "server": {"pull_on_loop_bytes": 16 * 1024}})
    with Producer(srv.address, retries=0, request_timeout=30) as p:
        for i in range(60):
            p.send("t", BODY + bytes([i]))
    with Client(srv.address, retries=0, request_timeout=30) as c:
        before = server_stats(srv.address)
        old = c.call(Op.PULL, {"topic": "t", "queue_id": 0, "offset": 0, "max_messages": 5,
                               "wait_ms": 0})
        after_old = server_stats(srv.address)
        tail = c.call(Op.PULL, {"topic": "t", "queue_id": 0, "offset": 58,
                                "max_messages": 5, "wait_ms": 0})
        after_tail = server_stats(srv.address)
    assert [m["body"] for m in old["messages"]] == [BODY + bytes([i]) for i in range(5)]
    assert [m["body"] for m in tail["messages"]] == [BODY + bytes([i]) for i in (58, 59)]
    assert after_old["pull_reads"] == before["pull_reads"] + 1
    assert after_old["pull_reads_on_loop"] == before["pull_reads_on_loop"]  # a thread's
    assert after_tail["pull_reads"] == after_old["pull_reads"] + 1
    assert after_tail["pull_reads_on_loop"] == after_old["pull_reads_on_loop"] + 1


def test_a_woken_long_poll_reads_on_the_loop_and_a_tagged_pull_never(start_server):
    srv = start_server({"queues_per_topic": 1})
    with Client(srv.address, retries=0, request_timeout=30) as c, \
            Producer(srv.address, retries=0, request_timeout=30) as p:
        waiting = c.submit(Op.PULL, {"topic": "t", "queue_id": 0, "offset": 0,
                                     "max_messages": 5, "wait_ms": 20_000})
        deadline = time.monotonic() + 20
        while server_stats(srv.address)["pulls_waiting"] != 1:
            assert time.monotonic() < deadline, "the pull never waited"
            time.sleep(0.02)
        p.send("t", b"wakes it", tags="a")
        assert [m["body"] for m in waiting.result(20)["messages"]] == [b"wakes it"]
        stats = server_stats(srv.address)
        # Both reads, before the wait and after the wake-up, ran on the loop.
        assert stats["pull_reads_on_loop"] == stats["pull_reads"] >= 2
        tagged = c.call(Op.PULL_TAGGED, {"topic": "t", "queue_id": 0, "offset": 0,
                                         "max_messages": 5, "wait_ms": 0, "tags": "a"})
        assert [m["body"] for m in tagged["messages"]] == [b"wakes it"]
        after = server_stats(srv.address)
    assert after["pull_reads"] == stats["pull_reads"] + 1
    assert after["pull_reads_on_loop"] == stats["pull_reads_on_loop"]


def test_pull_on_loop_bytes_zero_reads_every_pull_in_a_thread(start_server):
    srv = start_server({"queues_per_topic": 1, "server": {"pull_on_loop_bytes": 0}})
    with Producer(srv.address, retries=0, request_timeout=30) as p:
        p.send("t", b"one")
    with Client(srv.address, retries=0, request_timeout=30) as c:
        for _ in range(3):
            got = c.call(Op.PULL, {"topic": "t", "queue_id": 0, "offset": 0,
                                   "max_messages": 5, "wait_ms": 0})
            assert [m["body"] for m in got["messages"]] == [b"one"]
    stats = server_stats(srv.address)
    assert stats["pull_reads"] == 3 and stats["pull_reads_on_loop"] == 0


def test_a_negative_pull_on_loop_bytes_is_refused():
    from fmq.errors import ConfigError
    from fmq.server.config import ServerConfig
    with pytest.raises(ConfigError, match="pull_on_loop_bytes"):
        ServerConfig(pull_on_loop_bytes=-1)
