"""Where Kafka's coordinators are.

**A consumer group's coordinator** is the primary of one broker group of the cluster,
chosen from the group id alone, the same on every node (:func:`coordinating_group`): by
rendezvous hashing of the group id over the cluster's broker groups that have published
Kafka addresses (docs/kafka.md, *Consumer groups over broker groups*). So every member of
a consumer group, whichever node it asked, joins, heart-beats and commits at one place, as
with Kafka, where a group's coordinator is the leader of its ``__consumer_offsets``
partition. Rendezvous hashing moves only the groups the newcomer wins when a broker group
joins the cluster; their members get NOT_COORDINATOR, find the coordinator again and join
it (membership is in memory; the commits stay in the broker groups hosting the queues).
Commits of partitions another broker group hosts are forwarded by the coordinator
(:mod:`.group_remote_offsets`).

FindCoordinator names that primary (COORDINATOR_NOT_AVAILABLE while its group elects one,
or before this node has read the cluster's Kafka brokers, which clients retry), and any
other node asked for a group's membership or offsets answers NOT_COORDINATOR, as a Kafka
broker that is not the group's coordinator does: the client asks FindCoordinator again. A
coordinator fails over with its broker group: on the new primary the members join again
and resume from the commits, which are in the logs.

**A transactional id's coordinator** stays the primary of the asked node's own broker group
(a Kafka transaction stays in one broker group, docs/kafka.md, *Exactly-once*).

A server without a coordinator is its own, for everything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from fmq.protocol import Op
from fmq.server.cluster.fencing import follower_refusal
from fmq.server.kafka.brokers import NO_LEADER, GroupView, KafkaBrokers
from fmq.server.kafka.group_coordinator import KafkaGroupError
from fmq.server.kafka.metadata import own_node_id
from fmq.server.kafka.session import KafkaSession


@dataclass(frozen=True)
class CoordinatorAddress:
    node_id: int
    host: str
    port: int


def rendezvous_choice(group_id: str, broker_groups: list[str]) -> str:
    """The broker group coordinating consumer group ``group_id`` among ``broker_groups``
    (not empty): the one whose hash with the group id is highest. A stable hash (the same
    on every node and release), and adding or removing a broker group moves only the
    consumer groups it wins or held."""
    def score(broker_group: str) -> bytes:
        key = f"{group_id}\0{broker_group}".encode()
        return hashlib.blake2b(key, digest_size=8).digest()

    return max(sorted(broker_groups), key=score)


def candidate_groups(brokers: KafkaBrokers) -> list[str] | None:
    """The broker groups that may coordinate consumer groups: this node's own (when it is
    a Kafka broker) and every group of the cluster whose Kafka addresses are published;
    None before this node read the cluster's Kafka brokers from etcd (it cannot tell yet).
    Empty only on a node without the Kafka door in a cluster where no node has one."""
    if not brokers.view.from_etcd:
        return None
    own = {brokers.group} if brokers.serves_kafka else set()
    return sorted(own | {name for name, group in brokers.view.groups.items()
                         if group.members})


def coordinating_group_of(brokers: KafkaBrokers, group_id: str) -> str | None:
    """The broker group whose primary coordinates consumer group ``group_id`` as the node
    following ``brokers`` sees it; None while it cannot tell (see :func:`candidate_groups`)."""
    candidates = candidate_groups(brokers)
    return rendezvous_choice(group_id, candidates) if candidates else None


def coordinating_group(session: KafkaSession, group_id: str) -> str | None:
    """:func:`coordinating_group_of` for a Kafka session. Only for a node with Kafka
    brokers (a coordinator); a server alone coordinates everything itself."""
    return coordinating_group_of(session.brokers, group_id)


def _primary_address(session: KafkaSession, broker_group: str) -> CoordinatorAddress | None:
    view = session.brokers.view
    leader = view.groups.get(broker_group, GroupView()).leader
    if leader == NO_LEADER:
        return None
    for b in view.brokers:
        if b.node_id == leader:
            return CoordinatorAddress(b.node_id, b.host, b.port)
    return None


def _this_server(session: KafkaSession) -> CoordinatorAddress:
    return CoordinatorAddress(own_node_id(session), session.advertised_host,
                              session.advertised_port)


def group_coordinator_address(session: KafkaSession, group_id: str
                              ) -> CoordinatorAddress | None:
    """The node coordinating consumer group ``group_id``; None while it is not known (an
    election in its broker group, or the cluster's brokers not read yet)."""
    if session.brokers is None:
        return _this_server(session)
    broker_group = coordinating_group(session, group_id)
    return None if broker_group is None else _primary_address(session, broker_group)


def transaction_coordinator_address(session: KafkaSession) -> CoordinatorAddress | None:
    """The node coordinating transactional ids: this broker group's primary (None during
    an election)."""
    if session.brokers is None:
        return _this_server(session)
    return _primary_address(session, session.brokers.group)


def coordinator_refusal(session: KafkaSession, group_id: str) -> ErrorCode | None:
    """NOT_COORDINATOR unless this node coordinates consumer group ``group_id``: a
    follower, a node of another broker group, or a node that cannot tell yet; None here."""
    if follower_refusal(session.ctx.replication, Op.COMMIT_OFFSET) is not None:
        return ErrorCode.not_coordinator
    brokers = session.brokers
    if brokers is not None and coordinating_group(session, group_id) != brokers.group:
        return ErrorCode.not_coordinator
    return None


def check_coordinator(session: KafkaSession, group_id: str) -> None:
    """Raise :func:`coordinator_refusal`'s code, if any."""
    refused = coordinator_refusal(session, group_id)
    if refused is not None:
        raise KafkaGroupError(refused)
