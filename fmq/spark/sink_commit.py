"""The ``fmq-topic`` sink's commit protocol: one FMQ transaction per Spark task (per topic
of the task), prepared by the task and committed or rolled back by the driver.

A task prepares its rows (invisible until committed) and returns the ids in its commit
message. Spark hands the driver's ``commit`` the messages of the one attempt per partition
its output commit coordinator let finish, so the driver commits exactly those and rolls
back the rest it can see: the transactions of failed, killed or speculative attempts are
found by their names (:class:`TxName`) among the producer group's open transactions.

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
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from fmq.client import TransactionProducer
from fmq.client.acquire import OWN_LINK
from fmq.errors import (
    AccessDenied,
    InvalidArgument,
    TransactionConflict,
    UnknownTransaction,
)
from fmq.protocol import Op
from fmq.tx.state import TxState

#: Every transaction name of the sink starts so (``fmq tx list`` shows whose they are).
TX_PREFIX = "fmq-spark"
#: Spark's batch id of a batch write (it has one commit).
BATCH_WRITE = 0


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

    def __str__(self) -> str:
        return (f"{TX_PREFIX}.{self.write}.{self.batch}.{self.run}.{self.partition}."
                f"{self.attempt}.{self.part}")

    @classmethod
    def parse(cls, tx_id: str) -> TxName | None:
        """The name behind ``tx_id``; None for a transaction the sink did not name."""
        parts = tx_id.split(".")
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
        try:
            for topic in sorted({t for t in topics if t}):
                try:
                    self.producer.route(topic)
                except InvalidArgument:
                    continue  # a name FMQ refuses: no task could prepare anything in it
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

    def sweep(self, decide: Any) -> None:
        """Ends every open transaction of the group that ``decide(TxName)`` rules on
        (COMMIT or ROLLBACK; None leaves it open). Lists them with LIST_TX; a user without
        the ADMIN right gets those the server already offers for a check-back instead."""
        for link in self.producer.links.names():
            for tx_id in self._open(link):
                name = TxName.parse(tx_id)
                verdict = decide(name) if name is not None else None
                if verdict is not None:
                    with contextlib.suppress(UnknownTransaction):
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
