"""A consumer group's lag: every queue of every topic the group subscribes to, read from the
index (``fmq groups``, the lag metrics, ``fmq topic delete``'s check, remove-group's).

A group subscribes to a topic when it committed an offset in any queue of it, or when a live
member names it (``subscribed``, the server's membership). Its lag covers every queue of
such a topic, committed in or not: a queue it never committed in counts from the queue's
first retained offset, as a consumer starting there would read it (Kafka's tooling lists
every partition of a group's topics the same way). Counting only the queues a group happens
to have committed in hid the rest: a topic could be deleted with most of it unread.

Deleted topics are left out: nothing of them can be read any more, and a group's committed
offsets there only wait for the topic to be created again (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from fmq.index.store import IndexStore
from fmq.message import is_internal_topic
from fmq.topic_config import TopicConfig


def topic_states(index: IndexStore) -> dict[str, bool]:
    """Per topic with a TOPIC record, whether its latest one deletes it (from the index:
    the same on a follower as on its primary)."""
    return {name: TopicConfig.from_json(text).deleted
            for name, text in index.topic_configs().items() if text}


def subscriptions(committed: Iterable[tuple[str, str, int]],
                  subscribed: Mapping[str, Iterable[str]] | None = None) -> dict[str, set[str]]:
    """Per consumer group, the topics it subscribes to: those it committed in (keys of the
    index's committed offsets, (group, topic, queue id)) and those ``subscribed`` names."""
    topics: dict[str, set[str]] = {}
    for group, topic, _qid in committed:
        topics.setdefault(group, set()).add(topic)
    for group, names in (subscribed or {}).items():
        topics.setdefault(group, set()).update(names)
    return topics


def group_lag_rows(index: IndexStore, now_ms: int, queue_count: Callable[[str], int],
                   group: str | None = None,
                   subscribed: Mapping[str, Iterable[str]] | None = None) -> list[dict]:
    """Per group (only ``group`` when given), topic and queue of its subscription: the
    committed offset (None: never committed there), the queue's first retained and next
    offsets, the lag in messages and in milliseconds (now minus the store time of the first
    message not consumed; 0 when none is waiting). ``queue_count``: a topic's queues."""
    committed = index.consumer_offsets()
    ranges = index.all_queues()
    states = topic_states(index)
    deleted = {name for name, gone in states.items() if gone}
    stored: dict[str, set[int]] = {}
    for topic, qid in ranges:
        stored.setdefault(topic, set()).add(qid)
    created = {name for name, gone in states.items() if not gone}
    own: dict[tuple[str, str], set[int]] = {}  # (group, topic) -> queues committed in
    for cg, t, q in committed:
        own.setdefault((cg, t), set()).add(q)
    rows = []
    for g, topics in sorted(subscriptions(committed, subscribed).items()):
        if group is not None and g != group:
            continue
        for topic in sorted(topics - deleted):
            mine = own.get((g, topic), set())
            if topic not in stored and topic not in created and not mine:
                continue  # a live member names a topic that does not exist (yet)
            qids = stored.get(topic, set()) | mine
            if not is_internal_topic(topic):  # a retry or DLQ topic uses only its queue 0
                qids |= set(range(queue_count(topic)))
            for qid in sorted(qids):
                rows.append(_row(index, now_ms, g, topic, qid, ranges.get((topic, qid), (0, 0)),
                                 committed.get((g, topic, qid))))
    return rows


def _row(index: IndexStore, now_ms: int, group: str, topic: str, qid: int,
         queue_range: tuple[int, int], committed: int | None) -> dict:
    lo, hi = queue_range
    pos = lo if committed is None else max(committed, lo)
    lag = max(0, hi - pos)
    waiting = index.store_time(topic, qid, pos) if lag else None
    return {"group": group, "topic": topic, "queue_id": qid, "committed": committed,
            "min_offset": lo, "next_offset": hi, "lag": lag,
            "lag_ms": max(0, now_ms - waiting) if waiting is not None else 0}


def queue_ranges(index: IndexStore) -> list[dict]:
    """Every stored queue of every topic not deleted: its first retained and next offsets
    (what a group that subscribes to the topic elsewhere has left to read here)."""
    gone = {name for name, deleted in topic_states(index).items() if deleted}
    return [{"topic": topic, "queue_id": qid, "min_offset": lo, "next_offset": hi}
            for (topic, qid), (lo, hi) in sorted(index.all_queues().items())
            if topic not in gone and not is_internal_topic(topic)]
