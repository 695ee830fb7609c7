"""Building an open broker's parts: recovery first, then each collaborator from the ones
before it, with keyword arguments, in the one order that works (the log and the index
before recovery, recovery before the queues, the dispatcher before anything that writes).

The broker's methods use the parts and name the typed ones (``Broker.reads``,
``transactions``, ``deliveries``, ...); nothing else builds them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fmq.config import BrokerConfig
from fmq.datadir import INDEX_DIR, LOG_DIR, refuse_unfinished_undo
from fmq.dedup import DedupWindow
from fmq.engine.checkpoints import Checkpointer
from fmq.engine.idempotence import Idempotence
from fmq.engine.index_admission import IndexAdmission
from fmq.engine.inventory import Inventory
from fmq.engine.maintenance import Upkeep, start_maintenance
from fmq.engine.offsets import ConsumerOffsets
from fmq.engine.queues import Queues
from fmq.engine.reads import Reader
from fmq.engine.replica_log import ReplicaLog
from fmq.engine.retention import Retention
from fmq.engine.retries import Deliveries
from fmq.engine.timers import Timers
from fmq.engine.topics import Topics, load_topics
from fmq.engine.transactions import Transactions
from fmq.engine.visibility import Visibility
from fmq.index.dispatcher import Dispatcher
from fmq.index.lmdb_env import no_room_at_open
from fmq.index.process_dispatcher import ProcessDispatcher
from fmq.index.store import IndexStore, open_index
from fmq.log.fileio import FileIO
from fmq.log.log import Log
from fmq.recovery.recover import RecoveryReport, recover
from fmq.recovery.roll_forward import end_cut_transactions
from fmq.tx.closed_scopes import ClosedScopeRollback
from fmq.tx.decided_scopes import DecidedScopes
from fmq.tx.decisions_elsewhere import DecisionsElsewhere
from fmq.tx.feedback import Feedback
from fmq.tx.manager import TxManager
from fmq.tx.relocation import TxRelocator
from fmq.tx.state import TxState
from fmq.tx.writers import TxWriter


@dataclass
class Parts:
    """The collaborators of one open broker."""

    log: Log
    max_record_size: int
    index: IndexStore
    tx: TxManager
    recovery: RecoveryReport
    queues: Queues
    dispatcher: Dispatcher | ProcessDispatcher
    admit: IndexAdmission
    idempotence: Idempotence
    tx_writer: TxWriter
    relocator: TxRelocator
    transactions: Transactions
    replica: ReplicaLog
    visibility: Visibility
    reader: Reader
    offsets: ConsumerOffsets
    inventory: Inventory
    topics: Topics
    timers: Timers
    deliveries: Deliveries
    checkpointer: Checkpointer
    retention: Retention
    closed_scopes: ClosedScopeRollback
    stop: threading.Event
    maintenance: threading.Thread | None = None


def assemble(*, path: str, config: BrokerConfig, io: FileIO,
             check_open: Callable[[], None],
             progress: Callable[[int, int], None] | None) -> Parts:
    """Recover the data directory at ``path`` (its lock held) and build every part; the
    threads (maintenance, timers) start in :func:`start_threads`. On failure, whatever
    was opened is closed again before the error propagates: a caller that retries must not
    run out of descriptors, mappings or threads."""
    refuse_unfinished_undo(path)  # a half put back log must not be written to
    log_ = Log(os.path.join(path, LOG_DIR), config.segment_size, io)
    index = dispatcher = None
    try:
        # Segments keep the size they were created with: a smaller configured size must
        # not make the decoder reject the larger records of older segments.
        max_record_size = max([config.max_record_size] + [s.size for s in log_.segments])
        index, rebuilt = open_index(os.path.join(path, INDEX_DIR), config.index_map_size)
        tx = _tx_manager(config, index)
        dedup = DedupWindow.for_config(config)
        report, queue_next = recover(path, log_, index, tx, max_record_size=max_record_size,
                                     batch=config.dispatch_batch, index_rebuilt=rebuilt,
                                     progress=progress, dedup=dedup)
        log_.start_at(report.end_offset)
        queues = Queues(queues_per_topic=config.queues_per_topic, queue_next=queue_next,
                        pending=[(m.topic, m.queue_id) for t in tx.open.values()
                                 for m in t.messages],
                        topics=load_topics(index), auto_create=config.auto_create_topics)
        dispatcher = _start_dispatcher(config, path, log_, index, max_record_size,
                                       report.end_offset)
        return _build_writers_and_readers(
            path=path, config=config, io=io, check_open=check_open, log_=log_,
            max_record_size=max_record_size, index=index, tx=tx, report=report,
            queues=queues, dispatcher=dispatcher, dedup=dedup)
    except BaseException as exc:
        if dispatcher is not None:
            dispatcher.stop()
        if index is not None:
            index.close()
        log_.close()
        no_room = no_room_at_open(exc, os.path.join(path, INDEX_DIR))
        if no_room is not None:
            raise no_room from exc
        raise


def _tx_manager(config: BrokerConfig, index: IndexStore) -> TxManager:
    def indexed_end(producer_group: str, tx_id: str) -> TxState | None:
        end = index.tx_ends.get(producer_group, tx_id)
        return None if end is None else TxState.COMMIT if end[0] else TxState.ROLLBACK

    return TxManager(max_open=config.max_open_transactions,
                     finished_memory=config.tx_finished_memory,
                     check_after_ms=config.tx_check_after_ms,
                     check_max_interval_ms=config.tx_check_max_interval_ms,
                     lookup_finished=indexed_end, lookup_groups=index.tx_ends.groups)


def _start_dispatcher(config: BrokerConfig, path: str, log_: Log, index: IndexStore,
                      max_record_size: int, end_offset: int) -> Dispatcher | ProcessDispatcher:
    """The index writer ``config.index_writer`` names, started at ``end_offset`` (where
    recovery left the index) and fed by the log's flushes."""
    retry_initial = config.index_retry_initial_ms / 1000.0
    retry_max = config.index_retry_max_ms / 1000.0
    if config.index_writer == "process":
        writer = ProcessDispatcher(
            log_=log_, index=index, index_path=os.path.join(path, INDEX_DIR),
            log_dir=os.path.join(path, LOG_DIR),
            map_size=config.index_map_size, batch=config.dispatch_batch,
            max_record_size=max_record_size, start_offset=end_offset,
            retry_initial=retry_initial, retry_max=retry_max)
        log_.on_flushed = writer.notify_flushed  # the child reads the records itself
        writer.start()
        return writer
    dispatcher = Dispatcher(log_=log_, index=index, batch=config.dispatch_batch,
                            max_record_size=max_record_size, start_offset=end_offset,
                            max_pending=config.dispatch_max_pending,
                            retry_initial=retry_initial, retry_max=retry_max)
    log_.on_flushed = dispatcher.notify_flushed
    log_.on_append = dispatcher.on_append
    log_.on_append_entries = dispatcher.on_append_entries
    dispatcher.start()
    return dispatcher


