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
from dataclasses import dataclass

from fmq.client.auth import Credentials, resolve_credentials
from fmq.client.tls import TLSOptions
from fmq.engine.broker import Broker
from fmq.errors import FMQError
from fmq.index.entries import EpochEntry
from fmq.index.epochs import last_epoch
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


#: The ``follow`` of a node that waits for an election (etcd): a follower without a
#: primary yet (it takes no writes and copies nothing).
UNKNOWN_PRIMARY = "unknown:0"


@dataclass(frozen=True)
class RoleChange:
    """The role a node takes next: follow ``follow`` ("" = become the primary, with
    ``epoch``, or one above the highest the log knows), after cutting its log at ``cut_at``
    (None: no cut)."""

    follow: str
    cut_at: int | None = None
    epoch: int | None = None
    node: str = ""

    def describe(self) -> str:
        if not self.follow:
            return "becoming the primary"
        if self.follow == UNKNOWN_PRIMARY:
            return "waiting for an election as a follower"
        cut = "" if self.cut_at is None else f" after cutting the log at {self.cut_at}"
        return f"following {self.follow}{cut}"


class ReplicationRole:
    """``primary`` is the address of the group's primary as this node knows it: None on the
    primary itself, "" while unknown (an election), else the address it follows."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
        cfg = broker.config
        self.broker = broker
        #: The address this round copies from (fixed until the next role change).
        self.following = "" if cfg.follow == UNKNOWN_PRIMARY else cfg.follow
        self.primary: str | None = self.following if cfg.follow else None
        self.ack_mode = cfg.ack_mode
        self.replicas = ReplicaSet(lambda: broker.replica.flushed_offset, cfg.min_insync,
                                   cfg.max_lag_bytes, cfg.max_lag_ms)
        #: Called with a log offset by everything that acknowledges a write, in ``sync``
        #: mode on a primary; None otherwise (``async`` pays nothing).
        self.wait_replicated: Callable[[int], None] | None = (
            self.replicas.wait_replicated if cfg.ack_mode == "sync" and not cfg.follow
            else None)
        self.follower: Follower | None = None
        #: The high watermark: on a follower always (its primary's, learned from each
        #: fetch answer), on a primary in ``sync`` mode (what ``min_insync`` followers
        #: hold). An ``async`` primary shows consumers its whole durable log.
        self.gated = bool(cfg.follow) or (cfg.ack_mode == "sync" and cfg.min_insync > 0)
        if self.gated:
            broker.replica.gate_visibility()
        #: Per follower: the visible end its last fetch answer carried.
        self.told: dict[str, int] = {}
        #: The terms this log records (EPOCH records), oldest first; it changes only when
        #: the broker reopens in a new role.
        self.history: list[EpochEntry] = broker.replica.epoch_history()
        #: This node's name in the group (its address, set by the server as it starts).
        self.node = ""
        #: On a primary elected through etcd: whether it still holds the lease (None: no
        #: coordinator). Every write's answer checks it as it is released.
        self.lease_holds: Callable[[], bool] | None = None
        #: Set by the server: stop serving in this role and reopen in another.
        self.change_role: Callable[[RoleChange], None] | None = None
        self._loop = loop
        self._flushed = asyncio.Event()
        self._waiting = 0  # fetches waiting for the next flush

        def on_flushed(offset: int) -> None:
            if self._waiting:
                loop.call_soon_threadsafe(self._flushed.set)

        broker.replica.add_flush_listener(on_flushed)

    def start_follower(self, name: str, on_fatal: Callable[[FMQError], None],
                       access: tuple[ssl.SSLContext | None, Credentials | None]) -> None:
        """On a follower: start copying, reporting as ``name`` (this server's address),
        reaching the primary with ``access`` (from :func:`primary_access`)."""
        if self.primary is not None and self.following:
            self.follower = Follower(self.broker, self.following, name, on_fatal, *access,
                                     on_diverged=self._diverged)
            self.follower.start()

    def _diverged(self, cut_at: int) -> None:
        """The follower found records of an older term past ``cut_at``: cut and follow."""
        if self.change_role is not None:
            self.change_role(RoleChange(self.following, cut_at=cut_at))

    @property
    def epoch(self) -> int:
        """This node's newest epoch (0: its log has no EPOCH record)."""
        if self.follower is not None:  # it copies its primary's EPOCH records as they come
            return max(self.follower.epoch, last_epoch(self.history))
        return last_epoch(self.history)

    def acknowledges(self) -> bool:
        """Whether a write may be answered as done now: always, but on a primary elected
        through etcd that cannot prove it still holds the lease (fencing)."""
        return self.lease_holds is None or self.lease_holds()

    def stop(self) -> None:
        """Stop copying (blocking: call it from a thread, before the broker closes)."""
        if self.follower is not None:
            self.follower.stop()

    def visible_end(self) -> int:
        """The offset below which consumers of this primary read (its high watermark)."""
        replica = self.broker.replica
        end = replica.visible_end
        return replica.flushed_offset if end is None else end

    def note_report(self) -> None:
        """A follower reported (event loop): move the high watermark to what
        ``min_insync`` followers now hold, and wake the fetches waiting to tell it."""
        if not self.gated or self.primary is not None:
            return
        replicated = self.replicas.replicated_end()
        replica = self.broker.replica
        before = replica.visible_end
        if replicated is not None:
            replica.advance_visible(min(replicated, replica.flushed_offset))
        if self._waiting and replica.visible_end != before:
            self._flushed.set()

    async def wait_flushed_past(self, offset: int, timeout: float, told: int | None = None
                                ) -> None:
        """Wait until the primary's durable end is past ``offset``, or its visible end is
        past ``told`` (when given), or ``timeout``."""
        self._waiting += 1
        try:
            deadline = self._loop.time() + timeout
            replica = self.broker.replica
            while replica.flushed_offset <= offset:
                self._flushed.clear()
                if replica.flushed_offset > offset:
                    break
                if told is not None and self.visible_end() > told:
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
        replica = self.broker.replica
        if self.primary is not None:
            status = {"role": "follower", "durable_end": replica.flushed_offset,
                      "primary": self.primary, "epoch": self.epoch, "node": self.node}
            if self.follower is not None:
                status.update(self.follower.describe())
                # The name the primary's in-sync set lists it under (its address, not
                # its node name): the group view matches the two by it.
                status["reports_as"] = self.follower.name
            status.update(primary=self.primary, epoch=self.epoch)
            return status
        return {"role": "primary", "epoch": self.epoch, "node": self.node,
                "ack_mode": self.ack_mode, "visible_end": self.visible_end(),
                "first_offset": replica.first_offset,
                "first_segment_size": replica.first_segment_size,
                **self.replicas.describe()}
