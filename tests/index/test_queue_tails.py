"""The followed queues' tails in memory (fmq.index.queue_tails): a pull at a queue's tail
reads no LMDB transaction, and whatever the tails answer is exactly what LMDB holds, through
retention, a cut log, floors, replays and gaps."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fmq
from fmq.errors import FMQError
from fmq.index.entries import QueueEntry
from fmq.index.queue_tails import KEEP
from fmq.index.store import IndexStore
from fmq.message import MAX_OFFSET, Message

QUEUES = 3

# One step of the index's life: a batch of n entries per queue (as the dispatcher applies
# them), the same batch applied again (recovery's redo), retention, a cut, a floor.
steps = st.lists(st.one_of(
    st.tuples(st.just("batch"), st.integers(0, 2 * KEEP + 40)),
    st.tuples(st.just("batch"), st.integers(QUEUES * KEEP - 10, QUEUES * (KEEP + 40))),
    st.tuples(st.just("replay"), st.integers(0, 5)),
    st.tuples(st.just("retention"), st.integers(0, 100)),
    st.tuples(st.just("cut"), st.integers(0, 100)),
    st.tuples(st.just("floor"), st.integers(0, 30)),
), min_size=1, max_size=25)


class Log:
    """Entries as a log places them: one log offset after another, one queue offset after
    another per queue."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.next_queue_offset = [0] * QUEUES
        self.batches: list[tuple[list[QueueEntry], int]] = []

    def batch(self, n: int) -> tuple[list[QueueEntry], int]:
        out = []
        for i in range(n):
            q = i % QUEUES
            out.append(QueueEntry("t", q, self.next_queue_offset[q], self.next_offset, 100,
                                  0, 1_000 + self.next_offset, None, self.next_offset))
            self.next_queue_offset[q] += 1
            self.next_offset += 100
        self.batches.append((out, self.next_offset))
        return out, self.next_offset

    def cut(self, fraction: int, store: IndexStore) -> None:
        end = self.next_offset * fraction // 100
        store.remove_from(end)
        # The log goes on from the cut: what follows it takes the queue offsets it freed.
        self.next_offset = end
        for q in range(QUEUES):
            self.next_queue_offset[q] = store.queue_read_stored("t", q, 0, 0)[1]


