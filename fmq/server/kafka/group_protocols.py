"""One protocol per consumer group across the broker groups of a cluster (docs/kafka.md,
*Consumer groups over broker groups*).

A Kafka group's members are held by its coordinator, the primary of the broker group its id
hashes to (:mod:`.group_placement`); FMQ's routing consumer joins the primary of every
broker group hosting its topics. Each side asks the other when a group *starts* on it, over
the links the coordinator already forwards commits on (:mod:`.group_links`, GROUP_MEMBERS):

* **An FMQ join that starts a group in this broker group** asks the group's Kafka
  coordinator, when it is another broker group's primary, whether the group has live Kafka
  members: if it has, the join is refused with GroupProtocolConflict
  (:func:`kafka_members_at_coordinator`, installed in
  :class:`~fmq.server.ops.group_protocol_gate.GroupStartGate`).
* **A Kafka JoinGroup of a group without members**, at its coordinator, asks the primary of
  every other broker group of the cluster whether the group has live FMQ members there: if
  one has, the join is answered INCONSISTENT_GROUP_PROTOCOL
  (:func:`fmq_members_elsewhere`, installed in the Kafka group coordinator).

Asked at join time only: heartbeats, fetches and commits of a started group never leave the
node. The answers are the primaries' live memberships, which move with the primaries: a new
primary has no members until they join again, as after a restart of one server, so there
is nothing to keep in step (a mark kept in etcd would be, and would outlive members that
died with their primary). Each side counts its join as a member while it asks, so two joins
of the two protocols crossing each other never both start the group (both may be refused;
the clients join again). When the other side cannot be asked (no primary during an
election, down, not answering in 5 s, or this node has not read the cluster yet) the join
is refused with a retriable error (GroupProtocolUnchecked; Kafka's
COORDINATOR_LOAD_IN_PROGRESS), never taken without the answer.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError, GroupProtocolConflict, GroupProtocolUnchecked
from fmq.protocol import Op
from fmq.server.context import ServerContext
from fmq.server.kafka.brokers import KafkaBrokers
from fmq.server.kafka.group_coordinator import KafkaGroupError
from fmq.server.kafka.group_links import BrokerGroupLinks, close_links, links_of
from fmq.server.kafka.group_placement import candidate_groups, rendezvous_choice
from fmq.server.kafka.group_registry import coordinator_of
from fmq.server.kafka.routed import cluster_broker_groups
from fmq.server.ops.group_protocol_gate import gate_of

logger = logging.getLogger("fmq.server.kafka")

#: A Kafka join that could not ask every other broker group: "the coordinator is loading",
#: which Kafka clients retry as it is.
UNASKED = ErrorCode.coordinator_load_in_progress


def _unasked(broker_group: str, group: str, exc: FMQError) -> str:
    """Why ``broker_group`` could not be asked (logged)."""
    if exc.retriable:
        logger.info("consumer group %r: broker group %s could not be asked for the group's "
                    "members of the other protocol (%s); the join is retried", group,
                    broker_group, exc)
    else:
        logger.error("consumer group %r: broker group %s refused the question for the group's "
                     "members of the other protocol (%s): the node connects there as it "
                     "follows a primary (follow_user, follow_password_file, follow_tls), and "
                     "the follow_user needs describe on the consumer groups; an older release "
                     "there does not know GROUP_MEMBERS", group, broker_group, exc)
    return str(exc)


async def kafka_members_at_coordinator(links: BrokerGroupLinks, brokers: KafkaBrokers,
                                       group: str) -> None:
    """Before an FMQ member starts ``group`` in this broker group: GroupProtocolConflict
    when the group's Kafka coordinator, another broker group's primary, holds live Kafka
    members of it; GroupProtocolUnchecked (retriable) when it cannot be asked. The
    coordinator being this broker group, the server's own check covers it."""
    candidates = candidate_groups(brokers)
    if candidates is None:
        raise GroupProtocolUnchecked(group, "(not known yet)", "this node has not read the "
                                     "cluster's Kafka brokers from etcd yet")
    if not candidates:
        return  # no node of the cluster has the Kafka door: no Kafka member anywhere
    coordinator = rendezvous_choice(group, candidates)
    if coordinator == brokers.group:
        return
    try:
        answer = await links.request(coordinator, Op.GROUP_MEMBERS, {"group": group})
    except FMQError as exc:
        raise GroupProtocolUnchecked(group, coordinator,
                                     _unasked(coordinator, group, exc)) from None
    if answer["kafka_members"]:
        logger.info("consumer group %r: FMQ join refused here, the group has %d live Kafka "
                    "members at its coordinator in broker group %s", group,
                    answer["kafka_members"], coordinator)
        raise GroupProtocolConflict(group, answer["kafka_members"])


