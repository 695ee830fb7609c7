"""The consumer: group membership, queue assignment, pipelined long-poll pulls, offsets,
and what the application does with the messages (nack, a handler loop, iteration)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from fmq.errors import BrokerClosed, FMQError, InvalidArgument, ProtocolError
from fmq.message import (
    StoredMessage,
    check_name,
    check_topic,
    parse_tag_expression,
    retry_topic,
)
from fmq.protocol import Op
from fmq.protocol.values import stored_from_wire

from .base import Client
from .cluster.consumers import BrokerGroupConsumers, broker_group_consumers
from .cluster.route_table import DEFAULT_ROUTE_REFRESH_S
from .consumer_io import commit_offsets, pull_wait_ms, reads_client
from .discovery import PRIMARY
from .repeated_failure import RepeatedFailure

logger = logging.getLogger("fmq.client")

STARTS = ("committed", "earliest", "latest")
Queue = tuple[str, int]


class Consumer(Client):
    """Reads ``topics`` as a member of consumer ``group``: the server gives each queue of a
    topic to one live member, and moves queues when members join, leave or stop
    heart-beating. Delivery is at-least-once: call :meth:`commit` after processing what
    :meth:`poll` returned; a queue that moves to another member resumes from the last
    commit.

    ``start`` decides where this consumer begins in a queue it gets:
    ``"committed"`` (default): the group's committed offset, or the queue's start when the
    group has none; ``"earliest"``: the queue's start (replay); ``"latest"``: only messages
    stored from now on. ``"earliest"``/``"latest"`` apply to each queue the first time this
    consumer gets it and ignore the committed offset.

    A message the application fails is handed back with :meth:`nack` (or by raising from the
    handler of :meth:`run`): the server delivers it again to this group only, after a
    back-off, through the group's retry topic, which the consumer also reads (``retries``
    False: not). Its ``reconsume_times`` counts the redeliveries; after the server's
    ``max_reconsume_times`` the next failure moves it to the group's dead-letter topic.

    ``tags``: a tag expression (``"a || b"``; ``"*"`` or None: every message). The server
    returns only the messages whose tags value is one of those tags; the others cost no
    network, and the consumer's position (and what :meth:`commit` records) moves past
    them all the same. Every member of a group should subscribe with the same expression.

    ``servers``: one address or several; the group and its commits live on the primary.
    ``follower_reads``: pulls go to the first server that answers (``read_server`` first),
    which may be a follower serving what it holds durably and indexed (docs/client.md).

    In a cluster, the consumer joins ``group`` on every broker group hosting queues of its
    topics, with one member id, and reads and commits each queue in its own group
    (:mod:`fmq.client.cluster.consumers`, docs/client.md; ``route_refresh_s``; ``routing``
    False: the servers given are the one group).
    """

    def __init__(self, servers: str | Sequence[str], group: str, topics: str | Sequence[str],
                 start: str = "committed", *, max_messages: int = 64, retries: bool = True,
                 tags: str | None = None, follower_reads: bool = False,
                 read_server: str | None = None, member_id: str | None = None,
                 routing: bool = True,
                 route_refresh_s: float = DEFAULT_ROUTE_REFRESH_S, **options: Any) -> None:
        options.setdefault("node", PRIMARY)
        super().__init__(servers, **options)
        #: What pulls go through: this client (the primary), or a follower reads' client.
        self._reads = reads_client(servers, options, read_server) if follower_reads else self
        #: The tag expression, None for every message (a plain PULL then).
        self.tags = tags if parse_tag_expression(tags) is not None else None
        check_name(group, "group", allow_none=False)
        self.group = group
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        for t in self.topics:
            check_topic(t)
        if not self.topics:
            raise InvalidArgument("a consumer needs at least one topic")
        #: The group's retry topic when this consumer reads it (None: it does not).
        self._retry_topic = retry_topic(group) if retries else None
        if retries and retry_topic(group) not in self.topics:
            self.topics.append(retry_topic(group))
        if start not in STARTS:
            raise InvalidArgument(f"start must be one of {', '.join(STARTS)}, not {start!r}")
        self.start = start
        self.max_messages = max_messages
        self.member_id: str | None = check_name(member_id, "member_id", allow_none=True)
        self.generation = -1
        self._lock = threading.Lock()  # guards _incoming (heartbeat thread)
        #: poll/commit/close may be called from several threads; they take turns.
        self._use = threading.RLock()
        self._assigned: list[Queue] = []  # applied by poll()
        #: The generation of the assignment applied: what GROUP_SYNC tells the server.
        self._applied = 0
        #: (generation, queues, connection) from the heartbeat thread, applied by poll().
        self._incoming: tuple[int, list[Queue], int] | None = None
        #: The connection (``connection_seq``) the applied assignment was answered on.
        self._assigned_on = 0
        #: Set to send the next heartbeat now: a queue was dropped, so the server may give
        #: it to its next owner (docs/cluster.md, "One reader per queue").
        self._beat_now = threading.Event()
        #: False once the server answered that it does not know GROUP_SYNC (an older one).
        self._sync = True
        self._positions: dict[Queue, int] = {}  # next offset to deliver
        self._committed: dict[Queue, int] = {}
        self._seen: set[Queue] = set()
        self._starts: dict[Queue, int] = {}  # where each queue was started at
        self._inflight: dict[Queue, tuple[int, Future]] = {}
        self._heartbeat_interval = 1.0
        self._stop = threading.Event()
        #: A pull's retriable failure, seen by the consumer of several broker groups.
        self.on_pull_error: Callable[[Queue, FMQError], None] | None = None
        #: Set when the topics' routes span broker groups: it reads in this one's place
        #: (its ``group_assignment()``, ``generations()``); None for one broker group.
        self.broker_groups: BrokerGroupConsumers | None = None
        if routing:
            one_group = {**options, "max_messages": max_messages, "retries": retries,
                         "tags": tags, "routing": False}
            try:
                self.broker_groups = broker_group_consumers(
                    self, route_refresh_s, lambda server, topics, mid:
                    Consumer(server, group, topics, start, member_id=mid, **one_group))
            except BaseException:
                super().close()  # refused (GroupProtocolConflict...): no connection left open
                raise
            if self.broker_groups is not None:
                self.member_id = self.broker_groups.member_id
                return
        try:
            self._join()
        except BaseException:
            super().close()  # refused (GroupProtocolConflict...): no connection left open
            raise
        self._hb = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                    name=f"fmq-heartbeat-{group}")
        self._hb.start()

    # ------------------------------------------------------------------ membership

    def _join(self) -> None:
        resp = self.call(Op.GROUP_JOIN, {"group": self.group, "member_id": self.member_id,
                                         "topics": self.topics})
        self.member_id = resp["member_id"]
        self._heartbeat_interval = resp["heartbeat_interval_ms"] / 1000
        self._take(resp["generation"], resp["assignment"])

    def _take(self, generation: int, assignment: list[dict]) -> None:
        queues = sorted((a["topic"], a["queue_id"]) for a in assignment)
        with self._lock:
            if generation != self.generation or queues != self._assigned:
                self.generation = generation
                self._incoming = (generation, queues, self.connection_seq)

    def _heartbeat_loop(self) -> None:
        failures = RepeatedFailure(logger, f"heartbeat of {self.member_id} in group "
                                           f"{self.group}")
        while True:
            self._beat_now.wait(self._heartbeat_interval)
            self._beat_now.clear()
            if self._stop.is_set():
                return
            try:
                self._take(*self._beat())
                failures.worked()
            except FMQError as exc:
                if not self._stop.is_set():
                    failures.failed(exc)

    def _beat(self) -> tuple[int, list[dict]]:
        """One heartbeat: GROUP_SYNC, which says the generation whose assignment this
        consumer reads now (so the server gives the queues it dropped to their next
        owner), or GROUP_HEARTBEAT to a server without it."""
        fields = {"group": self.group, "member_id": self.member_id, "topics": self.topics}
        if self._sync:
            try:
                resp = self.call(Op.GROUP_SYNC, {**fields, "generation": self._applied},
                                 retries=1)
                return resp["generation"], resp["assignment"]
            except ProtocolError as exc:
                if "unknown opcode" not in str(exc):
                    raise
                self._sync = False
        resp = self.call(Op.GROUP_HEARTBEAT, fields, retries=1)
        return resp["generation"], resp["assignment"]

    @property
    def assignment(self) -> list[Queue]:
        """Queues of ``topics`` this consumer reads now (the queues of the group's retry
        topic, read as well, are :attr:`retry_assignment`)."""
        with self._use:
            if self.broker_groups is not None:
                return self.broker_groups.assignment()
            self._apply_assignment()
            return [q for q in self._assigned if q[0] != self._retry_topic]

    @property
    def retry_assignment(self) -> list[Queue]:
        """Queues of the group's retry topic this consumer reads now."""
        with self._use:
            if self.broker_groups is not None:
                return self.broker_groups.retry_assignment()
            self._apply_assignment()
            return [q for q in self._assigned if q[0] == self._retry_topic]

    def _apply_assignment(self) -> None:
        with self._lock:
            taken, self._incoming = self._incoming, None
        # A membership lives on the connection that holds it: the server drops the member
        # when that connection closes (and a new primary never had it), so an assignment
        # answered on a connection since replaced is void, and nothing of it is read until
        # an answer on the new connection says what this consumer holds there.
        connection = self.connection_seq
        if taken is not None and taken[2] != connection:
            taken = None
        if taken is None:
            if not self._assigned or self._assigned_on == connection:
                return
            taken = (self._applied, [], connection)
            with self._lock:
                self.generation = -1  # the next answer is applied whatever it says
        generation, incoming, connection = taken
        old = set(self._assigned)
        try:
            starts = {q: self._start_position(q) for q in incoming if q not in old}
        except FMQError:
            with self._lock:  # try again at the next poll unless a newer assignment came
                if self._incoming is None:
                    self._incoming = taken
            raise
        dropped = old - set(incoming)
        for q in dropped:
            self._positions.pop(q, None)
            self._committed.pop(q, None)
            self._inflight.pop(q, None)  # a late answer is dropped
        self._positions.update(starts)
        self._starts.update(starts)
        self._seen.update(starts)
        self._assigned = incoming
        self._assigned_on = connection
        self._applied = generation
        if dropped:  # nothing more of them is delivered: tell the server at once
            self._beat_now.set()
        logger.info("consumer %s of group %s now reads %s", self.member_id, self.group,
                    ", ".join(f"{t}/{q}" for t, q in incoming) or "nothing")

    def _start_position(self, q: Queue) -> int:
        topic, qid = q
        first = q not in self._seen
        if self.start == "committed" or not first:
            off = self.call(Op.FETCH_OFFSET, {"group": self.group, "topic": topic,
                                              "queue_id": qid})["offset"]
            if off >= 0:
                self._committed[q] = off
                return off
        rng = self.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": qid})
        return rng["next_offset"] if self.start == "latest" and first else rng["min_offset"]

    # ------------------------------------------------------------------ reading

    def poll(self, timeout: float = 1.0) -> list[StoredMessage]:
        """Messages from the assigned queues, waiting up to ``timeout`` seconds for some.
        One pull per queue stays in flight on the server (long poll), so a message is
        delivered as soon as it is consumable."""
        with self._use:
            if self.broker_groups is not None:
                return self.broker_groups.poll(timeout)
            return self._poll(timeout)

    def _poll(self, timeout: float) -> list[StoredMessage]:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._start_pulls(pull_wait_ms(deadline))
            out = self._collect()
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            futures = self._pending()
            if futures:
                wait(futures, timeout=min(remaining, 0.5), return_when=FIRST_COMPLETED)
            else:
                time.sleep(min(remaining, 0.1))

    def _start_pulls(self, wait_ms: int) -> None:
        """Take the newest assignment and send a pull for each queue without one."""
        self._apply_assignment()
        for q in self._assigned:
            if q not in self._inflight:
                self._pull(q, wait_ms)

    def _pending(self) -> list[Future]:
        return [f for _o, f in self._inflight.values()]

    def _pull(self, q: Queue, wait_ms: int) -> None:
        offset = self._positions[q]
        req = {"topic": q[0], "queue_id": q[1], "offset": offset,
               "max_messages": self.max_messages, "wait_ms": wait_ms}
        try:
            if self.tags is None:
                fut = self._reads.submit(Op.PULL, req)
            else:
                fut = self._reads.submit(Op.PULL_TAGGED, dict(req, tags=self.tags))
        except FMQError as exc:
            # The server is unreachable; the heartbeat thread already says so once a second.
            logger.debug("pull of %s/%d failed: %s", q[0], q[1], exc)
            if self.on_pull_error is not None:
                self.on_pull_error(q, exc)
            time.sleep(self._backoff(1))
            return
        self._inflight[q] = (offset, fut)

    def _collect(self) -> list[StoredMessage]:
        out: list[StoredMessage] = []
        for q, (offset, fut) in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[q]
            try:
                resp = fut.result()
            except FMQError as exc:
                if not exc.retriable:
                    raise
                logger.debug("pull of %s/%d failed: %s; retrying", q[0], q[1], exc)
                if self.on_pull_error is not None:
                    self.on_pull_error(q, exc)
                continue
            if self._positions.get(q) != offset:
                continue  # the queue moved away and back meanwhile: stale answer
            if self._assigned_on != self.connection_seq:
                # The assignment is void (its connection was replaced, a fail-over among
                # them): the next one starts its queues at their committed offsets, so what
                # was read meanwhile would be delivered twice. Read again from there.
                continue
            msgs = [stored_from_wire(m) for m in resp["messages"]]
            if msgs:
                self._positions[q] = msgs[-1].queue_offset + 1
                out.extend(msgs)
            elif resp["min_offset"] > offset:
                self._positions[q] = resp["min_offset"]  # retention deleted what we wanted
            if resp.get("resume_offset", 0) > self._positions[q]:
                self._positions[q] = resp["resume_offset"]  # past what the filter skipped
        return out

    def commit(self) -> None:
        """Commit the position after everything :meth:`poll` returned so far."""
        with self._use:
            if self.broker_groups is not None:
                return self.broker_groups.commit()
            self._commit()

    def _commit(self) -> None:
        due = [(q, self._positions[q]) for q in list(self._assigned)
               if self._positions.get(q) is not None
               and self._committed.get(q) != self._positions[q]
               # a retry queue nothing came back to yet: no offset to show in `fmq groups`
               and not (q[0] == self._retry_topic and q not in self._committed
                        and self._positions[q] == self._starts.get(q))]
        for q, pos in commit_offsets(self, self.group, due):
            self._committed[q] = pos

    def nack(self, message: StoredMessage, delay: float | None = None) -> int:
        """This group failed ``message``: the server stores it for a redelivery to this group
        after ``delay`` seconds (None: the back-off level of its attempt), or in the group's
        dead-letter topic once it was redelivered ``max_reconsume_times``. Returns its
        redeliveries so far (-1: dead-lettered). Commit as usual afterwards: the message is
        safe once this returns."""
        if delay is not None and (not isinstance(delay, (int, float)) or delay < 0):
            raise InvalidArgument(f"delay must be seconds >= 0 or None, got {delay!r}")
        if self.broker_groups is not None:
            with self._use:
                return self.broker_groups.nack(message, delay)
        resp = self.call(Op.NACK, {"group": self.group, "topic": message.topic,
                                   "queue_id": message.queue_id,
                                   "queue_offset": message.queue_offset,
                                   "delay_ms": -1 if delay is None else round(delay * 1000)})
        return -1 if resp["dead_letter"] else resp["reconsume_times"]

    def run(self, handler: Callable[[StoredMessage], object]) -> None:
        """Call ``handler`` with each message until :meth:`close`; commit after each batch.
        A handler that raises fails that message (:meth:`nack`, logged), and the others go
        on."""
        for batch in self._batches():
            for m in batch:
                try:
                    handler(m)
                except Exception as exc:  # noqa: BLE001 - the application's failure
                    logger.warning("handler failed %s/%d/%d (%s); redelivering later",
                                   m.topic, m.queue_id, m.queue_offset, exc)
                    self.nack(m)
            if batch:
                self.commit()

    def __iter__(self) -> Iterator[StoredMessage]:
        """Messages until :meth:`close` (from another thread, or a signal handler); commit
        as you go."""
        for batch in self._batches():
            yield from batch

    def _batches(self) -> Iterator[list[StoredMessage]]:
        """Polled batches until :meth:`close` (a close from another thread ends it quietly)."""
        while not self._closed:
            try:
                yield self.poll(1.0)
            except BrokerClosed:
                if self._closed:
                    return
                raise

    def close(self) -> None:
        """Leave the group (its queues go to the other members at once) and disconnect."""
        if self._closed:
            return
        if self.broker_groups is not None:
            with self._use:
                self.broker_groups.close()
            super().close()
            return
        self._stop.set()
        self._beat_now.set()
        self._hb.join(5)
        try:
            self.call(Op.GROUP_LEAVE, {"group": self.group, "member_id": self.member_id},
                      retries=0, timeout=2.0)
        except FMQError:
            pass  # the session times out on the server instead
        if self._reads is not self:
            self._reads.close()
        super().close()

    def __enter__(self) -> Consumer:
        return self