def follow_everywhere(store: IndexStore) -> int:
    """Read every queue at many starts, checking each answer the tails give against LMDB;
    how many the tails gave."""
    answered = 0
    for q in range(QUEUES + 1):  # and a queue with nothing in it
        lo, hi, _ = store.queue_read_stored("t", q, 0, 0)
        for start in {0, lo, max(lo, hi - 1), hi, hi + 1, max(0, hi - KEEP), (lo + hi) // 2}:
            for limit, max_bytes in ((32, None), (1, None), (4096, None), (32, 250)):
                found = store.tails.read("t", q, start, limit, max_bytes)
                want = store.queue_read_stored("t", q, start, limit, max_bytes)
                assert store.queue_read("t", q, start, limit, max_bytes) == want
                if found is not None:
                    assert found == want, (q, start, limit, max_bytes)
                    answered += 1
    return answered


@settings(max_examples=60, deadline=None)
@given(steps)
def test_what_a_tail_answers_is_what_lmdb_holds(plan):
    with tempfile.TemporaryDirectory() as tmp:
        store = IndexStore(tmp)
        log = Log()
        follow_everywhere(store)  # every queue followed from the start
        for op, n in plan:
            if op == "batch":
                store.apply(*log.batch(n))
            elif op == "replay" and log.batches:
                store.apply(*log.batches[-1 - min(n, len(log.batches) - 1)])
            elif op == "retention":
                store.remove_before(log.next_offset * n // 100)
            elif op == "cut":
                log.cut(n, store)
            elif op == "floor":
                store.apply_floors({("t", 1): n})
                log.next_queue_offset[1] = max(log.next_queue_offset[1], n)
            follow_everywhere(store)
        store.close()


def test_a_queue_followed_is_read_from_its_tail_after_each_batch(tmp_path):
    # Not vacuous: a follower at the tail of a queue written to is answered from memory,
    # and after retention from LMDB until the next batch.
    store = IndexStore(str(tmp_path))
    log = Log()
    assert store.tails.read("t", 0, 0, 32) is None  # not followed yet: now it is
    for _ in range(5):
        store.apply(*log.batch(30))
        assert follow_everywhere(store) > 0
    hi = store.queue_read_stored("t", 0, 0, 0)[1]
    assert store.tails.read("t", 0, hi - 3, 32)[2] == store.queue_read_stored(
        "t", 0, hi - 3, 32)[2] != []
    store.remove_before(log.next_offset // 2)
    assert store.tails.read("t", 0, hi - 3, 32) is None
    store.apply(*log.batch(30))
    lo, hi2, got = store.tails.read("t", 0, hi, 32)
    assert (lo, hi2, got) == store.queue_read_stored("t", 0, hi, 32) and lo > 0
    store.close()


def test_a_batch_of_more_than_a_tail_keeps_for_one_queue_continues_it(tmp_path):
    # A batch bringing a followed queue more entries than a tail keeps (an index behind
    # under load indexes long runs at once): the tail cut more than it held and put its
    # start past its first entry, by the difference, so a follower pulling at the tail was
    # answered with older entries (row 6's "messages out of order or missing").
    store = IndexStore(str(tmp_path))
    log = Log()
    assert store.tails.read("t", 0, 0, 32) is None  # followed from now on
    store.apply(*log.batch(QUEUES * 10))
    for per_queue in (KEEP + 255, 2 * KEEP + 1, 1, KEEP, 3 * KEEP):
        store.apply(*log.batch(QUEUES * per_queue))
        lo, hi, _ = store.queue_read_stored("t", 0, 0, 0)
        for start in (hi - 1, hi - 200, hi - KEEP):
            found = store.tails.read("t", 0, start, 256)
            assert found == store.queue_read_stored("t", 0, start, 256), (per_queue, start)
        assert store.tails.read("t", 0, hi - 1, 1)[2][0][0] == hi - 1
    store.close()


def test_a_following_pull_at_the_tail_begins_no_index_transaction(tmp_path):
    # Issue 41 item 4: the queue range from memory. Before, every pull began an LMDB read
    # transaction (a resize-gate round, a begin, a get, a cursor).
    broker = fmq.Broker.open(os.path.join(tmp_path, "d"), fmq.BrokerConfig(queues_per_topic=1))
    try:
        for _ in range(8):
            broker.send(Message("t", b"x" * 100, queue_id=0))
        assert broker.wait_indexed()
        assert len(broker.reads.pull("t", 0, 0, 32)) == 8  # the consumer catches up
        for _ in range(8):
            broker.send(Message("t", b"y" * 100, queue_id=0))
        assert broker.wait_indexed()
        index = broker.reads._index
        env = index.env
        begun: list[dict] = []

        class Counting:
            def begin(self, **kwargs):
                begun.append(kwargs)
                return env.begin(**kwargs)

            def __getattr__(self, name):
                return getattr(env, name)

        index.env = Counting()
        try:
            answer = broker.reads.pull_answer("t", 0, 8, 32)
        finally:
            index.env = env
        assert [m.body for m in answer.messages] == [b"y" * 100] * 8
        assert (answer.min_offset, answer.next_offset) == (0, 16)
        assert begun == []
    finally:
        broker.close()


def test_a_pull_past_a_tail_is_known_empty_and_checked_as_a_read(tmp_path):
    # Reader.nothing_from: a consumer that caught up waits without reading the queue; the
    # checks a read would fail now fail alike; anything else reads.
    broker = fmq.Broker.open(os.path.join(tmp_path, "d"), fmq.BrokerConfig(queues_per_topic=2))
    reads = broker.reads
    assert reads.nothing_from("t", 0, 0) is None  # never read: no tail
    assert reads.pull("t", 0, 0, 32) == []  # followed from now on
    assert reads.nothing_from("t", 0, 0) is None  # followed, not yet written to
    for _ in range(3):
        broker.send(Message("t", b"x", queue_id=0))
    assert broker.wait_indexed()
    assert [reads.nothing_from("t", 0, at) for at in (0, 2, 3, 7)] == [None, None, 3, 7]
    assert reads.nothing_from("t", 0, MAX_OFFSET + 1) is None  # the read's error
    assert reads.nothing_from("t", 1, 0) is None  # another queue, not followed
    reads._index.tails.drop_all()  # as an index write other than a batch's does
    assert reads.nothing_from("t", 0, 3) is None
    broker.send(Message("t", b"y", queue_id=0))
    assert broker.wait_indexed() and reads.nothing_from("t", 0, 4) == 4
    broker.close()
    with pytest.raises(FMQError):
        reads.nothing_from("t", 0, 4)  # closed: as a read
    with pytest.raises(FMQError):
        reads.pull("t", 0, 4)


def test_no_tail_is_kept_where_another_process_writes_the_index(tmp_path):
    # index_writer "process": the child writes LMDB; a tail of the broker's own writes (its
    # catch-up when it closes) would fall behind, and a follower at its end would read
    # nothing new. Every pull reads LMDB there.
    cfg = fmq.BrokerConfig(queues_per_topic=1, index_writer="process")
    broker = fmq.Broker.open(os.path.join(tmp_path, "d"), cfg)
    try:
        index = broker.reads._index
        for round_ in range(3):
            for _ in range(4):
                broker.send(Message("t", b"z" * 10, queue_id=0))
            assert broker.wait_indexed()
            got = broker.reads.pull("t", 0, round_ * 4, 32)
            assert [m.queue_offset for m in got] == list(range(round_ * 4, round_ * 4 + 4))
            assert index.tails.read("t", 0, round_ * 4, 32) is None
        index.tails.extend([QueueEntry("t", 0, 12, 0, 1, 0, 0, None, 0)], {("t", 0): (0, 13)})
        assert index.tails.read("t", 0, 12, 32) is None
    finally:
        broker.close()
