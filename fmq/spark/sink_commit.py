"""The ``fmq-topic`` sink's commit protocol: one FMQ transaction per Spark task (per topic
of the task), prepared by the task and committed or rolled back by the driver.

A task prepares its rows (invisible until committed) and returns the ids in its commit
message. Spark hands the driver's ``commit`` the messages of the one attempt per partition
its output commit coordinator let finish, so the driver commits exactly those and rolls
back the rest it can see: the transactions of failed, killed or speculative attempts are
found by their names (:class:`TxName`) among the producer group's open transactions.

A batch write's ids are ``SCOPE//NAME`` (:class:`TxName`), and its commit is all or
nothing: before its first COMMIT the driver prepares the transaction named ``SCOPE`` as a
*decision mark* (:meth:`Committer.decide`, :mod:`fmq.tx.scope_decision`) naming the
chosen transactions. From then on the broker refuses every PREPARE of the scope
(``TransactionScopeClosed``) and every ROLLBACK of a chosen one, and commits those still
open on its own once they are due for a check-back (the driver lost, or its COMMITs
failed, after deciding), rolling back the rest of the scope; a driver that finishes ends
the mark itself (:meth:`Committer.finish`). An abort before the decision closes the scope
with a plain end mark (:meth:`Committer.close`, never visible) and rolls everything back;
an abort that finds the decision made carries it out instead. A task Spark was still
killing, or a speculative copy, that prepares after its write's commit or abort is refused
instead of leaving an invisible transaction open. The marks are transaction records,
durable and replicated like every other (docs/transactions.md, *Scopes*).

A streaming query adds a durable record, written before the first COMMIT: the
transactions chosen for micro-batch ``N`` (:class:`DecisionLog`, a file per batch under
the query's checkpoint). A driver killed between writing it and Spark's own commit log
runs batch ``N`` again after a restart; its ``commit`` then finds the record and commits
the recorded transactions (COMMIT of a committed one just answers COMMIT) and rolls back
the re-run's, so the batch's rows are visible once. ``docs/spark.md`` (*Writing to
topics*) has the reasoning and the limits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from fmq.client import TransactionProducer
from fmq.client.acquire import OWN_LINK, broker_group_of, link_of
from fmq.errors import (
    AccessDenied,
    DuplicateTransaction,
    InvalidArgument,
    TransactionConflict,
    TransactionRolledBack,
    UnknownTopic,
    UnknownTransaction,
)
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.ids import SCOPE_SEPARATOR
from fmq.tx.scope_decision import GroupShare, decision_message
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.spark")

#: Every transaction name of the sink starts so (``fmq tx list`` shows whose they are).
TX_PREFIX = "fmq-spark"
#: Spark's batch id of a batch write (it has one commit).
BATCH_WRITE = 0
#: The run of a batch write (a streaming query's runs are random per start).
BATCH_RUN = "w"
#: The topic of an end mark when the driver knows no topic the write wrote to (a write
#: with a ``topic`` column none of whose tasks finished): the mark must go somewhere.
MARK_TOPIC = "fmq-spark-marks"


@dataclass(frozen=True)
class TxName:
    """The name of one task attempt's transaction: which write (a batch write's random
    id, or a streaming query's checkpoint), which micro-batch, which run of the query
    (a restart is a new run), which partition and which task attempt prepared it."""

    write: str
    batch: int
    run: str
    partition: int
    attempt: int
    part: int = 0  # the task's n-th transaction (one per topic)

    @property
    def scope(self) -> str:
        """The transactions of one write, micro-batch and run: the id of their end mark."""
        return f"{TX_PREFIX}.{self.write}.{self.batch}.{self.run}"

    @property
    def of_batch_write(self) -> bool:
        return self.batch == BATCH_WRITE and self.run == BATCH_RUN

    def __str__(self) -> str:
        return (f"{self.scope}{SCOPE_SEPARATOR}{self.partition}.{self.attempt}."
                f"{self.part}")

    @staticmethod
    def marked_write(tx_id: str) -> str | None:
        """The batch write whose end mark ``tx_id`` is (``fmq-spark.<write>.0.w``); None
        for any other id."""
        parts = tx_id.split(".")
        if (len(parts) == 4 and parts[0] == TX_PREFIX and parts[1]
                and parts[2] == str(BATCH_WRITE) and parts[3] == BATCH_RUN):
            return parts[1]
        return None

    @classmethod
    def parse(cls, tx_id: str) -> TxName | None:
        """The name behind ``tx_id`` (also one of before scopes, all dots); None for a
        transaction the sink did not name."""
        parts = tx_id.replace(SCOPE_SEPARATOR, ".", 1).split(".")
        if len(parts) != 7 or parts[0] != TX_PREFIX:
            return None
        try:
            return cls(parts[1], int(parts[2]), parts[3], int(parts[4]), int(parts[5]),
                       int(parts[6]))
        except ValueError:
            return None


@dataclass(frozen=True)
class Prepared:
    """One prepared transaction: its id, the broker group (client link) holding it, and
    the topic of its messages (whose route names that group's primary to the driver)."""

    tx_id: str
    link: str = OWN_LINK
    topic: str = ""


class SinkCommitMessage(WriterCommitMessage):
    """What a task sends the driver: its prepared transactions and how many rows."""

    def __init__(self, transactions: list[Prepared], rows: int) -> None:
        self.transactions = transactions
        self.rows = rows


def prepared_of(messages: Iterable[WriterCommitMessage | None]) -> list[Prepared]:
    """The transactions of the tasks that finished (a failed task's message is None)."""
    return [t for m in messages if isinstance(m, SinkCommitMessage) for t in m.transactions]


class DecisionLog:
    """The durable record of a streaming sink: which transactions micro-batch ``N``
    commits, one JSON file per batch in ``directory`` (under the query's checkpoint),
    written once, atomically (temporary file, fsync, rename, fsync of the directory)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, batch: int) -> str:
        return os.path.join(self.directory, f"{batch}.json")

    def read(self, batch: int) -> list[Prepared] | None:
        try:
            with open(self._path(batch)) as f:
                return [Prepared(t["tx_id"], t["link"], t.get("topic", ""))
                        for t in json.load(f)["transactions"]]
        except FileNotFoundError:
            return None

    def write(self, batch: int, chosen: Sequence[Prepared]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        tmp = self._path(batch) + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"batch": batch, "transactions": [
                {"tx_id": t.tx_id, "link": t.link, "topic": t.topic} for t in chosen]}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(batch))
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def decide(self, batch: int, prepared: Sequence[Prepared]) -> list[Prepared]:
        """The transactions batch ``batch`` commits: those recorded by an earlier run of
        the batch, else ``prepared``, recorded now (before any COMMIT)."""
        recorded = self.read(batch)
        if recorded is not None:
            return recorded
        self.write(batch, prepared)
        return list(prepared)


class Committer:
    """The driver's side: commits and rolls back the sink's transactions in one producer
    group, and sweeps the group's open transactions the tasks' messages do not name.

    ``topics``: the topics the write wrote to. In a cluster the tasks' transactions live in
    the broker groups of those topics' routes: the committer reads the routes first, which
    gives it a link to each group's primary (the servers given are one group's, or any
    node's), and the sweep looks in every group they name."""

    def __init__(self, servers: str | Sequence[str], producer_group: str,
                 access: dict[str, Any], topics: Iterable[str] = ()) -> None:
        self.producer = TransactionProducer(servers, producer_group,
                                            lambda _u: TxState.UNKNOWN, feedback=False,
                                            **access)
        #: Where an end mark goes: a topic hosted there, by broker group (None: the
        #: servers given, for a topic of one group).
        self._mark_places: dict[str | None, str] = {}
        #: Scopes of other batch writes found closed (or not) by this committer's sweeps.
        self._closed: dict[tuple[str, str], bool] = {}
        #: The link each group's decision mark went to (:meth:`decide`), by group.
        self._decisions: dict[str | None, str] = {}
        try:
            for topic in sorted({t for t in topics if t}):
                try:
                    route = self.producer.route(topic)
                except InvalidArgument:
                    continue  # a name FMQ refuses: no task could prepare anything in it
                for group in [None] if route.single else list(route.broker_groups):
                    self._mark_places.setdefault(group, topic)
        except BaseException:
            self.producer.close()
            raise

    def __enter__(self) -> Committer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.producer.close()

    def _end(self, tx: Prepared, state: TxState) -> None:
        # The producer ends a transaction on the link (broker group) that prepared it.
        self.producer._tx_links[tx.tx_id] = tx.link  # noqa: SLF001 - same package family
        if state == TxState.COMMIT:
            self.producer.commit(tx.tx_id)
        else:
            try:
                self.producer.rollback(tx.tx_id)
            except UnknownTransaction:
                pass  # never prepared (its task failed before): nothing to undo

    def commit_all(self, txs: Iterable[Prepared]) -> None:
        for tx in txs:
            self._end(tx, TxState.COMMIT)

    def rollback_all(self, txs: Iterable[Prepared]) -> None:
        for tx in txs:
            try:
                self._end(tx, TxState.ROLLBACK)
            except TransactionConflict:
                pass  # already committed by a decision recorded before: it stands

    def _places(self, txs: Iterable[Prepared]) -> list[tuple[str | None, str, list[str]]]:
        """Where a write's marks go, in the one order every mark of a scope is written
        in: each broker group a task of it can have written to (those of the topics'
        routes, and of ``txs``), with a topic hosted there and the ids of ``txs`` it
        holds."""
        places: dict[str | None, str] = dict(self._mark_places)
        held: dict[str | None, list[str]] = {}
        for tx in txs:
            group = broker_group_of(tx.link) or None
            places.setdefault(group, tx.topic or MARK_TOPIC)
            held.setdefault(group, []).append(tx.tx_id)
        if not places:
            places[None] = MARK_TOPIC
        return [(g, places[g], held.get(g, [])) for g in sorted(places, key=lambda g: g or "")]

    def _link(self, group: str | None) -> str:
        return link_of(group) if group is not None else OWN_LINK

    def decide(self, scope: str, chosen: Sequence[Prepared]) -> None:
        """Make the durable decision to commit ``chosen`` (and nothing else of ``scope``):
        in each broker group, before any COMMIT, prepare the mark ``scope`` carrying the
        ids of the group's chosen transactions. From its answer on, the broker commits
        them whatever becomes of this driver, and refuses to roll one back. Idempotent:
        a decision already made for the same transactions is answered as made.

        Over several broker groups the first group's mark is the commit point of the
        whole write: it also names each later group's winners and the topic of that
        group's mark, so a later group whose mark this driver does not live to write
        finds the decision there and writes it itself, the same bytes (docs/spark.md,
        *Limits*; :mod:`fmq.tx.decisions_elsewhere`)."""
        places = self._places(chosen)
        later = {group: GroupShare(topic, frozenset(winners))
                 for group, topic, winners in places[1:] if group is not None and winners}
        for n, (group, topic, winners) in enumerate(places):
            try:
                self.producer.prepare(
                    [decision_message(topic, scope, winners,
                                      later if n == 0 and len(places) > 1 else None)],
                    tx_id=scope, group=group)
            except DuplicateTransaction:
                if n == 0:
                    raise
                # A later group's broker wrote this mark from the first group's decision
                # (it found the write's transactions due meanwhile): decided there.
                logger.info("the decision of %s in broker group %s was written by the "
                            "broker from the first group's", scope, group)
                self._decisions[group] = self._link(group)
                continue
            except (UnknownTopic, AccessDenied) as exc:
                if topic != MARK_TOPIC:
                    raise
                # Nothing chosen and no topic of the write known (as in close): nothing
                # to decide, and the stand-in for the mark is refused.
                logger.warning("could not mark the end of %s in %s (%s)", scope, topic, exc)
                continue
            self._decisions[group] = self.producer._tx_links.get(  # noqa: SLF001
                scope, self._link(group))

    def finish(self, scope: str, chosen: Sequence[Prepared]) -> None:
        """End the decision marks of ``scope`` once its winners are committed: the broker
        refuses while a transaction of the scope is still open (it ends the mark itself
        once it has finished them)."""
        for group, _topic, _winners in self._places(chosen):
            link = self._decisions.get(group, self._link(group))
            try:
                self._end(Prepared(scope, link), TxState.ROLLBACK)
            except TransactionConflict as exc:
                logger.info("the decision %s stays until the broker ends it: %s", scope, exc)

    def close(self, scope: str, why: str, txs: Iterable[Prepared] = ()) -> bool:
        """Mark ``scope`` over in every broker group a task of it can have written to: prepare
        the transaction named ``scope`` (one message, ``why``), which makes the broker
        refuse every later PREPARE of the scope, then roll it back (it is never visible and
        holds nothing). Returns False, having closed nothing more, when the first group
        already holds a mark of the scope still open: the write's decision, made by its
        commit (the marks are written in the same order), which stands."""
        for n, (group, topic, _held) in enumerate(self._places(txs)):
            mark = Message(topic, why.encode(), properties={"fmq-spark-end": scope})
            link = self._link(group)
            try:
                self.producer.prepare([mark], tx_id=scope, group=group)
            except DuplicateTransaction:
                if n == 0:
                    return False
                self.producer._tx_links[scope] = link  # noqa: SLF001 - closed before
            except TransactionRolledBack:
                self.producer._tx_links[scope] = link  # noqa: SLF001 - closed before
            except (UnknownTopic, AccessDenied) as exc:
                if topic != MARK_TOPIC:
                    raise
                # No topic of the write is known and the stand-in is refused: the sweep
                # alone ends what the write's tasks prepared (docs/spark.md, Limits).
                logger.warning("could not mark the end of %s in %s (%s)", scope, topic, exc)
                continue
            try:
                self._end(Prepared(scope, self.producer._tx_links.get(scope, link)),  # noqa: SLF001
                          TxState.ROLLBACK)
            except TransactionConflict:
                pass  # a decision mark (a later group's, written first): it stands
        return True

    def closed(self, scope: str, link: str) -> bool:
        """Whether ``scope`` (another batch write's) was closed in the group of ``link``:
        its mark exists. Asked with a ROLLBACK of the mark, which records nothing for an
        id never used (UnknownTransaction) and only ends a mark left open."""
        known = self._closed.get((scope, link))
        if known is None:
            self.producer._tx_links[scope] = link  # noqa: SLF001
            try:
                self.producer.rollback(scope)
                known = True
            except TransactionConflict:
                known = True  # prepared, so closed (a mark is never committed)
            except UnknownTransaction:
                known = False
            self._closed[(scope, link)] = known
        return known

    def sweep(self, decide: Any, end_marks: bool = False) -> None:
        """Ends every open transaction of the group that ``decide(TxName, link)`` rules
        on (COMMIT or ROLLBACK; None leaves it open), and with ``end_marks`` rolls back
        the open end marks of batch writes (a driver lost between a mark's PREPARE and
        its ROLLBACK left it open; a mark is never committed, and an ended one closes
        its scope as well). Lists them with LIST_TX; a user without the ADMIN right gets
        those the server already offers for a check-back instead."""
        for link in self.producer.links.names():
            for tx_id in self._open(link):
                name = TxName.parse(tx_id)
                if name is not None:
                    verdict = decide(name, link)
                elif end_marks and TxName.marked_write(tx_id) is not None:
                    verdict = TxState.ROLLBACK
                else:
                    verdict = None
                if verdict is not None:
                    # A conflict: a decision names it for commit (the broker refuses its
                    # ROLLBACK and commits it), or a decision mark still has work.
                    with contextlib.suppress(UnknownTransaction, TransactionConflict):
                        self._end(Prepared(tx_id, link), verdict)

    def _open(self, link: str) -> list[str]:
        group = self.producer.producer_group
        try:
            resp = self.producer.call(Op.LIST_TX, {}, link=link)
            return [t["tx_id"] for t in resp["transactions"] if t["producer_group"] == group]
        except AccessDenied:
            resp = self.producer.call(Op.POLL_UNCERTAIN, {
                "producer_group": group, "max_items": 1000, "lease_ms": 5000, "wait_ms": 0},
                link=link)
            return [t["tx_id"] for t in resp["transactions"]]
