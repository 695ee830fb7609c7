"""What a Kafka handler may use: the server's context and this connection's identity (its
peer, whether it came over TLS, and the user it logged in as)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fmq.server.context import ServerContext
from fmq.server.kafka.counters import KafkaCounters

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
    #: The Kafka brokers of the group (:class:`~fmq.server.kafka.brokers.KafkaBrokers`);
    #: None: this server alone, node :data:`NODE_ID`.
    brokers: Any = None
    closing: bool = False
    #: Whether the connection came over TLS (PLAIN is offered only then).
    tls: bool = False
    #: The user it logged in as with SASL (None: not logged in).
    principal: str | None = None
    #: The mechanism SaslHandshake chose, and SCRAM's state between its two steps.
    sasl_mechanism: str | None = None
    scram: Any = None
    #: After SaslHandshake v0: the next frames are bare SASL messages, until log-in.
    sasl_raw: bool = False
    #: Failed log-ins on this connection (each one slows the next answer down).
    auth_failures: int = 0
    #: The door's counters (shared by its connections: STATS and the metrics).
    counters: KafkaCounters = field(default_factory=KafkaCounters)
