"""Server limits and the ``--config FILE`` loader.

The config file is TOML (a name ending in ``.toml``) or one JSON object: BrokerConfig field
names at the top level (see :class:`fmq.config.BrokerConfig`), and optionally a ``server``
table (JSON: object) with :class:`ServerConfig` field names. :func:`effective_config` says
where each value of the result came from. Unknown names are an error, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fmq.config import BrokerConfig, build_config, coerce_fields, read_config_file, require
from fmq.errors import ConfigError
from fmq.server.event_loop import resolve_event_loop

MiB = 1024 * 1024


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 9876
    #: Port of the Prometheus metrics endpoint (``/metrics``); 0 = no endpoint (default).
    metrics_port: int = 0
    #: Address the metrics endpoint listens on: loopback unless chosen otherwise.
    metrics_host: str = "127.0.0.1"
    #: Port of the Kafka front door (docs/kafka.md), on ``host``; 0 = off (default).
    kafka_port: int = 0
    #: The address Kafka clients are told to connect to (Metadata): "" = ``host``, 0 =
    #: ``kafka_port``. Set them when clients reach the server through another name or port.
    kafka_advertised_host: str = ""
    kafka_advertised_port: int = 0
    #: Port of the console in a browser (docs/console.md) on ``host`` (loopback while the
    #: data directory has no users); 0 = no console (default).
    console_port: int = 0
    #: How often the console samples the node's figures and traffic (its charts and
    #: rates) and, at most, recounts the topics' sizes for its pages (docs/console.md).
    console_sample_ms: int = 5_000
    #: Largest frame accepted (the length field); bigger → error response, connection closed.
    max_frame_size: int = 64 * MiB
    #: Established connections (that sent a complete request) open at once; one more gets
    #: a ServerBusy error and is closed. Lowered at start (with a warning) when it does not
    #: fit under the open-file limit.
    max_connections: int = 1024
    #: Descriptors kept free beyond those open at start (and beyond max_connections and
    #: max_pending_connections), for new log segments, the directory fsync of a roll,
    #: checkpoints and the event loop (docs/operations.md).
    descriptor_reserve: int = 64
    #: Connections that have not sent a complete request yet; a new one beyond this closes
    #: the oldest of them, so half-open connections cannot lock real clients out.
    max_pending_connections: int = 128
    #: A new connection must complete its first request within this, or it is closed.
    handshake_timeout_ms: int = 10_000
    #: A frame whose first bytes arrived must be complete within this, or the connection is
    #: closed (0 = no limit). Time spent waiting for the request budget does not count.
    read_timeout_ms: int = 60_000
    #: Replies the peer does not read: when none of its unsent reply bytes drained for this
    #: long, the connection is closed (0 = no limit).
    write_timeout_ms: int = 60_000
    #: A connection with no request running that sent nothing for this long is closed
    #: (0 = never).
    idle_timeout_ms: int = 600_000
    #: Request bytes held per connection: frames being received (counted at their declared
    #: length from the moment their length is read) and requests running. Over it, the
    #: connection is not read until its requests finish. At least max_frame_size.
    request_budget_per_connection: int = 64 * MiB
    #: Request bytes held by all connections together; over it, reading waits (first come,
    #: first served) instead of allocating.
    request_budget_total: int = 256 * MiB
    #: Largest PULL or QUERY_KEY answer, every field counted; at least one message is
    #: always sent, even when it alone is larger.
    max_reply_size: int = 8 * MiB
    #: A PULL whose records all lie in the log's last this many bytes (written lately, so
    #: in the page cache) is read on the event loop, without a thread hand-off; an older
    #: read goes to a reader thread, where a wait for the disk blocks nobody else. 0: every
    #: PULL in a reader thread.
    pull_on_loop_bytes: int = 64 * MiB
    #: Reply bytes held per connection: replies being built and replies not yet taken by the
    #: peer. A PULL or QUERY_KEY reserves its reply here before it reads anything.
    reply_budget_per_connection: int = 32 * MiB
    #: Reply bytes held by all connections together.
    reply_budget_total: int = 256 * MiB
    #: Requests one connection may have in flight; beyond it → ServerBusy (retriable).
    max_in_flight: int = 256
    #: Threads running blocking broker calls (fsync waits, LMDB). Many threads let requests
    #: of every connection join one group commit.
    worker_threads: int = 64
    #: Separate threads for feedback long polls, so they never starve sends.
    long_poll_threads: int = 16
    #: Threads for reads (PULL, FETCH_OFFSET, QUERY_KEY, OFFSET_FOR_TIME, QUEUE_RANGE):
    #: a pool of their own, so many consumers never queue ahead of sends and commits.
    read_threads: int = 16
    #: Messages one SEND_BATCH may carry; more is refused (InvalidArgument) from the list
    #: count alone, before the messages are decoded.
    max_batch_messages: int = 10_000
    #: Longest wait_ms honoured for pull and feedback long polls.
    max_wait_ms: int = 30_000
    #: A consumer-group member that sends no heartbeat for this long is dropped.
    group_session_timeout_ms: int = 10_000
    #: Heartbeat interval the server asks group members to keep.
    group_heartbeat_interval_ms: int = 1_000
    #: Topics one consumer-group member may subscribe to (GROUP_JOIN / GROUP_HEARTBEAT /
    #: GROUP_SYNC).
    max_topics_per_member: int = 1_000
    #: Members one consumer group may have.
    max_members_per_group: int = 1_000
    #: Group memberships one connection may hold (every group it joined, every member id).
    max_members_per_connection: int = 32
    #: On SIGTERM/SIGINT, in-flight requests get this long to finish.
    shutdown_grace_ms: int = 30_000
    #: The event loop: ``auto`` (uvloop when installed, else asyncio), ``asyncio`` or
    #: ``uvloop``.
    event_loop: str = "auto"
    #: TLS on the client port (docs/security.md): the server's PEM certificate chain ("" =
    #: plaintext), its key ("" = in the certificate file), and a CA whose client
    #: certificates are required ("" = no client certificate asked: not mutual TLS).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    #: The slow-down after a failed authentication: the first failure is answered after
    #: this long, each further failure of the same connection or address after twice the
    #: previous wait, up to auth_failure_max_delay_ms.
    auth_failure_delay_ms: int = 100
    auth_failure_max_delay_ms: int = 5_000
    #: A follower's connection to its primary (docs/replication.md): follow_tls is ""
    #: (plaintext), "system" (TLS trusting the system's CAs) or a CA file to trust; a client
    #: certificate for mutual TLS; the user it logs in as, its password read from
    #: follow_password_file ("" = the FMQ_PASSWORD variable).
    follow_tls: str = ""
    follow_cert_file: str = ""
    follow_key_file: str = ""
    follow_user: str = ""
    follow_password_file: str = ""
    #: Fail-over (docs/replication.md): this node's name in its broker group ("" = its
    #: address, host:port); the etcd that elects the primary (etcd://HOST:PORT, "" = none);
    #: the group; the leader lease's time to live in seconds.
    node: str = ""
    coordinator: str = ""
    group: str = "default"
    lease_ttl_s: int = 10
    #: The cluster this node's group belongs to: with a coordinator, the users and access
    #: rules are the cluster's, kept in etcd and copied into security.json
    #: (docs/security.md); a change reaches a node at once through a watch, and a re-read
    #: every security_resync_ms bounds how long a silently stalled watch can hide one.
    cluster: str = "fmq"
    security_resync_ms: int = 10_000
    #: With a coordinator, the topics' routes of the cluster are followed the same way
    #: (docs/cluster.md): a watch, and a re-read every route_resync_ms.
    route_resync_ms: int = 10_000

    def __post_init__(self) -> None:
        coerce_fields(self, "invalid server configuration")

        def need(ok: bool, what: str) -> None:
            require(ok, what, "server configuration")

        need(0 <= self.port <= 65_535, "port must be in 0..65535")
        need(0 <= self.metrics_port <= 65_535, "metrics_port must be in 0..65535 (0 = off)")
        need(0 <= self.kafka_port <= 65_535, "kafka_port must be in 0..65535 (0 = off)")
        need(0 <= self.kafka_advertised_port <= 65_535,
             "kafka_advertised_port must be in 0..65535 (0 = kafka_port)")
        need(0 <= self.console_port <= 65_535, "console_port must be in 0..65535 (0 = off)")
        need(100 <= self.console_sample_ms <= 600_000,
             "console_sample_ms must be in 100..600000 (ms between two samples)")
        need(4096 <= self.max_frame_size <= 0xFFFF_FFFF,
             "max_frame_size must be in 4096..4294967295")
        for name in ("max_connections", "max_in_flight", "worker_threads", "long_poll_threads",
                     "read_threads", "max_batch_messages", "group_session_timeout_ms",
                     "group_heartbeat_interval_ms", "max_topics_per_member",
                     "max_members_per_group", "max_members_per_connection",
                     "max_pending_connections", "handshake_timeout_ms"):
            need(getattr(self, name) >= 1, f"{name} must be >= 1")
        for name in ("read_timeout_ms", "write_timeout_ms", "idle_timeout_ms"):
            need(getattr(self, name) >= 0, f"{name} must be >= 0 (0 = no limit)")
        need(self.request_budget_per_connection >= self.max_frame_size,
             "request_budget_per_connection must be at least max_frame_size (a largest "
             "frame must fit)")
        need(self.request_budget_total >= self.request_budget_per_connection,
             "request_budget_total must be at least request_budget_per_connection")
        need(self.max_reply_size >= 64 * 1024, "max_reply_size must be at least 65536")
        need(self.reply_budget_per_connection >= self.max_reply_size,
             "reply_budget_per_connection must be at least max_reply_size")
        need(self.reply_budget_total >= self.reply_budget_per_connection,
             "reply_budget_total must be at least reply_budget_per_connection")
        need(self.max_wait_ms >= 0, "max_wait_ms must be >= 0")
        need(self.pull_on_loop_bytes >= 0, "pull_on_loop_bytes must be >= 0 (0: every PULL "
             "in a reader thread)")
        need(self.descriptor_reserve >= 16, "descriptor_reserve must be >= 16")
        need(self.shutdown_grace_ms >= 0, "shutdown_grace_ms must be >= 0")
        resolve_event_loop(self.event_loop)  # an unknown or missing loop fails at start
        need(0 <= self.auth_failure_delay_ms <= self.auth_failure_max_delay_ms,
             "auth_failure_delay_ms must be in 0..auth_failure_max_delay_ms")
        need(self.lease_ttl_s >= 3, "lease_ttl_s must be >= 3")
        need(bool(self.group), "group must not be empty")
        need(bool(self.cluster) and "/" not in self.cluster,
             "cluster must be a non-empty name without '/'")
        need(self.security_resync_ms >= 100, "security_resync_ms must be >= 100")
        need(self.route_resync_ms >= 100, "route_resync_ms must be >= 100")
        need(self.group_heartbeat_interval_ms < self.group_session_timeout_ms,
             "group_heartbeat_interval_ms must be below group_session_timeout_ms")

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **changes)


def load_config(path: str | None) -> tuple[BrokerConfig, ServerConfig]:
    """Read ``path`` (None → defaults) into a broker and a server configuration."""
    if path is None:
        return BrokerConfig(), ServerConfig()
    data = dict(read_config_file(path))
    server = data.pop("server", {})
    if not isinstance(server, dict):
        raise ConfigError(f"config file {path}: \"server\" must be a JSON object "
                          f"(a [server] table in TOML)")
    return (build_config(BrokerConfig, data, f"broker config in {path}"),
            build_config(ServerConfig, server, f"\"server\" config in {path}"))


def effective_config(path: str | None,
                     overrides: dict[str, tuple[Any, str]] | None = None) -> list[dict]:
    """Every setting the server would run with, and where each came from: one row per field
    (``section`` "broker" or "server", ``key``, ``value``, ``source``: "default", the config
    file, or the name given with an override). ``overrides`` maps ServerConfig field names
    to (value, source), as the command line's --host and --port."""
    data = dict(read_config_file(path)) if path is not None else {}
    server_data = data.get("server", {})
    broker, server = load_config(path)
    changes = {k: v for k, (v, _) in (overrides or {}).items()}
    if changes:
        server = server.replace(**changes)
    rows = []
    for section, config, given in (("broker", broker, data), ("server", server, server_data)):
        for f in dataclasses.fields(config):
            source = "default"
            if f.name in given:
                source = f"config file {path}"
            if section == "server" and f.name in (overrides or {}):
                source = overrides[f.name][1]
            rows.append({"section": section, "key": f.name, "value": getattr(config, f.name),
                         "source": source})
    return rows
