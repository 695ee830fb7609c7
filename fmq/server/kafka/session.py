"""What a Kafka handler may use: the server's context and this connection's identity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmq.server.context import ServerContext

#: Kafka's node id for this server: one broker, the leader of every partition it serves.
NODE_ID = 0


@dataclass
class KafkaSession:
    """One Kafka connection as the handlers see it."""

    ctx: ServerContext
    #: Negative, so that pull wake-ups never mix it up with an FMQ session's id.
    id: int
    peer: str
    #: Where clients are told to connect (Metadata's broker address).
    advertised_host: str
    advertised_port: int
    #: The server's Kafka groups (:class:`~fmq.server.kafka.group_coordinator.GroupCoordinator`).
    groups: Any = None
    #: The Kafka brokers of the group (:class:`~fmq.server.kafka.brokers.KafkaBrokers`);
    #: None: this server alone, node :data:`NODE_ID`.
    brokers: Any = None
    closing: bool = False
