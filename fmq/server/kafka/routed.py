"""A topic routed over several broker groups (docs/cluster.md) as one Kafka topic: its
partitions are the route's global indices, each led by the primary of the group hosting it.

A node serves the partitions of its own group's entry, partition ``base + q`` being its
local queue ``q``; a partition of another group (or of a group the route no longer names)
is answered NOT_LEADER_OR_FOLLOWER, so a client refreshes its metadata and goes to that
group's primary. A topic without a route is the node's own: partition = queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmq.server.context import ServerContext
from fmq.server.kafka.session import KafkaSession


@dataclass(frozen=True)
class RoutedPartition:
    index: int  # the global index: Kafka's partition
    group: str
    queue: int  # the queue id in that group


def route_of(session: KafkaSession, topic: str):  # noqa: ANN201 - a TopicRoute or None
    """``topic``'s route as this node's copy has it; None outside a cluster or unrouted, or
    when the Kafka brokers of the groups are not followed (no Kafka view of them)."""
    routes = session.ctx.routes
    if routes is None or session.brokers is None:
        return None
    return routes.snapshot.routes.get(topic)


def routed_partitions(session: KafkaSession, topic: str) -> list[RoutedPartition] | None:
    """Every partition of a routed ``topic``, by global index; None when not routed."""
    route = route_of(session, topic)
    if route is None:
        return None
    return sorted((RoutedPartition(e.base + q, e.group, q)
                   for e in route.entries for q in range(e.queues)), key=lambda p: p.index)


def cluster_broker_groups(ctx: ServerContext) -> list[str]:
    """The broker groups of the cluster and those the node's routes name: their brokers are
    Kafka's too, each may lead partitions and coordinate consumer groups."""
    routes = ctx.routes
    if routes is None:
        return []
    snapshot = routes.snapshot
    return sorted({g for r in snapshot.routes.values() for g in r.groups}
                  | set(snapshot.groups))


def routed_groups(session: KafkaSession) -> list[str]:
    """The broker groups any route names: where a routed topic's commits may be kept."""
    routes = session.ctx.routes
    if routes is None or session.brokers is None:
        return []
    return sorted({g for r in routes.snapshot.routes.values() for g in r.groups})


def partition_host(session: KafkaSession, topic: str, partition: int
                   ) -> RoutedPartition | None:
    """Where Kafka ``partition`` of ``topic`` is kept: its broker group (this node's own for
    an unrouted topic: "" outside a cluster) and queue there; None when no group of the
    route hosts it (past the route's indices, or a group ``remove-group`` took out)."""
    route = route_of(session, topic)
    if route is None:
        own = session.brokers.group if session.brokers is not None else ""
        return RoutedPartition(partition, own, partition)
    for e in route.entries:
        if e.base <= partition < e.base + e.queues:
            return RoutedPartition(partition, e.group, partition - e.base)
    return None


def local_queue(session: KafkaSession, topic: str, partition: int) -> int | None:
    """The queue of this node holding Kafka ``partition`` of ``topic``: the partition itself
    for an unrouted topic; None when another group hosts it."""
    route = route_of(session, topic)
    if route is None:
        return partition
    entry = route.entry(session.brokers.group)
    if entry is None or not entry.base <= partition < entry.base + entry.queues:
        return None
    return partition - entry.base


def global_index(session: KafkaSession, topic: str, queue: int) -> int:
    """The Kafka partition of this node's ``queue`` of ``topic``: the queue itself for an
    unrouted topic, its global index (the entry's base + queue) for a routed one."""
    route = route_of(session, topic)
    entry = None if route is None else route.entry(session.brokers.group)
    return queue if entry is None else entry.base + queue


def not_here(topic: str, partition: int) -> str:
    return (f"partition {partition} of {topic!r} is hosted by another broker group; refresh "
            f"the metadata for its leader")
