"""A consumer group's lag over its subscription (fmq.engine.group_lag), on a real broker:
every queue of a topic it committed in, the topics its live members name, deleted topics
left out."""

from __future__ import annotations

import pytest

import fmq
from fmq.errors import TopicHasLag

CFG = fmq.BrokerConfig(queues_per_topic=4, checkpoint_interval_ms=0)


@pytest.fixture
def broker(tmp_path):
    with fmq.Broker.open(str(tmp_path / "data"), CFG) as b:
        for qid in range(4):
            for i in range(qid + 1):  # 1, 2, 3 and 4 messages: 10 in all
                b.send(fmq.Message("t", f"m{i}".encode(), queue_id=qid))
        assert b.wait_indexed(60)  # the lag is read from the index
        yield b


def lag(rows: list[dict], group: str, topic: str = "t") -> dict[int, tuple[int | None, int]]:
    return {r["queue_id"]: (r["committed"], r["lag"]) for r in rows
            if r["group"] == group and r["topic"] == topic}


def test_one_commit_subscribes_the_group_to_every_queue_of_the_topic(broker):
    broker.offsets.commit("g", [("t", 2, 1)])
    assert lag(broker.inventory.groups(), "g") == {0: (None, 1), 1: (None, 2), 2: (1, 2),
                                                    3: (None, 4)}
    assert [r["queue_id"] for r in broker.inventory.groups("g")] == [0, 1, 2, 3]
    with pytest.raises(TopicHasLag, match="group g queue 3: 4 unread"):
        broker.topics.delete("t")


def test_a_live_members_topic_counts_before_any_commit(broker):
    assert lag(broker.inventory.groups(), "live") == {}
    rows = broker.inventory.groups(subscribed={"live": ["t", "not-yet"]})
    assert lag(rows, "live") == {0: (None, 1), 1: (None, 2), 2: (None, 3), 3: (None, 4)}
    assert lag(rows, "live", "not-yet") == {}  # a topic that does not exist has no queues
    broker.topics.delete("t")  # nobody else subscribes: nothing refuses it
    assert broker.inventory.groups(subscribed={"live": ["t"]}) == []


def test_a_live_subscriber_refuses_the_delete(broker):
    with pytest.raises(TopicHasLag, match="group live queue 0: 1 unread"):
        broker.topics.delete("t", subscribers=["live"])
    broker.topics.delete("t", force=True, subscribers=["live"])
    broker.offsets.commit("g", [("t", 0, 1)])  # offsets kept for a topic created again
    assert lag(broker.inventory.groups(), "g") == {}
    assert broker.inventory.queue_ranges() == []
