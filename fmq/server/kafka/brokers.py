"""The Kafka brokers of a replication group (and of a cluster's groups): who they are, where
Kafka clients reach them, which one leads each group's partitions.

A server without a coordinator is one broker, node 0, leading every partition. With
``--coordinator``, every node publishes its Kafka address beside its FMQ registration,
``/fmq/<group>/kafka/<node>`` = ``{"node_id", "host", "port"}`` (persistent, rewritten at
every start, so a moved port is known at once), and each node reads, every
:data:`REFRESH_S`, those of its group and of every group of its cluster and its routes,
with the groups' leader keys (a consumer group's coordinator may be any group's primary,
:mod:`.group_placement`). Metadata then names every node as a broker and, as each partition's leader,
the primary of the group that hosts it, with the group's epoch as the leader epoch.

A node's Kafka id is :func:`node_id` of its group and node name: stable across restarts and
role changes and the same on every node, with no counter to keep in etcd. (Two names of
one cluster hashing to the same 31-bit id are astronomically unlikely; the publisher logs a
clash.)
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

from fmq.coordination import etcd_io
from fmq.coordination.lease import leader_key
from fmq.errors import CoordinatorUnavailable
from fmq.server.config import ServerConfig

logger = logging.getLogger("fmq.server.kafka")

#: Kafka's node id of a server without a coordinator.
SINGLE_NODE_ID = 0
#: How often the group's (and the cluster's) Kafka addresses and leaders are read again.
REFRESH_S = 0.5
NO_LEADER = -1


def node_id(group: str, node: str) -> int:
    """The Kafka node id of ``node`` of broker group ``group``."""
    return zlib.crc32(f"{group}/{node}".encode()) & 0x7FFFFFFF


def kafka_prefix(group: str) -> str:
    return f"/fmq/{group}/kafka/"


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class GroupView:
    """One broker group as Kafka sees it."""

    leader: int = NO_LEADER  # the primary's node id
    epoch: int = 0
    members: tuple[int, ...] = ()


@dataclass(frozen=True)
class BrokersView:
    brokers: tuple[Broker, ...]
    groups: dict[str, GroupView] = field(default_factory=dict)
    #: Read from etcd (False: this node's own start-up view, before the first read).
    from_etcd: bool = False


class KafkaBrokers:
    """This server's view of the Kafka brokers, refreshed from etcd by a thread of its own
    while it has a coordinator."""

    def __init__(self, config: ServerConfig, host: str, port: int, node: str) -> None:
        self.config = config
        self.group = config.group
        self.node = node
        #: This node as a Kafka broker; None for a node without the Kafka door that only
        #: reads where the cluster's Kafka brokers are (:meth:`watching`).
        self.me: Broker | None = Broker(
            node_id(self.group, node) if config.coordinator else SINGLE_NODE_ID, host, port)
        # With a coordinator nothing is said of the leader before etcd is read: a node
        # reopening as a follower must not name itself for a moment.
        leader = NO_LEADER if config.coordinator else self.me.node_id
        self.view = BrokersView((self.me,), {self.group: GroupView(
            leader, 0, (self.me.node_id,))})
        self._groups_wanted: Any = lambda: ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._etcd: Any = None
        self._published = False

    @classmethod
    def watching(cls, config: ServerConfig, node: str) -> KafkaBrokers:
        """The view of a node of a cluster started without ``--kafka-port``: it publishes
        nothing and is no broker, but reads where the cluster's Kafka brokers are, to know
        which broker group coordinates a consumer group's Kafka members (an FMQ join that
        starts a group asks there, docs/kafka.md, *Consumer groups over broker groups*)."""
        brokers = cls(config, config.host, 0, node)
        brokers.me = None
        brokers.view = BrokersView((), {})
        return brokers

    @property
    def serves_kafka(self) -> bool:
        """Whether this node is a Kafka broker (its door is open), not only a reader."""
        return self.me is not None

    def start(self, groups_wanted: Any) -> None:
        """Follow etcd (with a coordinator); ``groups_wanted()`` names the other groups
        whose brokers count (the cluster's groups and those of the node's routes)."""
        if not self.config.coordinator:
            return
        self._groups_wanted = groups_wanted
        self._etcd = etcd_io.open_client(self.config.coordinator, 2.0,
                                         "the Kafka brokers in etcd")
        self._thread = threading.Thread(target=self._run, name="fmq-kafka-brokers",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            try:
                if not self._published and self.me is not None:
                    self._publish()
                self.view = self._read()
            except CoordinatorUnavailable as exc:
                logger.debug("kafka brokers not read from etcd: %s", exc)
            except Exception:  # noqa: BLE001 - a bug must not end the refresh
                logger.exception("kafka brokers: reading etcd failed; trying again")
            if self._stop.wait(REFRESH_S):
                return

    def _publish(self) -> None:
        me = self.me
        assert me is not None  # only a broker publishes
        value = json.dumps({"node_id": me.node_id, "host": me.host, "port": me.port})
        etcd_io.call(self.config.coordinator, "publish this node's Kafka address",
                     lambda: self._etcd.put(kafka_prefix(self.group) + self.node, value))
        self._published = True
        logger.info("kafka node id %d (group %s, node %s) published at %s:%d", me.node_id,
                    self.group, self.node, me.host, me.port)

    def _read(self) -> BrokersView:
        brokers: dict[int, Broker] = {} if self.me is None else {self.me.node_id: self.me}
        groups: dict[str, GroupView] = {}
        for group in dict.fromkeys([self.group, *self._groups_wanted()]):
            members = []
            for value, _meta in self._get_prefix(kafka_prefix(group)):
                try:
                    d = json.loads(value)
                    broker = Broker(int(d["node_id"]), str(d["host"]), int(d["port"]))
                except (ValueError, KeyError, TypeError):
                    continue  # not one of ours: skipped, never fatal
                brokers[broker.node_id] = broker
                members.append(broker.node_id)
            leader, epoch = NO_LEADER, 0
            found = etcd_io.call(self.config.coordinator, "read a leader key",
                                 lambda g=group: self._etcd.get(leader_key(g)))
            if found:
                try:
                    d = json.loads(found[0])
                    leader, epoch = node_id(group, str(d["node"])), int(d["epoch"])
                except (ValueError, KeyError, TypeError):
                    pass
            if leader not in brokers:  # its address is not published yet: unreachable
                leader = NO_LEADER
            groups[group] = GroupView(leader, epoch, tuple(sorted(members)))
        return BrokersView(tuple(sorted(brokers.values(), key=lambda b: b.node_id)), groups,
                           from_etcd=True)

    def _get_prefix(self, prefix: str) -> list[tuple[bytes, Any]]:
        return etcd_io.call(self.config.coordinator, "read the Kafka brokers",
                            lambda: self._etcd.get_prefix(prefix))
