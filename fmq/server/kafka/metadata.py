"""Metadata (key 3): the FMQ topics as Kafka topics, their queues as partitions, this server
the only broker and the leader of every partition.

Listing every topic leaves out FMQ's own (``%`` names: retries, dead letters, timers);
named, they are answered like any other. A topic named but unknown is created when the
broker creates topics on first use (``auto_create_topics``) and the client allows it, as a
Kafka broker with ``auto.create.topics.enable`` does; otherwise it is
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError, TopicExists
from fmq.message import INTERNAL_TOPIC_PREFIX
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.server.fencing import follower_refusal
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.session import NODE_ID, KafkaSession

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
        answers = [_topic(t["name"], t["queues"]) for t in listed
                   if not t["name"].startswith(INTERNAL_TOPIC_PREFIX)
                   and access.visible(session, t["name"])]
    else:
        create = (getattr(request, "allow_auto_topic_creation", True)
                  and broker.config.auto_create_topics
                  and follower_refusal(ctx.replication, Op.TOPIC_CREATE) is None)
        answers = [await _named(session, t.name, create) for t in wanted]
    return {"throttle_time": 0, "cluster_id": CLUSTER_ID, "controller_id": NODE_ID,
            "brokers": [{"node_id": NODE_ID, "host": session.advertised_host,
                         "port": session.advertised_port, "rack": None}],
            "topics": answers, "cluster_authorized_operations": NO_OPERATIONS}


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
    return _topic(name, found.queues)


def _error(name: str, code: ErrorCode) -> dict:
    return {"error_code": code, "name": name, "topic_id": None, "is_internal": False,
            "partitions": [], "topic_authorized_operations": NO_OPERATIONS}


def _topic(name: str, partitions: int) -> dict:
    return {"error_code": 0, "name": name, "topic_id": None,
            "is_internal": name.startswith(INTERNAL_TOPIC_PREFIX),
            "partitions": [{"error_code": 0, "partition_index": i, "leader_id": NODE_ID,
                            "leader_epoch": 0, "replica_nodes": [NODE_ID],
                            "isr_nodes": [NODE_ID], "offline_replicas": []}
                           for i in range(partitions)],
            "topic_authorized_operations": NO_OPERATIONS}
