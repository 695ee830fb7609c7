"""Kafka's controller, as FMQ names it: the node admin clients send topic changes to.

FMQ has no controller of its own: a topic change is a TOPIC record that only a group's
primary writes (a follower's log changes only by what its primary ships). So the
controller Metadata and DescribeCluster name is the primary of the group of the node asked
(this server alone without a coordinator; -1, Kafka's "no controller", during an election,
which clients wait out). In a cluster of several broker groups each group names its own
primary: a topic change goes to the log of the group a client talks to, as ``fmq topic``
sent to that group's nodes does. A follower asked for a topic change (CreateTopics,
DeleteTopics, CreatePartitions, IncrementalAlterConfigs) answers NOT_CONTROLLER, as a
Kafka broker that is not the controller does: the client refreshes its metadata and sends
the request to the controller it names.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from fmq.server.cluster.fencing import follower_refusal
from fmq.server.kafka.brokers import GroupView
from fmq.server.kafka.session import NODE_ID, KafkaSession


def controller_id(session: KafkaSession) -> int:
    """The controller's node id: this group's primary (-1 while it has none)."""
    brokers = session.brokers
    if brokers is None:
        return NODE_ID
    return brokers.view.groups.get(brokers.group, GroupView()).leader


def controller_refusal(session: KafkaSession, op: int) -> tuple[ErrorCode, str] | None:
    """NOT_CONTROLLER, with the reason, when this node may not make topic change ``op``
    (a follower); None on the primary or a server alone."""
    refusal = follower_refusal(session.ctx.replication, op)
    if refusal is None:
        return None
    return (ErrorCode.not_controller,
            f"{refusal}; Kafka clients find it as the controller in Metadata")
