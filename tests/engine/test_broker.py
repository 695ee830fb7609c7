"""The embedded API: sending, pulling, queues, keys, time, consumer offsets, bad input."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import fmq
from fmq import InvalidArgument, Message, MessageTooLarge, UnknownQueue
from fmq.errors import OffsetOutOfRange
from tests.crashkit import ROOT
from tests.workloads.lock_contender import REFUSED


def test_send_and_pull_round_trip(broker):
    r = broker.send(Message("orders", b"hello", key="o-1", tags="new", properties={"a": "1"}))
    assert broker.wait_indexed()
    [m] = broker.reads.pull("orders", r.queue_id, r.queue_offset)
    assert (m.topic, m.queue_id, m.queue_offset, m.offset) == ("orders", r.queue_id,
                                                                 r.queue_offset, r.offset)
    assert (m.body, m.key, m.tags, m.properties) == (b"hello", "o-1", "new", {"a": "1"})
    assert abs(m.store_time - time.time() * 1000) < 60_000


def test_same_key_same_queue_and_round_robin_without_key(broker):
    qids = {broker.send(Message("t", b"x", key="customer-7")).queue_id for _ in range(10)}
    assert len(qids) == 1
    rr = [broker.send(Message("u", b"x")).queue_id for _ in range(8)]
    assert rr == [0, 1, 2, 3, 0, 1, 2, 3]
    assert broker.send(Message("u", b"x", queue_id=2)).queue_id == 2


def test_queue_offsets_are_dense_and_in_log_order_under_concurrency(broker):
    results = []
    lock = threading.Lock()

    def sender(n):
        for i in range(50):
            r = broker.send(Message("c", f"{n}-{i}".encode(), queue_id=i % 2))
            with lock:
                results.append(r)

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    broker.wait_indexed()
    for qid in (0, 1):
        mine = sorted((r for r in results if r.queue_id == qid), key=lambda r: r.offset)
        assert [r.queue_offset for r in mine] == list(range(len(mine)))  # log order = queue order
        assert broker.reads.queue_range("c", qid) == (0, len(mine))
        pulled = broker.reads.all_messages(["c"])[("c", qid)]
        assert [m.offset for m in pulled] == [r.offset for r in mine]


def test_pull_pages_through_a_queue(broker):
    for i in range(100):
        broker.send(Message("p", str(i).encode(), queue_id=1))
    broker.wait_indexed()
    got, off = [], 0
    while True:
        batch = broker.reads.pull("p", 1, off, max_messages=7)
        if not batch:
            break
        got += [int(m.body) for m in batch]
        off = batch[-1].queue_offset + 1
    assert got == list(range(100))
    assert broker.reads.pull("p", 1, 1000) == []


def test_messages_by_key_and_offset_for_time(broker):
    broker.send(Message("k", b"a", key="x"))
    t_mid = int(time.time() * 1000) + 5
    time.sleep(0.02)
    later = broker.send(Message("k", b"b", key="x"))
    broker.send(Message("k", b"c", key="y"))
    broker.wait_indexed()
    assert [m.body for m in broker.reads.messages_by_key("k", "x")] == [b"a", b"b"]
    assert broker.reads.messages_by_key("k", "nope") == []
    assert broker.reads.offset_for_time("k", later.queue_id, t_mid) == later.queue_offset
    assert broker.reads.offset_for_time("k", later.queue_id, 0) == 0
    assert broker.reads.offset_for_time("k", later.queue_id, 2**62) == broker.reads.queue_range(
        "k", later.queue_id)[1]


def fill_queue(broker, topic: str, queue_id: int, count: int) -> None:
    """``count`` messages in one queue: offsets up to ``count`` can then be committed."""
    broker.send_batch([Message(topic, b"x", queue_id=queue_id) for _ in range(count)])


def test_consumer_offsets(broker):
    fill_queue(broker, "t", 0, 42)
    fill_queue(broker, "t", 1, 7)
    assert broker.reads.committed_offset("g", "t", 0) is None
    broker.offsets.commit("g", [("t", 0, 42)])
    broker.offsets.commit("g", [("t", 1, 7)])
    assert broker.reads.committed_offset("g", "t", 0) == 42
    assert broker.reads.committed_offset("other", "t", 0) is None


def test_consumer_offsets_survive_reopen(tmp_path, small_config):
    with fmq.Broker.open(str(tmp_path), small_config) as b:
        fill_queue(b, "t", 3, 99)
        b.offsets.commit("g", [("t", 3, 99)])
    with fmq.Broker.open(str(tmp_path), small_config) as b:
        assert b.reads.committed_offset("g", "t", 3) == 99


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda b: b.send(Message("", b"x")), InvalidArgument),
        (lambda b: b.send(Message("bad topic!", b"x")), InvalidArgument),
        (lambda b: b.send(Message("t", "text not bytes")), InvalidArgument),
        (lambda b: b.send(Message("t", b"x" * 5000)), MessageTooLarge),
        (lambda b: b.send(Message("t", b"x", queue_id=4)), UnknownQueue),
        (lambda b: b.send(Message("t", b"x", queue_id=-1)), UnknownQueue),
        (lambda b: b.send(Message("t", b"x", key="a\x00b")), InvalidArgument),
        (lambda b: b.send(Message("t", b"x", properties={"a": 1})), InvalidArgument),
        (lambda b: b.send("not a message"), InvalidArgument),
        (lambda b: b.reads.pull("t", 0, -1), InvalidArgument),
        (lambda b: b.reads.pull("t", 9, 0), UnknownQueue),
        (lambda b: b.reads.pull("t", 0, 0, max_messages=0), InvalidArgument),
        (lambda b: b.offsets.commit("g", [("t", 0, -5)]), InvalidArgument),
        (lambda b: b.offsets.commit("", [("t", 0, 5)]), InvalidArgument),
        (lambda b: b.offsets.commit("g", [("t", 0, 1)]), OffsetOutOfRange),  # past the queue end
        (lambda b: b.offsets.commit("g", [("t", 0, 2**63)]), InvalidArgument),
        (lambda b: b.offsets.commit("g\n", [("t", 0, 0)]), InvalidArgument),
        (lambda b: b.send(Message("t\n", b"x")), InvalidArgument),
        (lambda b: b.send(Message("%RETRY%g", b"x")), InvalidArgument),  # internal topic
        (lambda b: b.send(Message("t", b"x", queue_id=-2)), UnknownQueue),
        (lambda b: b.reads.pull("t", 0, 2**63), InvalidArgument),
        (lambda b: b.transactions.prepare([Message("t", b"x")], "shop\r\nforged"), InvalidArgument),
        (lambda b: b.transactions.prepare([Message("t", b"x")], "shop", tx_id="a\x1bb"),
         InvalidArgument),
        (lambda b: b.transactions.commit(""), InvalidArgument),
        (lambda b: b.transactions.rollback(""), InvalidArgument),
        (lambda b: b.transactions.answer_uncertain("", fmq.TxState.COMMIT), InvalidArgument),
        (lambda b: b.transactions.answer_uncertain("x", "maybe"), InvalidArgument),
        (lambda b: b.transactions.poll_uncertain("shop", max_items=0), InvalidArgument),
        (lambda b: b.reads.offset_for_time("t", 0, -1), InvalidArgument),
    ],
)
def test_bad_input_is_a_typed_error_and_writes_nothing(broker, call, error):
    before = broker.stats()["log_end"]
    with pytest.raises(error) as info:
        call(broker)
    assert isinstance(info.value, fmq.FMQError) and str(info.value)
    assert broker.stats()["log_end"] == before


def test_a_batch_with_one_bad_message_writes_none(broker):
    before = broker.stats()["log_end"]
    with pytest.raises(MessageTooLarge):
        broker.send_batch([Message("t", b"ok"), Message("t", b"x" * 5000)])
    assert broker.stats()["log_end"] == before


def test_closed_broker_refuses(tmp_path, small_config):
    b = fmq.Broker.open(str(tmp_path), small_config)
    b.close()
    b.close()  # idempotent
    with pytest.raises(fmq.BrokerClosed):
        b.send(Message("t", b"x"))


def test_second_process_is_refused(tmp_path, small_config):
    with fmq.Broker.open(str(tmp_path), small_config):
        proc = subprocess.run(
            [sys.executable, "-m", "tests.workloads.lock_contender", str(tmp_path)],
            capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert proc.returncode == REFUSED, proc.stderr
        assert "in use by another FMQ process" in proc.stdout
    # released on close
    fmq.Broker.open(str(tmp_path), small_config).close()


def test_stats_report_progress(broker):
    broker.send(Message("t", b"x"))
    broker.wait_indexed()
    s = broker.stats()
    assert s["flushed_offset"] == s["log_end"] == s["applied_offset"] > 0
    assert s["index_lag"] == 0 and s["segments"] == 1


def test_config_is_validated():
    with pytest.raises(fmq.ConfigError, match="segment"):
        fmq.BrokerConfig(segment_size=8192, max_message_size=8192)
    with pytest.raises(fmq.ConfigError, match="flush_mode"):
        fmq.BrokerConfig(flush_mode="sometimes")


def test_async_flush_mode_acks_and_flushes_in_background(tmp_path):
    cfg = fmq.BrokerConfig(segment_size=1 << 20, max_message_size=4096, flush_mode="async",
                           flush_interval_ms=20,
                           checkpoint_interval_ms=0, retention_interval_ms=0)
    with fmq.Broker.open(str(tmp_path), cfg) as b:
        r = b.send(Message("t", b"x"))
        deadline = time.monotonic() + 10
        while b.stats()["flushed_offset"] <= r.offset and time.monotonic() < deadline:
            time.sleep(0.01)
        assert b.stats()["flushed_offset"] > r.offset
        assert b.wait_indexed()
        assert b.reads.pull("t", r.queue_id, 0)[0].body == b"x"


def test_config_from_json_file(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"segment_size": 1048576, "max_message_size": 4096, "queues_per_topic": 8}')
    assert fmq.BrokerConfig.from_json_file(str(good)).queues_per_topic == 8
    typo = tmp_path / "typo.json"
    typo.write_text('{"segment_sise": 1048576}')
    with pytest.raises(fmq.ConfigError, match="unknown keys segment_sise"):
        fmq.BrokerConfig.from_json_file(str(typo))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(fmq.ConfigError, match="cannot read config file"):
        fmq.BrokerConfig.from_json_file(str(broken))
    with pytest.raises(fmq.ConfigError, match="must hold a JSON object"):
        typo.write_text("[1, 2]")
        fmq.BrokerConfig.from_json_file(str(typo))


def test_a_failing_checkpoint_is_a_typed_error_and_keeps_the_old_one(tmp_path, small_config):
    import errno

    from fmq.datadir import CHECKPOINT_FILE
    from fmq.log.fileio import FileIO
    from fmq.recovery.checkpoint import read_checkpoint

    class NoSpaceForRenames(FileIO):
        fail = False

        def rename(self, src, dst):
            if self.fail:
                raise OSError(errno.ENOSPC, "No space left on device")
            super().rename(src, dst)

    io = NoSpaceForRenames()
    with fmq.Broker.open(str(tmp_path), small_config, io=io) as b:
        b.send(Message("t", b"x"))
        first = b.checkpoint()
        b.send(Message("t", b"y"))
        io.fail = True
        with pytest.raises(fmq.StorageError, match="previous one stays valid"):
            b.checkpoint()
        assert read_checkpoint(str(tmp_path / CHECKPOINT_FILE)) == first
        io.fail = False


def test_an_untagged_pull_reads_the_index_in_one_transaction(broker):
    # The range and the entries of a pull come from one read transaction of the index
    # (two before: each a resize-gate lock round and a begin); the answer is the same.
    for i in range(6):
        broker.send(Message("one-read", f"m{i}".encode(), queue_id=1))
    assert broker.wait_indexed()
    index = broker._index
    env = index.env
    begun = []

    class Counting:
        def begin(self, **kwargs):
            begun.append(kwargs)
            return env.begin(**kwargs)

        def __getattr__(self, name):
            return getattr(env, name)

    index.env = Counting()
    try:
        answer = broker.reads.pull_answer("one-read", 1, 2, 3)
    finally:
        index.env = env
    assert [m.body for m in answer.messages] == [b"m2", b"m3", b"m4"]
    assert (answer.min_offset, answer.next_offset, answer.resume_offset) == (0, 6, 5)
    assert len(begun) == 1
