"""This server's part in a broker group: a primary's followers (and its ``sync``
acknowledgement), or, on a follower, the thread copying the primary's log.

Built when the server starts (:meth:`ServerContext.attach`). On a primary it also wakes the
followers' fetches that wait on the event loop for the next flush: the log's
``on_flushed`` is chained (after the dispatcher's) and posts to the loop only while a fetch
waits, so a primary without followers pays one attribute read per flush.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from fmq.client.auth import Credentials, resolve_credentials
from fmq.client.tls import TLSOptions
from fmq.engine.broker import Broker
from fmq.errors import FMQError
from fmq.replication.follower import Follower
from fmq.replication.insync import ReplicaSet
from fmq.server.config import ServerConfig


def primary_access(config: ServerConfig) -> tuple[ssl.SSLContext | None, Credentials | None]:
    """How a follower reaches its primary: the TLS context (None: plaintext) and the
    credentials it logs in with (None: no log-in). Unusable files or a user without a
    password are refused here, when the server starts."""
    tls = None
    if config.follow_tls:
        tls = TLSOptions(ca_file=None if config.follow_tls == "system" else config.follow_tls,
                         cert_file=config.follow_cert_file or None,
                         key_file=config.follow_key_file or None).context()
    credentials = None
    if config.follow_user:
        credentials = resolve_credentials(config.follow_user, None,
                                          config.follow_password_file or None)
    return tls, credentials


class ReplicationRole:
    """``primary`` is the address this server follows (None: it is a primary)."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
        cfg = broker.config
        self.broker = broker
        self.primary: str | None = cfg.follow or None
        self.ack_mode = cfg.ack_mode
        self.replicas = ReplicaSet(lambda: broker.log.flushed_offset, cfg.min_insync,
                                   cfg.max_lag_bytes, cfg.max_lag_ms)
        #: Called with a log offset by everything that acknowledges a write, in ``sync``
        #: mode on a primary; None otherwise (``async`` pays nothing).
        self.wait_replicated: Callable[[int], None] | None = (
            self.replicas.wait_replicated if cfg.ack_mode == "sync" and not cfg.follow
            else None)
        self.follower: Follower | None = None
        self._loop = loop
        self._flushed = asyncio.Event()
        self._waiting = 0  # fetches waiting for the next flush
        previous = broker.log.on_flushed

        def on_flushed(offset: int) -> None:
            if previous is not None:
                previous(offset)
            if self._waiting:
                loop.call_soon_threadsafe(self._flushed.set)

        broker.log.on_flushed = on_flushed

    def start_follower(self, name: str, on_fatal: Callable[[FMQError], None],
                       access: tuple[ssl.SSLContext | None, Credentials | None]) -> None:
        """On a follower: start copying, reporting as ``name`` (this server's address),
        reaching the primary with ``access`` (from :func:`primary_access`)."""
        if self.primary is not None:
            self.follower = Follower(self.broker, self.primary, name, on_fatal, *access)
            self.follower.start()

    def stop(self) -> None:
        """Stop copying (blocking: call it from a thread, before the broker closes)."""
        if self.follower is not None:
            self.follower.stop()

    async def wait_flushed_past(self, offset: int, timeout: float) -> None:
        """Wait until the primary's durable end is past ``offset``, or ``timeout``."""
        self._waiting += 1
        try:
            deadline = self._loop.time() + timeout
            while self.broker.log.flushed_offset <= offset:
                self._flushed.clear()
                if self.broker.log.flushed_offset > offset:
                    break
                remaining = deadline - self._loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._flushed.wait(), remaining)
                except TimeoutError:
                    break
        finally:
            self._waiting -= 1

    def describe(self) -> dict:
        """REPL_STATUS: the role, and the followers or the copy's progress."""
        log = self.broker.log
        if self.primary is not None:
            status = {"role": "follower", "durable_end": log.flushed_offset}
            if self.follower is not None:
                status.update(self.follower.describe())
            return status
        first = log.segments[0] if log.segments else None
        return {"role": "primary", "ack_mode": self.ack_mode, "first_offset": log.first_offset,
                "first_segment_size": first.size if first is not None else 0,
                **self.replicas.describe()}