def _build_writers_and_readers(*, path: str, config: BrokerConfig, io: FileIO,
                               check_open: Callable[[], None], log_: Log,
                               max_record_size: int, index: IndexStore, tx: TxManager,
                               report: RecoveryReport, queues: Queues,
                               dispatcher: Dispatcher | ProcessDispatcher,
                               dedup: DedupWindow) -> Parts:
    admit = IndexAdmission(path=path, config=config, log_=log_, dispatcher=dispatcher)
    idempotence = Idempotence(log_=log_, queues=queues, window=dedup, check_open=check_open,
                              admit=admit)
    writer = TxWriter(log_=log_, txm=tx, config=config, queues=queues,
                      max_record_size=max_record_size, admit=admit, check_open=check_open,
                      ended=index.tx_ends.get)
    relocator = TxRelocator(log_=log_, txm=tx, read_record=writer.read_record)
    decided = DecidedScopes(txm=tx, read_record=writer.read_record,
                            elsewhere=DecisionsElsewhere(txm=tx, prepare=writer.prepare))
    feedback = Feedback(txm=tx, config=config, read_record=writer.read_record,
                        commit=writer.commit, rollback=writer.rollback, decided=decided)
    transactions = Transactions(manager=tx, writer=writer, feedback=feedback,
                                check_open=check_open, decided=decided)
    closed_scopes = ClosedScopeRollback(txm=tx, rollback=writer.rollback,
                                        check_after_ms=config.tx_check_after_ms,
                                        commit=writer.commit, decided=decided)
    visibility = Visibility()
    reader = Reader(log_=log_, index=index, config=config, queues=queues,
                    max_record_size=max_record_size, check_open=check_open,
                    visibility=visibility)
    offsets = ConsumerOffsets(log_=log_, index=index, dispatcher=dispatcher, config=config,
                              queues=queues, check_open=check_open, visibility=visibility)
    topics = Topics(config=config, log_=log_, index=index, dispatcher=dispatcher,
                    queues=queues, check_open=check_open)
    inventory = Inventory(data_dir=path, index=index, queues=queues, reader=reader,
                          offsets=offsets, check_open=check_open,
                          topic_exists=lambda name: topics.get(name) is not None)
    timers = Timers(config=config, log_=log_, index=index, dispatcher=dispatcher,
                    queues=queues, max_record_size=max_record_size, admit=admit,
                    check_open=check_open)
    deliveries = Deliveries(config=config, timers=timers, reads=reader, offsets=offsets,
                            queues=queues, index=index)
    checkpointer = Checkpointer(path=path, log_=log_, index=index, dispatcher=dispatcher,
                                txm=tx, io=io, dedup=dedup)
    retention = Retention(path=path, config=config, log_=log_, index=index, txm=tx,
                          relocator=relocator, checkpointer=checkpointer, io=io,
                          rollback=transactions.rollback, offsets=offsets, timers=timers)
    replica = ReplicaLog(log_=log_, index=index, dispatcher=dispatcher, tx=tx, dedup=dedup,
                         visibility=visibility, max_record_size=max_record_size)
    return Parts(log=log_, max_record_size=max_record_size, index=index, tx=tx,
                 recovery=report, queues=queues, dispatcher=dispatcher, admit=admit,
                 idempotence=idempotence, tx_writer=writer, relocator=relocator,
                 transactions=transactions,
                 replica=replica,
                 visibility=visibility, reader=reader, offsets=offsets, inventory=inventory,
                 topics=topics,
                 timers=timers, deliveries=deliveries, checkpointer=checkpointer,
                 retention=retention, closed_scopes=closed_scopes, stop=threading.Event())


def finish_recovery(parts: Parts, config: BrokerConfig) -> None:
    """Recovery's last pass, the first records this broker writes itself: end the
    transactions a crash cut short and move index-only consumer offsets to the log. A
    follower writes only what its primary ships, so it skips this; a new primary runs it
    after its EPOCH record (:meth:`fmq.engine.broker.Broker.open`'s ``before_writes``)."""
    if not config.follow:
        end_cut_transactions(parts.tx, parts.tx_writer, parts.recovery)
        parts.offsets.upgrade()


def start_threads(parts: Parts, config: BrokerConfig, upkeep: Upkeep) -> None:
    """Start the maintenance thread and (on a primary) the timer service: last, so a
    failed open has no thread to stop."""
    parts.maintenance = start_maintenance(config, parts.log, upkeep, parts.stop)
    if not config.follow:  # a follower's timers are delivered by its primary
        parts.timers.start()
