"""Where a Kafka partition's commits are kept, for a consumer group's coordinator in a cluster
of broker groups, topics without a route included.

A routed topic's partition ``base + q`` is queue ``q`` of the broker group of the route's
entry (:func:`.routed.partition_host`). A topic without a route is the one broker group's own
that has it: made by `fmq topic create` without `--queues-per-group`, by a Kafka client's
CreateTopics or by Metadata creating it on first use at that group's nodes. Its Kafka
clients read and write it there, but their consumer group's coordinator may be another
group's primary (the group id decides, :mod:`.group_placement`), which does not have the
topic. So the coordinator asks the other broker groups' primaries which one holds it
(TOPIC_DESCRIBE over the links it forwards commits on) and forwards the commits there, and
any node asked by Metadata for such a topic names that group's primary as its leader
(:mod:`.metadata`).

What a question finds is kept (:class:`UnroutedHosts`) until a forwarded request finds the
topic gone there (deleted, or made again elsewhere), so a group's commits ask once. A topic
held by no other group is unknown (UNKNOWN_TOPIC_OR_PARTITION, as before); one held by
several, under the same name without a route, is refused (INVALID_TOPIC_EXCEPTION, logged:
its Kafka clients see a different topic at each group's nodes, and a commit could land in
the wrong one); when no group answering holds it and one could not be asked, the commit is
retried (COORDINATOR_LOAD_IN_PROGRESS), never taken as unknown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError, UnknownTopic
from fmq.protocol import Op
from fmq.server.context import ServerContext
from fmq.server.kafka.group_links import BrokerGroupLinks, links_of
from fmq.server.kafka.group_remote_offsets import forward_error
from fmq.server.kafka.routed import (
    RoutedPartition,
    cluster_broker_groups,
    partition_host,
    route_of,
)
from fmq.server.kafka.session import KafkaSession

logger = logging.getLogger("fmq.server.kafka")

#: A partition's place: where it is kept, or the Kafka code its request gets.
Place = RoutedPartition | ErrorCode


class UnroutedHosts:
    """The broker group holding each topic without a route that this node does not have, as
    the other groups' primaries answered, kept until :meth:`forget`."""

    def __init__(self, links: BrokerGroupLinks) -> None:
        self.links = links
        self._found: dict[str, str] = {}

    async def locate(self, topic: str, others: list[str], fresh: bool = False
                     ) -> tuple[str, int] | ErrorCode:
        """The broker group among ``others`` holding ``topic`` and its queue count then,
        or the code to answer. ``fresh``: the queue count as it is now (a group kept from
        an earlier question is asked again), not as it was when the group was found."""
        known = self._found.get(topic)
        if known is not None and known in others:
            if not fresh:
                return known, 0
            held = await self._holds(known, topic)
            if isinstance(held, ErrorCode):
                return held
            if held:
                return known, held
            self.forget(topic, known)
        answers = await asyncio.gather(*(self._holds(g, topic) for g in others))
        holding = [(g, held) for g, held in zip(others, answers, strict=True)
                   if not isinstance(held, ErrorCode) and held]
        if len(holding) > 1:
            logger.warning("kafka: topic %r has no route and is held by broker groups %s: "
                           "its Kafka clients are refused (each group's nodes would answer "
                           "for a different topic); give it a route (fmq topic create "
                           "--queues-per-group) or rename one of them", topic,
                           ", ".join(g for g, _ in holding))
            return ErrorCode.invalid_topic_exception
        if holding:
            self._found[topic] = holding[0][0]
            return holding[0]
        unasked = next((a for a in answers if isinstance(a, ErrorCode)), None)
        return unasked if unasked is not None else ErrorCode.unknown_topic_or_partition

    def forget(self, topic: str, broker_group: str) -> None:
        """``broker_group`` no longer holds ``topic``: ask again next time."""
        if self._found.get(topic) == broker_group:
            del self._found[topic]

    async def _holds(self, broker_group: str, topic: str) -> int | ErrorCode:
        """``topic``'s queue count in ``broker_group`` (0: it does not hold it), or the code
        of a group that could not be asked."""
        try:
            answer = await self.links.request(broker_group, Op.TOPIC_DESCRIBE,
                                              {"topic": topic})
        except UnknownTopic:
            return 0
        except FMQError as exc:
            return forward_error(exc, broker_group, f"look-up of topic {topic!r}")
        return max(1, int(json.loads(answer["json"])["topic"]["queues"]))


_HOSTS: weakref.WeakKeyDictionary[ServerContext, UnroutedHosts] = weakref.WeakKeyDictionary()


def unrouted_hosts_of(ctx: ServerContext) -> UnroutedHosts:
    """The look-ups of the server whose context is ``ctx``, made at the first use."""
    found = _HOSTS.get(ctx)
    if found is None:
        found = _HOSTS[ctx] = UnroutedHosts(links_of(ctx))
    return found


async def partition_places(session: KafkaSession, asked: list[tuple[str, int]]
                           ) -> list[Place]:
    """Where each (topic, partition) of ``asked`` is kept: the route's broker group and
    queue, this node's own topic, or another broker group's topic without a route (found
    by asking); a Kafka code where none is."""
    places: list[Place | None] = []
    elsewhere: dict[str, list[int]] = {}
    ctx, brokers = session.ctx, session.brokers
    for i, (topic, partition) in enumerate(asked):
        host = partition_host(session, topic, partition)
        if host is None:
            places.append(ErrorCode.unknown_topic_or_partition)
        elif holds_elsewhere(session, topic):
            elsewhere.setdefault(topic, []).append(i)
            places.append(None)
        else:
            places.append(host)
    for topic, indices in elsewhere.items():
        if await ctx.read(ctx.broker.topics.get, topic) is not None:
            found: str | ErrorCode = brokers.group  # this node's own topic
        else:
            located = await locate_elsewhere(session, topic)
            found = located if isinstance(located, ErrorCode) else located[0]
        for i in indices:
            partition = asked[i][1]
            places[i] = (RoutedPartition(partition, found, partition)
                         if isinstance(found, str) else found)
    return places  # type: ignore[return-value]  # every None was filled


def holds_elsewhere(session: KafkaSession, topic: str) -> bool:
    """Whether ``topic``, which this node does not have, may be another broker group's own:
    the node is in a cluster and no route names the topic."""
    return (session.ctx.routes is not None and session.brokers is not None
            and route_of(session, topic) is None)


async def locate_elsewhere(session: KafkaSession, topic: str, fresh: bool = False
                           ) -> tuple[str, int] | ErrorCode:
    """:meth:`UnroutedHosts.locate` of ``topic`` among the cluster's other broker groups
    (only for a topic :func:`holds_elsewhere` says may be one's)."""
    ctx, brokers = session.ctx, session.brokers
    assert brokers is not None
    others = [g for g in cluster_broker_groups(ctx) if g != brokers.group]
    if not others:
        return ErrorCode.unknown_topic_or_partition
    return await unrouted_hosts_of(ctx).locate(topic, others, fresh)
