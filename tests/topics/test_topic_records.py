"""Topic settings are TOPIC records: the index derives them (and a delete's floors), and
recovery, ``fmq index rebuild`` and a deleted index give the same table; queues only grow;
a topic's own retention is a queue floor; logs without TOPIC records keep the defaults."""

from __future__ import annotations

import shutil
import time

import pytest

import fmq
from fmq.admin.rebuild_index import rebuild_index
from fmq.datadir import INDEX_DIR, LOG_DIR
from fmq.errors import InvalidArgument, MessageTooLarge, TopicExists, TopicHasLag, UnknownTopic
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner
from fmq.topic_config import TopicConfig


def config(**kw) -> fmq.BrokerConfig:
    base = dict(segment_size=1 << 20, max_message_size=64 * 1024, checkpoint_interval_ms=0,
                retention_interval_ms=0)
    return fmq.BrokerConfig(**{**base, **kw})


def bodies(b: fmq.Broker, topic: str) -> list[bytes]:
    return sorted(m.body for q in range(b.topics.queue_count(topic))
                  for m in b.reads.pull(topic, q, 0, 1000))


def topic_records(path: str) -> list:
    return [r for r in LogScanner(f"{path}/{LOG_DIR}") if r.type == RecordType.TOPIC]


def test_settings_survive_a_restart_a_deleted_index_and_fmq_index_rebuild(tmp_path):
    path = str(tmp_path)
    with fmq.Broker.open(path, config()) as b:
        b.topics.create("orders", queues=8, retention_ms=3_600_000, max_message_size=100)
        b.topics.alter("orders", queues=12)
        for i in range(30):
            b.send(fmq.Message("orders", b"m%d" % i, key=f"k{i % 3}"))
        b.send(fmq.Message("gone", b"old"))
        b.topics.create("gone2")
        b.send(fmq.Message("gone2", b"x", key="a"))
        b.wait_indexed()
        b.topics.delete("gone2")
        live = b._index.dump()
        listing = b.topics.list()
    assert live["topics"]  # the table is in the index
    with fmq.Broker.open(path, config()) as b:  # restart
        assert b.topics.list() == listing and b.topics.queue_count("orders") == 12
        assert b._index.dump() == live
    shutil.rmtree(f"{path}/{INDEX_DIR}")  # recovery's redo from the whole log
    with fmq.Broker.open(path, config()) as b:
        assert b.recovery.index_rebuilt and b._index.dump() == live
        assert b.topics.list() == listing
    rebuild_index(path, config())
    with fmq.Broker.open(path, config()) as b:
        assert b._index.dump() == live
        assert bodies(b, "gone2") == [] and b.reads.messages_by_key("gone2", "a") == []
        assert len(bodies(b, "orders")) == 30
        with pytest.raises(MessageTooLarge, match="limit of topic 'orders'.*100"):
            b.send(fmq.Message("orders", b"x" * 101))


def test_each_change_is_one_record_with_the_whole_configuration(tmp_path):
    path = str(tmp_path)
    with fmq.Broker.open(path, config()) as b:
        b.topics.create("orders", queues=2, retention_bytes=4096)
        b.topics.alter("orders", max_message_size=64)
    records = topic_records(path)
    assert [r.topic for r in records] == ["orders", "orders"]
    last = TopicConfig.from_json(records[-1].properties["config"])
    assert (last.queues, last.retention_bytes, last.max_message_size) == (2, 4096, 64)


def test_queues_only_grow_and_old_data_stays_readable(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=2)) as b:
        b.send(fmq.Message("t", b"q1", queue_id=1))  # made by a first send: 2 queues
        with pytest.raises(TopicExists):
            b.topics.create("t", queues=8)
        with pytest.raises(InvalidArgument, match="queues only grow"):
            b.topics.alter("t", queues=1)
        b.topics.alter("t", queues=6)
        assert b.topics.queue_count("t") == 6
        b.send(fmq.Message("t", b"q5", queue_id=5))
        b.wait_indexed()
        assert bodies(b, "t") == [b"q1", b"q5"]
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        assert b.topics.queue_count("t") == 6 and bodies(b, "t") == [b"q1", b"q5"]


def test_a_log_without_topic_records_keeps_the_defaults(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=3)) as b:
        b.send(fmq.Message("plain", b"x"))
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=3)) as b:
        assert b._index.topic_configs() == {}
        assert b.topics.list() == [{"name": "plain", "queues": 3, "retention_ms": None,
                                    "retention_bytes": None, "max_message_size": None,
                                    "state": "created", "floors": [], "auto_created": True}]


