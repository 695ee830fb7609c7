"""The Kafka port: bound when the server starts, on the server's host and event loop, beside
FMQ's own port and on the same broker. Off unless ``kafka_port`` is set (``--kafka-port``).

It shares the server's security: on a server that serves TLS the Kafka port speaks TLS with
the same certificate (and, with ``tls_client_ca_file``, requires a client certificate signed
by that CA, as FMQ's port does); on a server with users, clients log in with SASL as those
users and their requests are checked against the same rules (:mod:`.access`, :mod:`.sasl`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from fmq.server.context import ServerContext
from fmq.server.kafka import (  # noqa: F401 - each module registers its APIs
    api_versions,
    cluster,
    configs,
    fetch,
    group_admin,
    group_apis,
    group_offsets,
    group_protocols,
    leader_epochs,
    list_offsets,
    metadata,
    partitions,
    produce,
    producer_ids,
    sasl,
    topics,
    txn_apis,
)
from fmq.server.kafka.brokers import KafkaBrokers
from fmq.server.kafka.connection import KafkaConnection
from fmq.server.kafka.counters import KafkaCounters
from fmq.server.kafka.group_links import close_links
from fmq.server.kafka.routed import cluster_broker_groups
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.txn_coordinator import start_transaction_recovery
from fmq.server.net.listener import bind_listener
from fmq.server.net.tls import server_context

logger = logging.getLogger("fmq.server.kafka")


def bind_kafka_port(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``; ConfigError naming --kafka-port when taken."""
    return bind_listener(host, port, serving="serve Kafka",
                         option="--kafka-port (config: server.kafka_port)")


async def open_kafka_door(ctx: ServerContext) -> KafkaListener | None:
    """The Kafka listener of the server whose context is ``ctx``, accepting, and closing
    itself when the server is asked to stop; None when ``kafka_port`` is 0."""
    if not ctx.config.kafka_port:
        return None
    listener = KafkaListener(ctx)
    await listener.start()
    return listener


class KafkaListener:
    """Accepts Kafka connections for the server whose context is ``ctx``."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        config = ctx.config
        self.host = config.host
        self.port = config.kafka_port
        self.advertised_host = config.kafka_advertised_host or config.host
        self.advertised_port = config.kafka_advertised_port or config.kafka_port
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._closer: asyncio.Future | None = None
        self._txn_recovery: asyncio.Future | None = None
        node = config.node or (f"{config.host}:{config.port}" if config.port else "")
        self.brokers = (KafkaBrokers(config, self.advertised_host, self.advertised_port, node)
                        if config.coordinator and node else None)
        self._next_id = 0
        self.tls: ssl.SSLContext | None = None
        self.counters = KafkaCounters()

    async def start(self) -> None:
        config = self.ctx.config
        self.tls = server_context(config)
        sock = bind_kafka_port(self.host, self.port)
        self._server = await asyncio.start_server(
            self._accept, sock=sock, backlog=1024, ssl=self.tls,
            ssl_handshake_timeout=config.handshake_timeout_ms / 1000 if self.tls else None)
        self._closer = asyncio.ensure_future(self._close_on_stop())
        if self.brokers is not None:
            self.brokers.start(lambda: cluster_broker_groups(self.ctx))
            if self.ctx.routes is not None:  # one protocol per group across the cluster
                group_protocols.install(self.ctx, self.brokers)
        self._txn_recovery = start_transaction_recovery(self.ctx)
        logger.info("kafka front door listening on %s:%d (%s, advertised as %s:%d)",
                    self.host, self.port, "plaintext" if self.tls is None else "TLS",
                    self.advertised_host, self.advertised_port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        peer = writer.get_extra_info("peername")
        peer_name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self.ctx.stopping or len(self.connections) >= self.ctx.config.max_connections:
            logger.warning("refused kafka connection from %s: %s", peer_name,
                           "the server is stopping" if self.ctx.stopping else
                           f"{len(self.connections)} kafka connections are open "
                           f"(max_connections)")
            writer.close()
            return
        if self.ctx.config.tls_client_ca_file and not writer.get_extra_info("peercert"):
            # The context asks for a certificate without requiring one (FMQ's port then
            # answers with an error frame); Kafka clients get the close Kafka gives them.
            logger.warning("refused kafka connection from %s: this server requires a client "
                           "certificate (mutual TLS: ssl.certificate.location, "
                           "ssl.key.location)", peer_name)
            writer.close()
            return
        self._next_id -= 1
        session = KafkaSession(self.ctx, self._next_id, peer_name, self.advertised_host,
                               self.advertised_port, brokers=self.brokers,
                               tls=self.tls is not None, counters=self.counters)
        connection = KafkaConnection(session, reader, writer)
        self.connections.add(connection)
        self.counters.connections = len(self.connections)
        logger.info("kafka connection %s opened", peer_name)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)
            self.counters.connections = len(self.connections)
            logger.info("kafka connection %s closed", peer_name)

    async def _close_on_stop(self) -> None:
        # The server's shutdown starts with the stop request; new Kafka connections and
        # requests end there too, while the requests running finish like FMQ's own.
        await self.ctx.stop_requested.wait()
        self.close()

    def close(self) -> None:
        """Stop accepting and reading; every connection closes once the requests it sent
        are answered."""
        if self._server is not None:
            self._server.close()
        if self.brokers is not None:
            self.brokers.stop()
        if self._txn_recovery is not None:
            self._txn_recovery.cancel()
        close_links(self.ctx)
        for connection in list(self.connections):
            connection.stop()
