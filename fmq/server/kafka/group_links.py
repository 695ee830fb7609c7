"""A consumer group coordinator's links to the primaries of the cluster's other broker
groups, over FMQ's own protocol: what it forwards there (commits and committed offsets of
the partitions those groups host, :mod:`.group_remote_offsets`) is asked as FMQ's routing
consumer asks it, on one pipelined connection per broker group
(:class:`~fmq.client.aio_connection.AsyncConnection`, on the server's event loop: no thread
waits for another group).

A link logs in as the node logs in to its own primary (``follow_user``,
``follow_password_file``, ``follow_tls``, ...), the cluster's internal user: it needs
``commit-offsets``, ``consume`` and ``describe`` on the consumer groups of Kafka clients
(docs/kafka.md, *Consumer groups over broker groups*). The primary's address is the one
the node's copy of the cluster has (``routes.json``, from each group's leader key); a link
that fails (the primary died, moved, or never answered) is dropped and the node re-reads
the cluster at once, so the next request goes to the new primary.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from fmq.client.aio_connection import AsyncConnection, find_node
from fmq.client.discovery import PRIMARY, Finder, address_of
from fmq.errors import FMQError, PrimaryNotFound
from fmq.protocol import Op
from fmq.server.cluster.replica_role import primary_access
from fmq.server.context import ServerContext

logger = logging.getLogger("fmq.server.kafka")

#: Bounds of one forwarded request, well inside Kafka clients' own request time-outs
#: (30 s and more), so they hear a retriable error rather than a time-out of their own.
CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 5.0
#: Requests in flight on one link (a commit of many partitions is pipelined).
MAX_IN_FLIGHT = 64


class BrokerGroupLinks:
    """One FMQ connection to the primary of each other broker group, made on first use."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self._links: dict[str, AsyncConnection] = {}
        self._making: dict[str, asyncio.Lock] = {}

    def primary(self, broker_group: str) -> str:
        """``broker_group``'s primary as this node's copy of the cluster names it ("" while
        it has none)."""
        routes = self.ctx.routes
        known = routes.snapshot.groups.get(broker_group) if routes is not None else None
        return known.primary if known is not None else ""

    async def request(self, broker_group: str, op: Op, fields: dict[str, Any]) -> dict:
        """``op`` answered by ``broker_group``'s primary; raises FMQError (retriable when
        the primary is away, has moved, or did not answer in time)."""
        link = await self._link(broker_group)
        try:
            return await link.request(op, fields, REQUEST_TIMEOUT_S)
        except FMQError as exc:
            if exc.retriable:
                self.drop(broker_group, link)
            raise

    async def _link(self, broker_group: str) -> AsyncConnection:
        lock = self._making.setdefault(broker_group, asyncio.Lock())
        async with lock:  # one connection made per group at a time
            text = self.primary(broker_group)
            address = address_of(text) if text else None
            if address is None:
                self._poke()
                raise PrimaryNotFound(f"broker group {broker_group!r} has no primary now "
                                      f"(an election, or its primary is down); retry")
            link = self._links.get(broker_group)
            if link is not None and not link.closed and link.address == address:
                return link
            if link is not None:
                await link.close()
            tls, credentials = primary_access(self.ctx.config)
            try:
                link, _ = await find_node(Finder([address], PRIMARY), CONNECT_TIMEOUT_S,
                                          MAX_IN_FLIGHT, tls, credentials,
                                          REQUEST_TIMEOUT_S, lambda rounds: 0.1)
            except FMQError as exc:
                if exc.retriable:
                    self._poke()
                raise
            self._links[broker_group] = link
            logger.info("kafka group coordinator: linked to broker group %s's primary at %s",
                        broker_group, text)
            return link

    def drop(self, broker_group: str, link: AsyncConnection) -> None:
        """Forget a link that failed; the cluster is read again (its primary may have
        moved)."""
        if self._links.get(broker_group) is link:
            del self._links[broker_group]
            asyncio.ensure_future(link.close())
        self._poke()

    def _poke(self) -> None:
        if self.ctx.routes is not None:
            self.ctx.routes.poke()

    async def close(self) -> None:
        links, self._links = self._links, {}
        for link in links.values():
            await link.close()


_LINKS: weakref.WeakKeyDictionary[ServerContext, BrokerGroupLinks] = (
    weakref.WeakKeyDictionary())


def links_of(ctx: ServerContext) -> BrokerGroupLinks:
    """The links of the server whose context is ``ctx``, made at the first use."""
    found = _LINKS.get(ctx)
    if found is None:
        found = _LINKS[ctx] = BrokerGroupLinks(ctx)
    return found


def close_links(ctx: ServerContext) -> None:
    """Close the links of the server whose context is ``ctx`` (it stops), if it made any."""
    found = _LINKS.pop(ctx, None)
    if found is not None:
        asyncio.ensure_future(found.close())