async def fmq_members_elsewhere(links: BrokerGroupLinks, others: list[str],
                                group: str) -> None:
    """Before a Kafka member starts ``group`` at its coordinator: INCONSISTENT_GROUP_PROTOCOL
    when a broker group of ``others`` has live FMQ members of it, COORDINATOR_LOAD_IN_PROGRESS
    when one of them cannot be asked."""
    async def ask(broker_group: str) -> tuple[str, int | FMQError]:
        try:
            answer = await links.request(broker_group, Op.GROUP_MEMBERS, {"group": group})
        except FMQError as exc:
            return broker_group, exc
        return broker_group, answer["fmq_members"]

    answers = await asyncio.gather(*(ask(g) for g in others))
    holding = [(g, n) for g, n in answers if isinstance(n, int) and n]
    if holding:
        logger.info("kafka group %r: join refused, the group has live FMQ consumers in "
                    "broker group(s) %s (INCONSISTENT_GROUP_PROTOCOL): stop them or use "
                    "another group name", group, ", ".join(f"{g} ({n})" for g, n in holding))
        raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)
    for broker_group, failed in answers:
        if isinstance(failed, FMQError):
            _unasked(broker_group, group, failed)
            raise KafkaGroupError(UNASKED)


def install(ctx: ServerContext, brokers: KafkaBrokers) -> None:
    """Make the server whose context is ``ctx`` (a node of a cluster, following
    ``brokers``) ask the other broker groups before either protocol starts a group here.
    On a node without the Kafka door (``brokers`` only watching) only FMQ's joins ask: no
    Kafka member joins there."""
    links = links_of(ctx)

    async def kafka_side(group: str) -> None:
        await kafka_members_at_coordinator(links, brokers, group)

    gate_of(ctx).ask_elsewhere = kafka_side
    if not brokers.serves_kafka:
        return

    async def fmq_side(group: str) -> None:
        others = [g for g in cluster_broker_groups(ctx) if g != brokers.group]
        if others:
            await fmq_members_elsewhere(links, others, group)

    coordinator_of(ctx).fmq_elsewhere = fmq_side


class DoorlessWatch:
    """What a node of a cluster started without ``--kafka-port`` keeps of the Kafka door:
    where the cluster's Kafka brokers are, so that an FMQ join starting a group here asks
    the group's Kafka coordinator in another broker group (the one-protocol rule holds on
    every node, not only on those with the door)."""

    def __init__(self, ctx: ServerContext, node: str) -> None:
        self.ctx = ctx
        self.brokers = KafkaBrokers.watching(ctx.config, node)
        self._closer: asyncio.Future | None = None

    def start(self) -> None:
        self.brokers.start(lambda: cluster_broker_groups(self.ctx))
        install(self.ctx, self.brokers)
        self._closer = asyncio.ensure_future(self._close_on_stop())

    async def _close_on_stop(self) -> None:
        await self.ctx.stop_requested.wait()
        self.brokers.stop()
        close_links(self.ctx)


def watch_without_door(ctx: ServerContext) -> DoorlessWatch | None:
    """:class:`DoorlessWatch` started, for a node of a cluster of broker groups (it has a
    coordinator and routes) whose Kafka door is closed; None elsewhere."""
    config = ctx.config
    node = config.node or (f"{config.host}:{config.port}" if config.port else "")
    if config.kafka_port or not config.coordinator or ctx.routes is None or not node:
        return None
    watch = DoorlessWatch(ctx, node)
    watch.start()
    return watch
