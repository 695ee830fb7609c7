"""``df.write.format("fmq-topic")`` and ``df.writeStream.format("fmq-topic")``: rows into
topics of a running ``fmq server``, each row visible exactly once across task retries,
speculative tasks and a restarted query (:mod:`fmq.spark.sink_commit` has the protocol,
:mod:`fmq.spark.sink_rows` the columns).

Usage::

    from fmq.spark.topic_source import register
    register(spark)
    (df.selectExpr("key", "body", "'orders' AS topic")
       .write.format("fmq-topic").option("servers", "127.0.0.1:7070").mode("append").save())
    (stream.writeStream.format("fmq-topic").option("servers", "127.0.0.1:7070")
       .option("topic", "totals").option("checkpointLocation", "/ckpt/totals").start())

Options: ``servers`` (required), ``topic`` (the topic of rows without a ``topic``
column), ``producerGroup`` (the FMQ producer group of the sink's transactions, default
``fmq-spark``), TLS and log-in as the source's (``tls``, ``caFile``, ``certFile``,
``keyFile``, ``user``, ``passwordFile``); a streaming write needs ``checkpointLocation``
as an option of the query (the sink keeps its own record there).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from fmq.client import TransactionProducer
from fmq.client.acquire import OWN_LINK
from fmq.errors import FMQError, InvalidArgument, TransactionConflict
from fmq.message import Message
from fmq.protocol.values import message_to_wire
from fmq.spark.sink_commit import (
    BATCH_RUN,
    BATCH_WRITE,
    Committer,
    DecisionLog,
    Prepared,
    SinkCommitMessage,
    TxName,
    prepared_of,
)
from fmq.spark.sink_rows import SinkColumns, check_schema, row_message
from fmq.spark.topic_offsets import access_options, option, required
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.spark")

DEFAULT_PRODUCER_GROUP = "fmq-spark"
#: The sink's directory inside a streaming query's checkpoint.
DECISIONS_DIR = "fmq-topic-sink"

class _SinkOptions:
    """What the driver and every task need: the servers, the access, the columns."""

    def __init__(self, options: dict, schema: StructType) -> None:
        self.servers = required(options, "servers", "127.0.0.1:7070")
        self.access = access_options(options)
        self.producer_group = option(options, "producerGroup") or DEFAULT_PRODUCER_GROUP
        self.columns: SinkColumns = check_schema(schema, option(options, "topic"))

    def committer(self, prepared: Iterable[Prepared]) -> Committer:
        """The driver's committer, knowing the routes of the topics written: the ``topic``
        option's and those of the transactions ``prepared``."""
        topics = {t.topic for t in prepared} | {self.columns.topic or ""}
        return Committer(self.servers, self.producer_group, self.access, topics)


def _prepare_task(opts: _SinkOptions, rows: Iterator[Any], write: str, batch: int,
                  run: str) -> SinkCommitMessage:
    """A task's rows as prepared (invisible) transactions, one per topic (a topic's
    queues may live in another broker group than the next topic's). Every row is checked
    before the first PREPARE; a refused PREPARE stores nothing of itself, and the
    transactions this attempt prepared before it are rolled back, so a failed task leaves
    nothing behind that the driver would have to find."""
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.taskAttemptId() if ctx is not None else 0
    by_topic: dict[str, list[Message]] = {}
    count = 0
    for row in rows:
        msg = row_message(row, opts.columns)
        message_to_wire(msg)
        by_topic.setdefault(msg.topic, []).append(msg)
        count += 1
    done: list[Prepared] = []
    with TransactionProducer(opts.servers, opts.producer_group, lambda _u: TxState.UNKNOWN,
                             feedback=False, **opts.access) as producer:
        try:
            for n, topic in enumerate(sorted(by_topic)):
                name = str(TxName(write, batch, run, partition, attempt, n))
                tx_id = producer.prepare(by_topic[topic], tx_id=name)
                done.append(Prepared(tx_id, producer._tx_links.get(tx_id, OWN_LINK),  # noqa: SLF001
                                     topic))
        except BaseException:
            for tx in done:
                try:
                    producer._tx_links[tx.tx_id] = tx.link  # noqa: SLF001
                    producer.rollback(tx.tx_id)
                except FMQError:
                    pass  # the driver's sweep ends it (its name says whose it is)
            raise
    return SinkCommitMessage(done, count)