def test_delete_refused_with_lag_then_forced_and_created_again_continues(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        b.topics.create("orders")
        for i in range(5):
            b.send(fmq.Message("orders", b"m%d" % i))
        b.offsets.commit("billing", [("orders", 0, 2)])
        with pytest.raises(TopicHasLag, match="group billing queue 0: 3 unread"):
            b.topics.delete("orders")
        b.topics.delete("orders", force=True)
        assert bodies(b, "orders") == [] and b.reads.queue_range("orders", 0) == (5, 5)
        with pytest.raises(UnknownTopic, match="fmq topic create orders"):
            b.send(fmq.Message("orders", b"late"))
        with pytest.raises(UnknownTopic):
            b.topics.describe("orders")
        b.topics.create("orders")
        r = b.send(fmq.Message("orders", b"new"))
        b.wait_indexed()
        assert r.queue_offset == 5  # offsets continue: none is handed out twice
        assert [m.body for m in b.reads.pull("orders", 0, 2)] == [b"new"]  # the group skips ahead


def test_auto_create_off_refuses_unknown_topics_but_not_the_brokers_own(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(auto_create_topics=False)) as b:
        with pytest.raises(UnknownTopic, match="fmq topic create nowhere"):
            b.send(fmq.Message("nowhere", b"x"))
        with pytest.raises(UnknownTopic):
            b.transactions.prepare([fmq.Message("nowhere", b"x")], "pg")
        with pytest.raises(UnknownTopic):
            b.deliveries.schedule([fmq.Message("nowhere", b"x")], int(time.time() * 1000) + 60_000)
        b.topics.create("somewhere")
        b.send(fmq.Message("somewhere", b"x"))
        b._timers.schedule_internal([fmq.Message("%RETRY%g", b"r")], 0)


def test_topic_retention_by_time_makes_old_messages_unreadable(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        b.topics.create("short", retention_ms=60_000)
        b.send(fmq.Message("short", b"old"))
        b.send(fmq.Message("keep", b"other topic"))
        b.wait_indexed()
        b.enforce_retention(time.time() + 30)  # younger than a minute: kept
        assert bodies(b, "short") == [b"old"]
        b.enforce_retention(time.time() + 120)
        assert bodies(b, "short") == [] and b.reads.queue_range("short", 0) == (1, 1)
        assert bodies(b, "keep") == [b"other topic"]
        b.send(fmq.Message("short", b"new"))
        b.wait_indexed()
        assert bodies(b, "short") == [b"new"]


def test_topic_retention_by_bytes_keeps_the_newest_of_each_queue(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        b.topics.create("capped", retention_bytes=1000)
        for i in range(20):
            b.send(fmq.Message("capped", bytes([65 + i]) * 100))
        b.wait_indexed()
        b.enforce_retention()
        kept = bodies(b, "capped")
        lo, hi = b.reads.queue_range("capped", 0)
        assert hi == 20 and 1 <= len(kept) < 20 and len(kept) == hi - lo
        # what is kept is the newest, and its stored records fit the limit
        assert kept[-1] == bytes([65 + 19]) * 100
        assert sum(s for _q, _d, s, _t, _st in b._index.queue_entries("capped", 0, lo, 100)) <= 1000
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        assert b.reads.queue_range("capped", 0) == (lo, hi)


def test_a_rebuilt_index_hides_what_topic_retention_hid_before_serving(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        b.topics.create("capped", retention_bytes=300)
        for i in range(10):
            b.send(fmq.Message("capped", b"%03d" % i * 30))
        b.wait_indexed()
        b.enforce_retention()
        hidden = b.reads.queue_range("capped", 0)
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        assert b.reads.queue_range("capped", 0) == hidden


def test_settings_the_broker_cannot_honour_are_refused(tmp_path):
    cfg = config(retention_ms=3_600_000, retention_bytes=1 << 30, max_message_size=1000)
    with fmq.Broker.open(str(tmp_path), cfg) as b:
        with pytest.raises(InvalidArgument, match="longer than the broker's retention_ms"):
            b.topics.create("t", retention_ms=7_200_000)
        with pytest.raises(InvalidArgument, match="more than the broker's retention_bytes"):
            b.topics.create("t", retention_bytes=2 << 30)
        with pytest.raises(InvalidArgument, match="over the broker's max_message_size"):
            b.topics.create("t", max_message_size=2000)
        with pytest.raises(InvalidArgument, match="1..65535 queues"):
            b.topics.create("t", queues=0)
        with pytest.raises(InvalidArgument, match="FMQ's own"):
            b.topics.create("%RETRY%x")
        assert b.topics.list() == []


def test_a_topic_created_again_hides_what_reached_it_while_deleted(tmp_path):
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        b.topics.create("orders")
        b.send(fmq.Message("orders", b"before"))
        tx = b.transactions.prepare([fmq.Message("orders", b"in flight")], "shop")
        b.topics.delete("orders")
        b.transactions.commit(tx, "shop")  # prepared before the delete: its message still lands
        b.topics.create("orders")
        b.send(fmq.Message("orders", b"after"))
        b.wait_indexed()
        assert bodies(b, "orders") == [b"after"]
        live = b._index.dump()
    rebuild_index(str(tmp_path), config(queues_per_topic=1))
    with fmq.Broker.open(str(tmp_path), config(queues_per_topic=1)) as b:
        assert bodies(b, "orders") == [b"after"] and b._index.dump() == live
