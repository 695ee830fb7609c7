"""The consumer groups' lag in a routed topic's queues across the broker groups of its route
(``fmq cluster status``, ``fmq topic remove-group``'s check).

Each broker group's primary knows only the offsets committed in its own queues. A consumer
group that committed in any queue of the topic, in any broker group, subscribes to the whole
topic: its lag covers every queue of every broker group of the route, and a queue it never
committed in counts from that queue's first retained offset (the rule of
:mod:`fmq.engine.group_lag`, here across groups). So the primaries of every group of the
route are read, not only the one whose queues are in question.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from fmq.topic_route import TopicRoute


class GroupsAnswer(NamedTuple):
    """What a broker group's primary answers GROUPS with: its consumer groups' rows
    ({"group", "topic", "queue_id", "committed", "next_offset", "lag", ...}) and each of
    its queues' (first retained, next) offsets."""

    rows: list[dict]
    queues: dict[tuple[str, int], tuple[int, int]]


def groups_answer(answer: Mapping[str, Any]) -> GroupsAnswer:
    """A GROUPS answer's JSON as :class:`GroupsAnswer` (an older server's has no "queues":
    its queue ranges are then known only from its rows)."""
    rows = [row for g in answer["groups"] for row in g["offsets"]]
    queues = {(q["topic"], q["queue_id"]): (q["min_offset"], q["next_offset"])
              for q in answer.get("queues", ())}
    return GroupsAnswer(rows, queues)


def subscribers(topic: str, answers: Mapping[str, GroupsAnswer]) -> set[str]:
    """Consumer groups with a row for ``topic`` in any broker group's answer."""
    return {r["group"] for a in answers.values() for r in a.rows if r["topic"] == topic}


def route_lag(route: TopicRoute, answers: Mapping[str, GroupsAnswer]) -> list[dict]:
    """Per queue of every broker group of ``route`` that answered and per consumer group
    subscribed to the topic: {"group" (the broker group), "topic", "queue_id",
    "global_index", "consumer_group", "committed" (None: never committed there),
    "next_offset", "lag"}, ordered by global index, then consumer group."""
    topic = route.topic
    consumers = subscribers(topic, answers)
    out = []
    for e in route.entries:
        answer = answers.get(e.group)
        if answer is None:
            continue
        ranges = {q: r for (t, q), r in answer.queues.items() if t == topic}
        known = {}
        for r in answer.rows:
            if r["topic"] == topic and 0 <= r["queue_id"] < e.queues:
                known[(r["group"], r["queue_id"])] = r
                ranges.setdefault(r["queue_id"], (r.get("min_offset", 0), r["next_offset"]))
        for qid in range(e.queues):
            lo, hi = ranges.get(qid, (0, 0))
            for consumer in sorted(consumers):
                r = known.get((consumer, qid))
                committed, lag = ((r["committed"], r["lag"]) if r is not None
                                  else (None, max(0, hi - lo)))
                out.append({"group": e.group, "topic": topic, "queue_id": qid,
                            "global_index": e.base + qid, "consumer_group": consumer,
                            "committed": committed,
                            "next_offset": r["next_offset"] if r is not None else hi,
                            "lag": lag})
    out.sort(key=lambda r: (r["global_index"], r["consumer_group"]))
    return out
