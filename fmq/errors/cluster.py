"""Errors of a cluster's routes (broker groups routed through etcd, docs/cluster.md): a
group the cluster does not have, a route change that contradicts the route, a group removed
while consumer groups still have messages to read there."""

from __future__ import annotations

from fmq.errors.base import FMQError
from fmq.errors.input import InvalidArgument


class UnknownBrokerGroup(InvalidArgument):
    """A route names a broker group that is not registered in the cluster."""

    code = 100
    fields = {"group": str, "cluster": str, "known": str}
    message_format = ("broker group {group} is not part of cluster {cluster} (its groups: "
                      "{known}); start its nodes with --cluster-name {cluster}, or name one "
                      "of the cluster's groups")

    def __init__(self, group: str, cluster: str, known: str) -> None:
        super().__init__(self.message_format.format(group=group, cluster=cluster,
                                                    known=known))
        self.group = group
        self.cluster = cluster
        self.known = known


class RouteConflict(InvalidArgument):
    """A route change that does not fit the route as it is (a group added twice, a group
    the topic has no queues in, the last writable group drained); nothing was changed."""

    code = 101
    fields = {"topic": str, "reason": str}
    message_format = "the route of topic {topic} was not changed: {reason}"

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(self.message_format.format(topic=topic, reason=reason))
        self.topic = topic
        self.reason = reason


class RouteHasLag(RouteConflict):
    """A broker group removed from a topic's route while consumer groups have not read
    everything in that group's queues."""

    code = 102
    fields = {"topic": str, "group": str, "lag": str}
    message_format = ("broker group {group} still holds messages of topic {topic} that "
                      "consumer groups have not read ({lag}); let them catch up, or remove "
                      "it anyway with --force")

    def __init__(self, topic: str, group: str, lag: str) -> None:
        InvalidArgument.__init__(self, self.message_format.format(topic=topic, group=group,
                                                                  lag=lag))
        self.topic = topic
        self.group = group
        self.lag = lag
        self.reason = str(self)


class NotHosted(FMQError):
    """A request for a queue this broker group does not host in the topic's route: the
    group is not in the route, the queue id is past the group's queues there, or a write
    reached a group the route made read-only. Retriable: the client reads the route again
    (ROUTE) and sends to the group that hosts the queue now."""

    code = 103
    retriable = True
    fields = {"topic": str, "group": str, "queue_id": int, "version": int}
    message_format = ("broker group {group} does not host queue {queue_id} of topic {topic} "
                      "for this request (route version {version} here): read the topic's "
                      "route again and send to the group that hosts it")

    def __init__(self, topic: str, group: str, queue_id: int, version: int) -> None:
        super().__init__(self.message_format.format(topic=topic, group=group,
                                                    queue_id=queue_id, version=version))
        self.topic = topic
        self.group = group
        self.queue_id = queue_id
        self.version = version


class GroupProtocolUnchecked(FMQError):
    """A GROUP_JOIN that would start a consumer group in this broker group while the broker
    group coordinating the group's Kafka members cannot be asked whether it has live ones
    (no primary during an election, down, not answering, or this node has not read the
    cluster yet): one group takes one protocol at a time across the cluster (docs/kafka.md),
    so the join is not taken before the answer. Retriable: the client joins again."""

    code = 104
    retriable = True
    fields = {"group": str, "broker_group": str, "reason": str}
    message_format = ("consumer group {group} is not started here yet: broker group "
                      "{broker_group}, which coordinates its Kafka consumers, could not be "
                      "asked whether it has live ones ({reason}); the join is retried, and "
                      "is taken once that broker group answers")

    def __init__(self, group: str, broker_group: str, reason: str) -> None:
        super().__init__(self.message_format.format(group=group, broker_group=broker_group,
                                                    reason=reason))
        self.group = group
        self.broker_group = broker_group
        self.reason = reason
