"""The follower's copying thread: fetch from the primary, check, append, fdatasync, repeat.

Each fetch asks for the log from this broker's durable end, which reports that offset to
the primary (RocketMQ's HA model: the slave reports its max durable offset, the master
sends from there). A chunk is written only after every record in it passed its checks
(:func:`~fmq.replication.chunks.verify_chunk`); a chunk that fails is dropped, the
connection is closed and the same offset is asked for again on a new one. Records are
appended with the log's group commit, then fdatasync'd; they go to the same dispatcher
(the LMDB index), the same transaction redo and the same dedup window of idempotent sends
as recovery uses, so the follower's index, open transactions and dedup window are those
the primary has (a producer retrying on a promoted follower is answered from it).

Each connection starts with the epoch check (KIP-101): the follower asks where its own
last epoch ends in the primary's log (EPOCH_END), and asks again for an older epoch while
the primary answers one this log does not hold (KIP-279). When the primary is in a newer
term and this log holds records past the last point both logs agree on (written by an
older primary, never acknowledged in ``sync`` mode), ``on_diverged`` gets the offset to
cut at: the server reopens the broker after cutting the log there
(:func:`fmq.replication.term.divergence_point`). A node in an older term than
this one is not followed (StalePrimary, retried with back-off).

A primary that no longer holds the follower's offset (retention) or whose log does not
continue the follower's (divergence in one term) ends the thread: ``on_fatal`` gets the
error, which tells the operator what to do.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from functools import partial

from fmq.client.auth import Credentials, log_in
from fmq.client.connection import Connection, parse_servers
from fmq.engine.broker import Broker
from fmq.errors import (
    BadRecord,
    ConnectionLost,
    FMQError,
    IncompleteRecord,
    LogFailed,
    ProtocolError,
    ReplicaBehindRetention,
    ReplicaDiverged,
    SecurityError,
    StalePrimary,
)
from fmq.index.epochs import last_epoch
from fmq.protocol import Op
from fmq.replication.chunks import verify_chunk
from fmq.replication.term import divergence_point
from fmq.threadname import name_os_thread

logger = logging.getLogger("fmq.replication")

#: Bytes asked for in one fetch (a single larger record still comes whole).
FETCH_MAX_BYTES = 4 * 1024 * 1024
RETRY_INITIAL_S = 0.05
RETRY_MAX_S = 2.0


class Follower:
    """Copies the primary's log into ``broker`` until :meth:`stop`."""

    def __init__(self, broker: Broker, primary: str, name: str,
                 on_fatal: Callable[[FMQError], None], tls: ssl.SSLContext | None = None,
                 credentials: Credentials | None = None,
                 on_diverged: Callable[[int], None] | None = None) -> None:
        self.broker = broker
        self.tls = tls  # how to reach the primary: TLS, and the user to log in as
        self.credentials = credentials
        self.primary = primary
        self.name = name
        self.on_fatal = on_fatal
        self.on_diverged = on_diverged
        self.epoch = 0  # this log's newest epoch, sent with every fetch
        self.address = parse_servers(primary)[0]
        # Report at least twice per max_lag_ms, so an idle follower stays in sync.
        self.wait_ms = max(50, min(1000, broker.config.max_lag_ms // 3))
        self._stop = threading.Event()
        self._conn: Connection | None = None
        self.connected = False
        self.primary_end = 0  # the primary's durable end at the last answer
        self.rejected_chunks = 0  # chunks that failed their checks (never written)
        self.fetched_bytes = 0
        self.error: FMQError | None = None
        #: Whether fetches ask for the primary's high watermark (off once a primary that
        #: does not know the field refused it: then its durable end is the watermark).
        self.asks_visible = True
        self.primary_visible = 0  # the primary's visible end at the last answer
        self._thread = threading.Thread(target=self._run, name="fmq-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            conn.close()
        self._thread.join(10)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        name_os_thread()
        delay = RETRY_INITIAL_S
        while not self._stop.is_set():
            try:
                self._conn = Connection(self.address, connect_timeout=2.0, tls=self.tls)
                if self.credentials is not None:
                    log_in(partial(self._conn.request, timeout=10.0), self.credentials)
                self.error = None
                logger.info("following %s from offset %d", self.primary,
                            self.broker.replica.flushed_offset)
                self.connected = True
                if not self._check_epoch(self._conn):
                    return
                while not self._stop.is_set():
                    self._fetch(self._conn)
                    delay = RETRY_INITIAL_S
            except (ReplicaBehindRetention, ReplicaDiverged, LogFailed) as exc:
                self.error = exc
                logger.error("stopped following %s: %s", self.primary, exc)
                self.on_fatal(exc)
                return
            except (BadRecord, IncompleteRecord) as exc:
                self.rejected_chunks += 1
                logger.warning("a chunk from %s failed its check and was not written (%s); "
                               "asking again on a new connection", self.primary, exc)
            except Exception as exc:  # noqa: BLE001 - a network error, or a bug: retry
                if self._stop.is_set():
                    return
                if isinstance(exc, ProtocolError) and self.asks_visible:
                    # A primary of an older release refuses the field it does not know:
                    # fetch without its high watermark (its durable end stands for it).
                    self.asks_visible = False
                    logger.warning("%s does not send its high watermark (%s); this "
                                   "follower's consumers read up to its durable end instead",
                                   self.primary, exc)
                    continue
                if isinstance(exc, (SecurityError, StalePrimary)):  # fmq replica status shows it
                    self.error = exc
                if isinstance(exc, (FMQError, OSError)):
                    logger.warning("replication from %s interrupted (%s); retrying in "
                                   "%.2fs", self.primary, exc, delay)
                else:
                    logger.exception("replication from %s failed unexpectedly; retrying in "
                                     "%.2fs", self.primary, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            finally:
                self.connected = False
                if self._conn is not None:
                    self._conn.close()

    def _fetch(self, conn: Connection) -> None:
        replica = self.broker.replica
        start = replica.flushed_offset
        answer = conn.request(Op.REPL_FETCH, {
            "follower": self.name, "epoch": self.epoch, "from_offset": start,
            "max_bytes": FETCH_MAX_BYTES, "wait_ms": self.wait_ms,
            "ask": {"visible_end": True} if self.asks_visible else None},
            timeout=self.wait_ms / 1000.0 + 30.0)
        self.primary_end = answer["durable_end"]
        visible = answer.get("visible")
        self.primary_visible = (visible["visible_end"] if visible is not None
                                else self.primary_end)
        data = answer["data"]
        if not data:
            self._show(start)
            return
        records = verify_chunk(data, start, answer["segment_base"], answer["segment_size"],
                               answer["segment_size"])
        epoch = replica.append_copy(start, answer["segment_base"], answer["segment_size"],
                                    data, records, self.primary_end)
        if epoch is not None:
            self.epoch = epoch
        self.fetched_bytes += len(data)
        self._show(replica.flushed_offset)

    def _show(self, durable: int) -> None:
        """Let this node's consumers read up to the primary's high watermark, never past
        what this node holds durably."""
        self.broker.replica.advance_visible(min(self.primary_visible, durable))

    def _check_epoch(self, conn: Connection) -> bool:
        """Compare epochs with the primary before the first fetch of a connection; False
        when this log must be cut first (``on_diverged`` was called)."""
        broker = self.broker
        broker.wait_indexed(30.0)  # the epoch history covers every record copied so far
        history = broker.replica.epoch_history()
        self.epoch = last_epoch(history)
        answer = conn.request(Op.EPOCH_END, {"epoch": self.epoch}, timeout=30.0)
        current = answer["current_epoch"]
        if current < self.epoch:
            raise StalePrimary(current, self.epoch)
        end = broker.replica.flushed_offset
        if current == self.epoch:  # one term: the fetch itself finds a divergence
            return True
        answers = {self.epoch: answer}

        def ask(epoch: int) -> tuple[int, int]:
            # Asked again (KIP-279) when this log does not hold the epoch answered.
            if epoch not in answers:
                answers[epoch] = conn.request(Op.EPOCH_END, {"epoch": epoch}, timeout=30.0)
                if answers[epoch]["current_epoch"] != current:
                    raise ConnectionLost(
                        f"{self.primary} moved from epoch {current} to epoch "
                        f"{answers[epoch]['current_epoch']} while this node asked where its "
                        "epochs end there; asking again on a new connection")
            return answers[epoch]["epoch"], answers[epoch]["end_offset"]

        cut = divergence_point(history, end, ask)
        if cut >= end:
            return True
        logger.warning("this log holds %d bytes past %d, where %s's log (epoch %d) goes on "
                       "differently (%d EPOCH_END questions): cutting them and following",
                       end - cut, cut, self.primary, current, len(answers))
        if self.on_diverged is None:
            raise ReplicaDiverged(cut, answer["end_offset"])
        self.on_diverged(cut)
        return False

    def describe(self) -> dict:
        """What REPL_STATUS says about this follower."""
        durable = self.broker.replica.flushed_offset
        return {"primary": self.primary, "connected": self.connected, "epoch": self.epoch,
                "durable_offset": durable, "primary_end": self.primary_end,
                "visible_end": self.broker.replica.visible_end,
                "lag_bytes": max(0, self.primary_end - durable),
                "rejected_chunks": self.rejected_chunks, "fetched_bytes": self.fetched_bytes,
                "error": None if self.error is None else str(self.error)}
