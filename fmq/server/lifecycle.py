"""Running a server process: bind the port, open the broker, serve, and reopen the broker in
another role when the node's role in its broker group changes.

A role change (a follower promoted, a follower that must cut an older term's records, an
elected or deposed primary) stops the :class:`~fmq.server.server.Server` gracefully (the
follower thread stops, requests in flight are answered, the broker closes), cuts the log
if asked, reopens the broker in the new role and serves again on the **same** listening
socket: clients connecting meanwhile wait in its backlog, clients whose connection closed
reconnect (docs/replication.md, *Role changes*). A new primary writes its EPOCH record
(:func:`fmq.replication.term.start_term`) before the server answers anything.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from fmq.admin.repair import cut_log
from fmq.config import BrokerConfig
from fmq.coordination.coordinator_url import parse_coordinator
from fmq.engine.broker import Broker
from fmq.errors import ConfigError, InvalidArgument, ReplicationError
from fmq.replication.term import open_as_primary
from fmq.security import UserStore
from fmq.server.cluster.election import Elector
from fmq.server.cluster.replica_role import RoleChange
from fmq.server.cluster.route_membership import RouteMembership
from fmq.server.cluster.scope_decision_links import attach_scope_decisions
from fmq.server.config import ServerConfig
from fmq.server.event_loop import resolve_event_loop, run_on_event_loop
from fmq.server.gc_policy import tune_for_serving
from fmq.server.net.descriptors import fit_connections
from fmq.server.net.exposure import check_exposure
from fmq.server.net.listener import bind_listener
from fmq.server.net.tls import server_context
from fmq.server.server import Server
from fmq.server.sidecars import CompanionFactory

logger = logging.getLogger("fmq.server")


def open_in_role(data_dir: str, config: BrokerConfig, change: RoleChange | None) -> Broker:
    """Open the broker for its next role: cut the log first when ``change`` says so; a new
    primary starts its term (the EPOCH record, fdatasync'd) before it is returned."""
    if change is not None and change.cut_at is not None:
        try:
            cut = cut_log(data_dir, change.cut_at)
        except InvalidArgument as exc:  # the log is left as it was
            raise ReplicationError(
                f"this log cannot be cut back to continue {change.follow}'s: offset "
                f"{change.cut_at}, where this node's last term ends in that log, is not a "
                f"record boundary here ({exc}), so the two logs differ before it; stop this "
                f"node, move its data directory aside and start it with an empty one: it "
                f"copies the primary's log (docs/replication.md, Epochs and truncation)"
            ) from exc
        logger.warning("cut the log at %d (records of an older term, kept in %s; `fmq log "
                       "repair --undo` puts them back); the index is rebuilt from the log",
                       change.cut_at, cut.repair_dir)
    if change is None or change.follow:
        return Broker.open(data_dir, config)
    broker, entry = open_as_primary(data_dir, config, change.epoch or 0, change.node)
    logger.info("primary of epoch %d (node %s) from log offset %d", entry.epoch,
                entry.node, entry.start)
    return broker


def _serve_once(broker: Broker, server_config: ServerConfig, listener: socket.socket,
                on_listening: Callable[[str, int], None] | None,
                elector: Elector | None, membership: RouteMembership | None,
                companions: list[CompanionFactory]) -> Server:
    rec = broker.recovery
    logger.info("recovery: replayed %d records from offset %d, %d open transactions, "
                "torn tail %s", rec.records_replayed, rec.start_offset,
                rec.open_transactions, rec.torn_tail)
    # After the broker opened its segments and index: they count as in use. Connections
    # that have not sent a request yet hold descriptors too.
    connections = fit_connections(server_config.max_connections,
                                  server_config.descriptor_reserve
                                  + server_config.max_pending_connections)
    if connections != server_config.max_connections:
        server_config = server_config.replace(max_connections=connections)
    # The server closes the socket it serves on; the process keeps the bound one.
    server = Server(broker, server_config, listener.dup())
    server.on_listening = on_listening
    server.ctx.routes = membership

    def on_role(role: Any) -> None:
        if elector is not None:
            elector.attach(role)
        if membership is not None:
            membership.attach(server.ctx)
            attach_scope_decisions(server.ctx)

    server.on_role = on_role
    server.sidecars.factories = companions
    logger.info("event loop: %s", resolve_event_loop(server_config.event_loop))
    tune_for_serving()
    try:
        run_on_event_loop(server.serve(), server_config.event_loop)
    finally:
        if elector is not None:
            elector.detach()
        if membership is not None:
            membership.detach()
    return server


def run_server(data_dir: str, broker_config: Any = None,
               server_config: ServerConfig | None = None,
               on_listening: Callable[[str, int], None] | None = None,
               insecure: bool = False,
               companions: list[CompanionFactory] | None = None) -> None:
    """Bind the port, open the broker (running recovery), serve until SIGINT/SIGTERM, close
    cleanly; reopen in a new role as often as the node's role changes. The port is bound
    first so that a clash is reported before a long recovery. Raises DataDirLocked when
    another process holds ``data_dir``, ConfigError when it has no users and
    ``server_config.host`` is not loopback (unless ``insecure``). ``companions``: services
    started beside each round's server (the console: fmq.console)."""
    server_config = server_config or ServerConfig()
    broker_config = broker_config or BrokerConfig()
    server_context(server_config)  # unreadable TLS files are reported before anything else
    if server_config.coordinator:
        if broker_config.follow:
            raise ConfigError("follow and coordinator exclude each other: with a coordinator "
                              "the leader key in etcd says whom to follow; drop --follow")
        parse_coordinator(server_config.coordinator)
    has_users = UserStore(data_dir).has_users if os.path.isdir(data_dir) else False
    check_exposure(server_config.host, has_users, insecure, data_dir)
    listener = bind_listener(server_config.host, server_config.port)
    broker: Broker | None = None
    change: RoleChange | None = None
    elector: Elector | None = None
    membership: RouteMembership | None = None
    try:
        if server_config.coordinator:
            # Serves from routes.json and catches up: etcd need not answer yet.
            membership = RouteMembership(server_config, data_dir)
            address = f"{server_config.host}:{listener.getsockname()[1]}"
            elector = Elector(server_config, broker_config, address)
            broker_config = broker_config.replace(follow=elector.initial_follow())
            elector.start()
        visible: int | None = None  # the high watermark of the previous role
        while True:
            broker = open_in_role(data_dir, broker_config, change)
            if membership is not None:  # the data directory is ours now (its lock)
                membership.start()
            if visible is not None:  # a new primary shows no more than it was shown
                broker.replica.resume_visible_at(visible)
            server = _serve_once(broker, server_config, listener, on_listening, elector,
                                 membership, companions or [])
            broker.close()  # no-op after a graceful shutdown
            visible = broker.replica.visible_end
            if server.replication_failed is not None:
                raise server.replication_failed
            change = server.role_change
            if change is None:
                return
            broker_config = broker_config.replace(follow=change.follow)
            if server_config.port == 0:  # the next round serves the port this one had
                server_config = server_config.replace(port=server.port)
            logger.info("role change: %s", change.describe())
    finally:
        if elector is not None:
            elector.stop()
        if membership is not None:
            membership.stop()
        listener.close()  # asyncio closed its copy; this covers an earlier error
        if broker is not None:
            broker.close()  # releases the directory after an error
