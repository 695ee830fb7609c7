"""Issue 14, item 3: the queue count of a topic comes from its stored data, so a lower
``queues_per_topic`` never hides stored messages."""

from __future__ import annotations

import os
import shutil

import pytest

import fmq
from fmq.datadir import INDEX_DIR
from fmq.errors import UnknownQueue


def _bodies(broker: fmq.Broker, topic: str) -> list[bytes]:
    return sorted(m.body for msgs in broker.reads.all_messages([topic]).values() for m in msgs)


def test_reopening_with_fewer_queues_keeps_every_message_reachable(tmp_path, small_config):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, small_config.replace(queues_per_topic=4)) as b:
        for i in range(4):
            assert b.send(fmq.Message("orders", f"m{i}".encode())).queue_id == i
    with fmq.Broker.open(path, small_config.replace(queues_per_topic=2)) as b:
        b.wait_indexed()
        assert _bodies(b, "orders") == [b"m0", b"m1", b"m2", b"m3"]
        assert [m.body for m in b.reads.pull("orders", 3, 0)] == [b"m3"]
        assert b.topics.queue_count("orders") == 4
        # the existing topic keeps spreading over its 4 queues; a new topic gets 2
        assert {b.send(fmq.Message("orders", b"x")).queue_id for _ in range(4)} == {0, 1, 2, 3}
        assert b.topics.queue_count("fresh") == 2
        assert {b.send(fmq.Message("fresh", b"y")).queue_id for _ in range(4)} == {0, 1}
        with pytest.raises(UnknownQueue):
            b.send(fmq.Message("fresh", b"z", queue_id=2))


def test_queue_count_survives_deleting_the_index(tmp_path, small_config):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, small_config.replace(queues_per_topic=4)) as b:
        for i in range(4):
            b.send(fmq.Message("orders", f"m{i}".encode()))
    shutil.rmtree(os.path.join(path, INDEX_DIR))
    with fmq.Broker.open(path, small_config.replace(queues_per_topic=1)) as b:
        b.wait_indexed()
        assert _bodies(b, "orders") == [b"m0", b"m1", b"m2", b"m3"]
        assert b.topics.queue_count("orders") == 4


def test_open_transaction_keeps_its_queue_after_the_count_is_lowered(tmp_path, small_config):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, small_config.replace(queues_per_topic=4)) as b:
        tx = b.transactions.prepare([fmq.Message("pay", b"late", queue_id=3)], "producers")
    with fmq.Broker.open(path, small_config.replace(queues_per_topic=2)) as b:
        assert b.transactions.commit(tx) == fmq.TxState.COMMIT
        b.wait_indexed()
        assert [m.body for m in b.reads.pull("pay", 3, 0)] == [b"late"]
        assert b.topics.queue_count("pay") == 4
