"""Who holds each queue of a consumer group: a queue moves to the member the assignment rule
names (its *target*) only once the member holding it released it, so two members are never
given one queue at once (docs/cluster.md, "One reader per queue").

A member holds the queues in ``GroupMember.held``. When a rebalance names another target
for a held queue, the holder keeps it but is told to drop it: the queue enters its
``releasing`` with the generation of that rebalance, and from then on every answer to the
holder leaves it out. The holder releases it when it says it applied an answer of that
generation or later (so it stopped pulling the queue and committed what it delivered), when
it leaves, when its session expires or its connection closes; only then does the target get
the queue, in a new generation. A queue's holder lives here, on the primary of the broker
group hosting the queue, so exclusivity never depends on two primaries agreeing.

Functions over one group's state, called by :class:`ConsumerGroupCoordinator` on the
server's event loop.
"""

from __future__ import annotations

from collections.abc import Iterable

from fmq.server.ops.group_state import ConsumerGroup, GroupMember, QueueKey


def settle(g: ConsumerGroup, topic: str, targets: list[str], now: float) -> None:
    """After ``topic``'s targets changed (a new generation, already counted): each holder of
    a queue it is no longer the target of is told to drop it, a holder that is the target
    again keeps it, and every queue nobody holds goes to its target."""
    holders = g.holders.setdefault(topic, {})
    for q, mid in list(holders.items()):
        holder = g.members[mid]
        if q < len(targets) and targets[q] == mid:
            holder.releasing.pop((topic, q), None)  # given back before it was released
        else:
            holder.releasing.setdefault((topic, q), (g.generation, now))
    for q, mid in enumerate(targets):
        if q not in holders:
            _grant(g, mid, (topic, q))
    if not holders:
        del g.holders[topic]


def drop_holder(g: ConsumerGroup, m: GroupMember) -> set[str]:
    """Free every queue ``m`` (leaving the group) holds; the topics whose queues it held
    (their targets get them at the rebalance that follows)."""
    for topic, queues in m.held.items():
        holders = g.holders.get(topic)
        if holders is None:
            continue
        for q in queues:
            if holders.get(q) == m.member_id:
                del holders[q]
        if not holders:
            del g.holders[topic]
    topics = set(m.held)
    m.held.clear()
    m.releasing.clear()
    return topics


def release(g: ConsumerGroup, m: GroupMember, keys: Iterable[QueueKey]) -> None:
    """``m`` stopped reading ``keys`` (queues it was told to drop): each goes to its target,
    and a grant is a new generation (the target's next answer carries it)."""
    granted = False
    for key in list(keys):
        m.releasing.pop(key, None)
        topic, q = key
        mine = m.held.get(topic)
        if mine is not None:
            mine.discard(q)
            if not mine:
                del m.held[topic]
        holders = g.holders.get(topic)
        if holders is not None and holders.get(q) == m.member_id:
            del holders[q]
            if not holders:
                del g.holders[topic]
        targets = g.owners.get(topic, ())
        if q < len(targets) and targets[q] in g.members:
            if not granted:
                g.generation += 1
                granted = True
            _grant(g, targets[q], key)


def released_by(m: GroupMember, applied: int | None, now: float, patience: float
                ) -> list[QueueKey]:
    """The queues ``m`` has released, by what it said: ``applied``, the generation whose
    answer it reads by now (GROUP_SYNC), releases the queues it was told to drop in that
    generation or before; None (GROUP_HEARTBEAT or GROUP_JOIN, which say nothing of it)
    releases all of them, as a client that does not say has always been taken at its
    word. A generation this primary never answered the member (one of a primary before a
    fail-over) releases nothing by itself. A queue the member was told to drop
    ``patience`` seconds ago or more is released too: a consumer applies what it was told
    before it delivers anything more, so one that does not poll for that long (busy
    processing) only holds up the queue's next owner."""
    if applied is None:
        return list(m.releasing)
    known = m.joined <= applied <= m.told
    return [key for key, (gen, since) in m.releasing.items()
            if (known and gen <= applied) or (gen <= m.told and now - since >= patience)]


def _grant(g: ConsumerGroup, mid: str, key: QueueKey) -> None:
    g.holders.setdefault(key[0], {})[key[1]] = mid
    g.members[mid].held.setdefault(key[0], set()).add(key[1])
