"""Where Kafka's group (and transaction) coordinator is: the primary of this node's broker
group, the one node that can write a group's commits (OFFSET records) and a transactional
id's state. A server without a coordinator is its own.

FindCoordinator names the primary (COORDINATOR_NOT_AVAILABLE while an election is under
way, which clients retry), and a follower asked for a group's membership or offsets
answers NOT_COORDINATOR, as a Kafka broker that is not the group's coordinator does: the
client asks FindCoordinator again and moves to the primary. So a consumer group's
coordinator moves with a fail-over: on the new primary the members join again (the group's
membership is kept in memory) and resume from the commits, which are in the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from fmq.protocol import Op
from fmq.server.cluster.fencing import follower_refusal
from fmq.server.kafka.brokers import NO_LEADER, GroupView
from fmq.server.kafka.group_coordinator import KafkaGroupError
from fmq.server.kafka.metadata import own_node_id
from fmq.server.kafka.session import KafkaSession


@dataclass(frozen=True)
class CoordinatorAddress:
    node_id: int
    host: str
    port: int


def coordinator_address(session: KafkaSession) -> CoordinatorAddress | None:
    """The coordinator's node and address; None while the group has no primary (or its
    address is not known yet)."""
    brokers = session.brokers
    if brokers is None:
        return CoordinatorAddress(own_node_id(session), session.advertised_host,
                                  session.advertised_port)
    leader = brokers.view.groups.get(brokers.group, GroupView()).leader
    if leader == NO_LEADER:
        return None
    for b in brokers.view.brokers:
        if b.node_id == leader:
            return CoordinatorAddress(b.node_id, b.host, b.port)
    return None


def coordinator_refusal(session: KafkaSession) -> ErrorCode | None:
    """NOT_COORDINATOR on a follower (only the primary coordinates groups); None here."""
    if follower_refusal(session.ctx.replication, Op.COMMIT_OFFSET) is not None:
        return ErrorCode.not_coordinator
    return None


def check_coordinator(session: KafkaSession) -> None:
    """Raise :func:`coordinator_refusal`'s code, if any."""
    refused = coordinator_refusal(session)
    if refused is not None:
        raise KafkaGroupError(refused)