class TopicBatchWriter(DataSourceWriter):
    """``df.write``: one random write id; the driver decides, durably and before its first
    COMMIT, to commit what the winning attempts prepared (the decision also closes the
    write's scope: no task of it can prepare any more), commits them and rolls back every
    other transaction of this write it finds open. From the decision on the write is
    committed whole: what the driver does not finish, the broker does."""

    def __init__(self, options: dict, schema: StructType) -> None:
        self.opts = _SinkOptions(options, schema)
        self.write_id = uuid.uuid4().hex[:16]
        self.scope = TxName(self.write_id, BATCH_WRITE, BATCH_RUN, 0, 0).scope

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return _prepare_task(self.opts, iterator, self.write_id, BATCH_WRITE, BATCH_RUN)

    def _leftover(self, c: Committer, name: TxName, link: str,
                  chosen: frozenset[TxName] = frozenset()) -> TxState | None:
        """ROLLBACK for this write's transactions not ``chosen``, and for those of an
        earlier batch write of the producer group whose scope is closed (whose driver was
        lost between its mark and its sweep, or whose server restarted in between)."""
        if name.write == self.write_id:
            return None if name in chosen else TxState.ROLLBACK
        if name.of_batch_write and c.closed(name.scope, link):
            return TxState.ROLLBACK
        return None

    def _sweep(self, c: Committer, chosen: frozenset[TxName] = frozenset()) -> None:
        """Roll back what the write's scope, now closed, still holds, and what earlier
        batch writes' closed scopes and their marks do. A driver lost before this leaves
        nothing open for long: the broker's check-back rolls back a closed scope's
        leftovers itself."""
        c.sweep(lambda n, link: self._leftover(c, n, link, chosen), end_marks=True)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        chosen = prepared_of(messages)
        with self.opts.committer(chosen) as c:
            # A failure here (the decision not durable, or its answer lost) makes Spark
            # call abort, which finds out which.
            c.decide(self.scope, chosen)
            self._carry_out(c, chosen)

    def _carry_out(self, c: Committer, chosen: list[Prepared]) -> None:
        """COMMIT the chosen transactions of the decided write, roll back the rest, end
        the decision. The write is decided: a failure here (the server out of reach, a
        refused COMMIT) no longer fails it; the broker commits what is left once it can
        (docs/transactions.md, Scopes)."""
        names = frozenset(TxName.parse(t.tx_id) for t in chosen)
        try:
            c.commit_all(chosen)
            self._sweep(c, names)
            c.finish(self.scope, chosen)
        except TransactionConflict:
            raise  # a chosen transaction rolled back before the decision (by hand)
        except FMQError as exc:
            logger.warning(
                "batch write %s is decided (commit of %d transactions) but its driver "
                "could not finish it (%s): the broker commits the rest on its own",
                self.write_id, len(chosen), exc)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        prepared = prepared_of(messages)
        with self.opts.committer(prepared) as c:
            # Spark kills the other tasks while this runs: closed first, none of them can
            # prepare after the sweep below has looked.
            if c.close(self.scope, "aborted", prepared):
                c.rollback_all(prepared)
                self._sweep(c)
                return
            # The commit's decision is durable (its answer, or a COMMIT after it, failed):
            # it stands; complete it in every group (the same decision answers as made)
            # and carry it out. ``messages`` are the ones the commit had.
            logger.warning("batch write %s: aborted after its decision to commit; the "
                           "decision stands", self.write_id)
            c.decide(self.scope, prepared)
            self._carry_out(c, prepared)


def _checkpoint(options: dict) -> str:
    path = option(options, "checkpointLocation")
    if not path:
        raise InvalidArgument(
            'a streaming write to fmq-topic needs .option("checkpointLocation", DIR) on the '
            "query: the sink records there which transactions each micro-batch committed")
    if path.startswith("file:"):
        path = path[len("file:"):]
        while path.startswith("//"):
            path = path[1:]
    if "://" in path:
        raise InvalidArgument(f"the fmq-topic sink keeps its record on the local file "
                              f"system of the driver; checkpointLocation {path!r} is not "
                              f"a local path")
    return os.path.abspath(path)


class TopicStreamWriter(DataSourceStreamWriter):
    """``df.writeStream``: the write id is the checkpoint's (the same query across
    restarts), the run id new per start; see :mod:`fmq.spark.sink_commit`."""

    def __init__(self, options: dict, schema: StructType) -> None:
        self.opts = _SinkOptions(options, schema)
        checkpoint = _checkpoint(options)
        self.write_id = uuid.uuid5(uuid.NAMESPACE_URL, checkpoint).hex[:16]
        self.run = uuid.uuid4().hex[:8]
        self.decisions = DecisionLog(os.path.join(checkpoint, DECISIONS_DIR))

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1) if ctx else -1
        return _prepare_task(self.opts, iterator, self.write_id, batch, self.run)

    def _verdict(self, name: TxName, _link: str = "") -> TxState | None:
        """An open transaction of this query is decided by its batch's record; one of a
        batch without a record yet waits for that batch's commit."""
        if name.write != self.write_id:
            return None
        recorded = self.decisions.read(name.batch)
        if recorded is None:
            return None
        # Compared as names: a record written before scopes holds the dotted form.
        return (TxState.COMMIT if any(TxName.parse(t.tx_id) == name for t in recorded)
                else TxState.ROLLBACK)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        prepared = prepared_of(messages)
        chosen = self.decisions.decide(batchId, prepared)
        ids = {t.tx_id for t in chosen}
        with self.opts.committer([*chosen, *prepared]) as c:
            c.commit_all(chosen)
            c.rollback_all(t for t in prepared if t.tx_id not in ids)
            c.sweep(self._verdict)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        recorded = self.decisions.read(batchId)
        keep = {t.tx_id for t in recorded or ()}
        with self.opts.committer(prepared_of(messages)) as c:
            # A recorded transaction stands: the batch's next run commits it.
            c.rollback_all(t for t in prepared_of(messages) if t.tx_id not in keep)
