"""Metadata (key 3): the FMQ topics as Kafka topics, their queues as partitions. The
brokers are :mod:`.brokers`' view: this server alone (node 0, the leader of every
partition), or, in a replication group with a coordinator, every node of the group, each
partition led by the group's primary in its epoch (no primary now: LEADER_NOT_AVAILABLE,
which clients retry with a fresh Metadata).

Listing every topic leaves out FMQ's own (``%`` names: retries, dead letters, timers);
named, they are answered like any other. A topic named but unknown is created when the
broker creates topics on first use (``auto_create_topics``) and the client allows it, as a
Kafka broker with ``auto.create.topics.enable`` does; otherwise it is
UNKNOWN_TOPIC_OR_PARTITION. A follower creates nothing (its log changes only by what its
primary ships): it answers such a topic LEADER_NOT_AVAILABLE, as a Kafka broker answers a
topic being created, so the client asks again (the primary, asked, creates it).

In a cluster of broker groups, a named topic this node does not have and no route names may
be another group's own: that group is found by asking (:mod:`.unrouted_hosts`) and its
primary named as the partitions' leader, so every node answers for the topic alike and none
makes a second one of the same name.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError, TopicExists
from fmq.message import INTERNAL_TOPIC_PREFIX
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.server.cluster.fencing import follower_refusal
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.brokers import NO_LEADER, GroupView
from fmq.server.kafka.controller import controller_id
from fmq.server.kafka.routed import routed_partitions
from fmq.server.kafka.session import NODE_ID, KafkaSession
from fmq.server.kafka.unrouted_hosts import holds_elsewhere, locate_elsewhere

logger = logging.getLogger("fmq.server.kafka")

CLUSTER_ID = "fmq"
#: "Not asked": the value of topic_authorized_operations when the client did not ask.
NO_OPERATIONS = -(2 ** 31)


@kafka_api(3, "Metadata", 0, 12, access=on_topics(Operation.DESCRIBE))
async def metadata(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    broker = ctx.broker
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):  # every topic
        listed = await ctx.read(broker.topics.list)
        answers = [_topic(session, t["name"], t["queues"]) for t in listed
                   if not t["name"].startswith(INTERNAL_TOPIC_PREFIX)
                   and access.visible(session, t["name"])]
    else:
        create = (getattr(request, "allow_auto_topic_creation", True)
                  and broker.config.auto_create_topics)
        answers = [await _named(session, t.name, create) for t in wanted]
    return {"throttle_time": 0, "cluster_id": CLUSTER_ID, "controller_id": controller_id(session),
            "brokers": brokers(session),
            "topics": answers, "cluster_authorized_operations": NO_OPERATIONS}


def brokers(session: KafkaSession) -> list[dict]:
    """Metadata's brokers: the nodes known (this server alone without a coordinator)."""
    if session.brokers is None:
        return [{"node_id": NODE_ID, "host": session.advertised_host,
                 "port": session.advertised_port, "rack": None}]
    return [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
            for b in session.brokers.view.brokers]


def own_node_id(session: KafkaSession) -> int:
    """This node's Kafka node id, as Metadata names it among the brokers."""
    return NODE_ID if session.brokers is None else session.brokers.me.node_id


async def _named(session: KafkaSession, name: str | None, create: bool) -> dict:
    ctx = session.ctx
    broker = ctx.broker
    if name is None:  # asked by topic id: FMQ topics have none
        return {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": None,
                "is_internal": False, "partitions": [],
                "topic_authorized_operations": NO_OPERATIONS}
    denied = access.refusal(session, name)
    if denied is not None:
        return _error(name, denied)
    # Creating on first use is a produce's right in FMQ (a send creates its topic too).
    create = create and access.permits(session, Operation.PRODUCE, ResourceType.TOPIC, name)
    found = await ctx.read(broker.topics.get, name)
    if found is None and holds_elsewhere(session, name):
        # Another broker group's own topic (no route names it): that group's primary leads
        # its partitions, as every node of the cluster answers; never made again here.
        located = await locate_elsewhere(session, name, fresh=True)
        if not isinstance(located, ErrorCode):
            return _topic(session, name, located[1], located[0])
        if located != ErrorCode.unknown_topic_or_partition:
            # Held twice, or a group that may hold it could not be asked: not created here
            # meanwhile (LEADER_NOT_AVAILABLE is retried as a topic being made).
            return _error(name, located if located == ErrorCode.invalid_topic_exception
                          else ErrorCode.leader_not_available)
    if found is None and create and follower_refusal(ctx.replication, Op.TOPIC_CREATE):
        # Only the primary creates; LEADER_NOT_AVAILABLE (Kafka's answer while a topic is
        # being created) keeps the client asking, and its next Metadata may go to the
        # primary, which creates it, instead of giving up on an unknown topic.
        return _error(name, ErrorCode.leader_not_available)
    if found is None and create:
        try:
            await ctx.write(broker.topics.create, name)
        except TopicExists:
            pass  # made meanwhile
        except FMQError as exc:
            logger.info("kafka metadata from %s: topic %r not created: %s", session.peer,
                        name, exc)
            return _error(name, ErrorCode.invalid_topic_exception)
        found = await ctx.read(broker.topics.get, name)
    if found is None:
        return _error(name, ErrorCode.unknown_topic_or_partition)
    return _topic(session, name, found.queues)


def _error(name: str, code: ErrorCode) -> dict:
    return {"error_code": code, "name": name, "topic_id": None, "is_internal": False,
            "partitions": [], "topic_authorized_operations": NO_OPERATIONS}


def _topic(session: KafkaSession, name: str, partitions: int, group: str | None = None
           ) -> dict:
    """``name`` with its ``partitions`` queues led by the primary of ``group`` (this node's
    by default), or, routed over broker groups, with the route's global indices each led
    by its group's primary."""
    routed = routed_partitions(session, name)
    if routed is None:
        if group is None:
            group = session.brokers.group if session.brokers is not None else ""
        placed = [(i, group) for i in range(partitions)]
    else:
        placed = [(p.index, p.group) for p in routed]
    return {"error_code": 0, "name": name, "topic_id": None,
            "is_internal": name.startswith(INTERNAL_TOPIC_PREFIX),
            "partitions": [_partition(session, i, group) for i, group in placed],
            "topic_authorized_operations": NO_OPERATIONS}


def _partition(session: KafkaSession, index: int, group: str) -> dict:
    leader, epoch, replicas = NODE_ID, 0, [NODE_ID]
    if session.brokers is not None:
        view = session.brokers.view.groups.get(group, GroupView())
        leader, epoch = view.leader, view.epoch
        replicas = list(view.members) or ([leader] if leader != NO_LEADER else [])
    code = ErrorCode.none if leader != NO_LEADER else ErrorCode.leader_not_available
    return {"error_code": code, "partition_index": index, "leader_id": leader,
            "leader_epoch": epoch, "replica_nodes": replicas, "isr_nodes": replicas,
            "offline_replicas": []}
