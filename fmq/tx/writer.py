"""The transaction records in the log: PREPARE and its PRE_MESSAGEs, the REF or TX record
each message gets on commit (and the rule choosing between them), COMMIT and ROLLBACK.
Retention's rewrite of an open transaction at the log head is :mod:`fmq.tx.relocation`.

The writer holds no state of its own: open transactions live in
:class:`~fmq.tx.manager.TxManager`, queue offsets with whoever implements
:class:`QueueAssigner` (the engine's queues).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from fmq.config import BrokerConfig
from fmq.errors import DuplicateTransaction, InvalidArgument, LogFailed
from fmq.index.derive import tag_hash
from fmq.index.entry_types import QueueEntry, TxEnd
from fmq.log.log import Log
from fmq.log.placement import now_ms, read_record, reserve_segments
from fmq.log.record import (
    HEADER_SIZE,
    RECORD_BOUND,
    Record,
    RecordType,
    check_fits,
    encode_mark_into,
    encoded_length,
)
from fmq.message import MAX_PROPERTIES, Message, check_label, check_message, check_name
from fmq.tx.ids import new_tx_id
from fmq.tx.manager import OpenTransaction, PreMessage, TxManager
from fmq.tx.retried_prepare import EndedTx, find_committed_prepare, find_retried_prepare
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name

# Module constants: an enum member looked up through its class costs a few times a global
# read, and the placement runs on the event loop once per record.
_PREPARE = RecordType.PREPARE
_PRE_MESSAGE = RecordType.PRE_MESSAGE
_REF_MESSAGE = RecordType.REF_MESSAGE
_COMMIT = RecordType.COMMIT
_COMMITTED = TxState.COMMIT
_COMMITTING = TxState.COMMITTING
#: A message that passed ``check_message`` takes at most its body, this and its
#: transaction's id and group in the log, with the end filler a segment keeps room for
#: (``check_fits``' own first test, with room for the largest properties).
_FIT_BOUND = RECORD_BOUND + 2 * HEADER_SIZE + MAX_PROPERTIES
#: A NamedTuple's own constructor is a Python function parsing its arguments: a commit's
#: index items are built as the runs build theirs.
_new_tuple = tuple.__new__


class QueueAssigner(Protocol):
    """Queue choice and queue-offset allocation, called with the log lock held."""

    def queue_count(self, topic: str) -> int: ...

    def check_topic(self, message: Message) -> None: ...

    def pick_queue(self, message: Message) -> int: ...

    def next_offset(self, topic: str, queue_id: int) -> int: ...

    def advance(self, topic: str, queue_id: int, queue_offset: int,
                body_bytes: int = 0) -> None: ...


class TxWriter:
    """Writes every transaction record; ``admit()`` refuses a prepare the index could not
    make consumable (it raises)."""

    def __init__(self, log_: Log, txm: TxManager, config: BrokerConfig, queues: QueueAssigner,
                 max_record_size: int, admit: Callable[[], None],
                 check_open: Callable[[], None] = lambda: None,
                 ended: Callable[[str, str], EndedTx | None] = lambda g, i: None) -> None:
        self.log = log_
        self.tx = txm
        self.config = config
        self.queues = queues
        self.max_record_size = max_record_size
        self.admit = admit
        self.check_open = check_open  # raises BrokerClosed once the broker is closed
        self.ended = ended  # how (group, id) ended, from the index (a retried PREPARE)
        self._groups_checked: set[str] = set()  # producer groups known to be valid names
        self._topics_checked: set[str] = set()  # topic names known to pass the name checks

    def _check_group(self, group: object) -> None:
        """``check_name`` of a producer group, remembered: a producer sends the same one
        with every prepare (the set is bounded; clearing it only costs re-checks)."""
        if type(group) is not str or group not in self._groups_checked:
            check_name(group, "producer_group", allow_none=False)
            if len(self._groups_checked) >= 4096:
                self._groups_checked.clear()
            self._groups_checked.add(group)

    def _topic_checked(self, topic: object) -> None:
        """Remember a topic name that passed ``check_message``'s name checks (a valid name,
        not an internal topic's): a producer prepares to the same few topics, and the name
        checks cost more than the rest of a message's (the set is bounded)."""
        if type(topic) is str:
            if len(self._topics_checked) >= 4096:
                self._topics_checked.clear()
            self._topics_checked.add(topic)

    def read_record(self, offset: int, size: int) -> Record:
        """The stored record (a PRE_MESSAGE) at ``offset``, decoded and checked."""
        return read_record(self.log, offset, size, self.max_record_size)

    # ------------------------------------------------------------------ prepare

    def prepare(self, messages: Sequence[Message], producer_group: str,
                tx_id: str | None = None) -> str:
        """PREPARE (announcing the message count) and one PRE_MESSAGE per message, durable
        before it returns the transaction id."""
        tx, end = self.place_prepare(messages, producer_group, tx_id)
        try:
            self.log.wait_durable(end, sync=True)
        except BaseException as exc:
            self.prepare_done(tx, exc)
            raise
        return self.prepare_done(tx)

    def place_prepare(self, messages: Sequence[Message], producer_group: str,
                      tx_id: str | None = None) -> tuple[OpenTransaction, int]:
        """The first half of :meth:`prepare`, which never waits for the disk: check, place
        the records, register the transaction (not yet prepared). Returns it and the log
        offset its records end at; :meth:`prepare_done` once that is durable (or failed)."""
        self.check_open()
        tx_id, fresh, overhead, bound = self._check_prepare(messages, producer_group, tx_id,
                                                            False)
        self.admit()
        store_time = now_ms()
        outcomes: list = [None]
        with self.tx.lock:
            self._place_checked_prepares(
                [(0, messages, producer_group, tx_id, fresh, overhead, bound)], outcomes,
                store_time)
        outcome = outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def place_prepares(self, requests: Sequence[tuple[Sequence[Message], str, str | None]]
                       ) -> list[tuple[OpenTransaction, int] | Exception]:
        """:meth:`place_prepare` of several PREPAREs of one event-loop turn (messages,
        producer group, id or None), whose messages passed ``check_message`` as they were
        decoded (plain: :func:`fmq.protocol.message_requests.plain_prepare`): each one's
        outcome, in order, what :meth:`place_prepare` returns or the exception that fails
        it alone. The broker's and the index's admission, the clock, the manager's lock
        and the log's are taken once for the turn, and the records of the turn's
        PREPAREs placed as one run of the log (:meth:`_place_checked_prepares`); each
        request's checks, errors and records are those of :meth:`place_prepare`
        (tests/server/test_plain_tx_step.py)."""
        self.check_open()
        outcomes: list = []
        checked = []  # (position, messages, group, id, fresh, overhead, bound)
        for messages, group, tx_id in requests:
            try:
                tx_id, fresh, overhead, bound = self._check_prepare(messages, group, tx_id,
                                                                    True)
            except Exception as exc:  # noqa: BLE001 - it fails this request only
                outcomes.append(exc)
                continue
            checked.append((len(outcomes), messages, group, tx_id, fresh, overhead, bound))
            outcomes.append(None)
        if not checked:
            return outcomes
        try:
            self.admit()
        except Exception as exc:  # noqa: BLE001 - as each request's own admit would
            for item in checked:
                outcomes[item[0]] = exc
            return outcomes
        store_time = now_ms()
        with self.tx.lock:
            self._place_checked_prepares(checked, outcomes, store_time)
        return outcomes

    def _check_prepare(self, messages: Sequence[Message], producer_group: str,
                       tx_id: str | None, plain: bool) -> tuple[str, bool, int, int]:
        """A PREPARE's checks, before anything is placed: its id (made here when None:
        ``fresh``), the record overhead of its id and group, and an upper bound of the
        bytes its records take (as ``reserve_segments`` bounds them; measured here, where
        the messages are gone through anyway). ``plain``: the messages passed
        ``check_message`` as they were decoded; their topics' and sizes' checks are
        left."""
        cfg = self.config
        self._check_group(producer_group)
        fresh = tx_id is None  # an id of this process: no earlier transaction has it
        if fresh:
            tx_id = new_tx_id()  # a valid name by construction
        else:
            check_name(tx_id, "tx_id", allow_none=False)
        if not messages:
            raise InvalidArgument("a transaction needs at least one message")
        if len(messages) > cfg.max_messages_per_transaction:
            raise InvalidArgument(
                f"a transaction may hold at most {cfg.max_messages_per_transaction} messages "
                f"(max_messages_per_transaction); got {len(messages)}")
        overhead = len(tx_id.encode()) + len(producer_group.encode())
        segment_size = cfg.segment_size
        # A checked message whose body is this much smaller than a segment surely fits
        # (check_fits' own first test, with room for the largest properties).
        fits_below = segment_size - _FIT_BOUND - overhead
        bound = HEADER_SIZE + overhead + len(messages) * (RECORD_BOUND + overhead)
        if plain:
            takes = self.queues.check_topic_takes
            for m in messages:
                size = len(m.body)
                takes(m.topic, size)
                if size >= fits_below:
                    check_fits(m, segment_size, overhead)
                bound += size
                if m.properties:
                    bound += MAX_PROPERTIES
            return tx_id, fresh, overhead, bound
        known = self._topics_checked
        check_topic = self.queues.check_topic
        for m in messages:
            topic = m.topic if type(m) is Message else None
            if type(topic) is str and topic in known:
                check_message(m, cfg.max_message_size, self.queues.queue_count,
                              topic_checked=True)
            else:
                check_message(m, cfg.max_message_size, self.queues.queue_count)
                self._topic_checked(topic)
            check_topic(m)
            check_fits(m, segment_size, overhead)
            bound += len(m.body)
            if m.properties:
                bound += MAX_PROPERTIES
        return tx_id, fresh, overhead, bound

    def _place_checked_prepares(self, checked: list[tuple], outcomes: list, store_time: int
                                ) -> None:
        """Checked PREPAREs (position in ``outcomes``, messages, group, id, fresh,
        overhead, bound of their records' bytes) answered from their first attempts (retries) or reserved, registered and
        placed, in order (the manager's lock held): each one's outcome set in
        ``outcomes``, a (transaction, end) or the exception that fails it alone.

        Each is registered as it is reserved, before its records are placed (its log
        offset set once they are): a later PREPARE of the turn sees it as the one-by-one
        way does (the same id is in progress, a scope it closes, the open count), and
        none of it is seen by anyone else before the lock is released: one that fails is
        forgotten before. The records of the reserved ones are then placed under one hold
        of the log's lock, as one run when the turn surely fits in the active segment
        (:meth:`_place_prepare_runs`), else one request at a time, each with its own
        segment reservation (all or none per request)."""
        txm = self.tx
        is_open, max_open = txm.open, txm.max_open
        ready = []  # (position, messages, group, id, overhead, registered transaction)
        turn_bound = 0  # the bytes the records of ``ready`` take at most
        for at, messages, group, tx_id, fresh, overhead, bound in checked:
            # An id made here with room for one more open transaction: the manager's
            # reserve would only check that room (the usual PREPARE skips two calls).
            if not fresh or len(is_open) >= max_open:
                try:
                    retried = self._retried_or_reserved(messages, group, tx_id, fresh)
                except Exception as exc:  # noqa: BLE001 - it fails this request only
                    outcomes[at] = exc
                    continue
                if retried is not None:  # answered from the first attempt, written once
                    outcomes[at] = retried
                    continue
            # ref_size of the PREPARE = the message count: recovery proves it complete by it.
            tx = OpenTransaction(tx_id, group, -1, store_time, expected_messages=len(messages))
            txm.register(tx)
            ready.append((at, messages, group, tx_id, overhead, tx))
            turn_bound += bound
        if not ready:
            return
        log_ = self.log
        with log_.lock:
            if log_.takes_message_runs() and log_.fits_in_active(turn_bound):
                self._place_prepare_runs(ready, outcomes, store_time)
                return
            for item in ready:
                at, messages, overhead, tx = item[0], item[1], item[4], item[5]
                try:
                    reserve_segments(log_, messages, overhead, first=HEADER_SIZE + overhead)
                    if log_.takes_message_runs():
                        self._place_prepare_runs([item], outcomes, store_time)
                        continue
                    self._place_prepare_records(messages, tx, store_time)
                    outcomes[at] = tx, log_.next_offset
                except BaseException as exc:
                    txm.forget(tx.key)
                    if not isinstance(exc, Exception):
                        for rest in ready:
                            if outcomes[rest[0]] is None:
                                txm.forget(rest[5].key)
                        raise
                    outcomes[at] = exc

    def _retried_or_reserved(self, messages: Sequence[Message], producer_group: str,
                             tx_id: str, fresh: bool) -> tuple[OpenTransaction, int] | None:
        """A checked PREPARE's first attempt, when it repeats one (its transaction and
        end), else None once the manager reserved room for it (the manager's lock held);
        raises what refuses it."""
        if not fresh:
            retried = find_retried_prepare(self.tx, tx_id, producer_group, messages,
                                           self.read_record)
            if retried is not None:
                return retried
        try:
            self.tx.reserve(producer_group, tx_id, fresh)
        except DuplicateTransaction:  # ended: a retry of a transaction committed since?
            retried = None if (producer_group, tx_id) in self.tx.open else (
                find_committed_prepare(self.log, self.ended(producer_group, tx_id), tx_id,
                                       producer_group, messages, self.max_record_size))
            if retried is None:
                raise
            return retried
        return None

    def _place_prepare_records(self, messages: Sequence[Message], tx: OpenTransaction,
                               store_time: int) -> None:
        """A registered PREPARE's records placed record by record (both locks held, the
        segments reserved), for a log whose ``on_append`` takes :class:`Record` objects."""
        log_ = self.log
        tx_id, producer_group = tx.tx_id, tx.producer_group
        prep = Record(_PREPARE, store_time=store_time, tx_id=tx_id,
                      producer_group=producer_group, ref_size=len(messages))
        log_.append_locked(prep, encode_mark_into)
        tx.prepare_offset = prep.log_offset
        for m in messages:
            qid = self.queues.pick_queue(m)
            key = m.key or None
            tags = m.tags or None
            body = bytes(m.body)
            rec = Record(_PRE_MESSAGE, store_time=store_time, queue_id=qid,
                         topic=m.topic, tx_id=tx_id, producer_group=producer_group,
                         key=key, tags=tags, properties=m.properties, body=body)
            log_.append_locked(rec)
            tx.messages.append(PreMessage(rec.log_offset, rec.size, m.topic, qid,
                                          key, tags, len(body)))

    def _place_prepare_runs(self, ready: list[tuple], outcomes: list, store_time: int
                            ) -> None:
        """The records of registered PREPAREs (:meth:`_place_checked_prepares`' ``ready``)
        placed as one run of the log (both locks held, the segments reserved): each
        PREPARE and its PRE_MESSAGEs, the same bytes as the record-by-record way, without a
        :class:`Record` or a hand-off per record (neither puts anything into the index).
        A PREPARE whose records are not all placed (a failure part way) is forgotten and
        fails: it leaves an incomplete prepare in the log, which recovery rolls back, and
        nothing in memory; so are the later ones, none of whose records were placed."""
        pick_queue = self.queues.pick_queue
        runs = []
        kept = []  # per message: topic, queue id, key, tags, body size
        for _at, messages, group, tx_id, _overhead, _tx in ready:
            records = [(_PREPARE, -1, -1, -1, len(messages), "", None, None, None, b"")]
            for m in messages:
                qid = pick_queue(m)
                key = m.key or None
                tags = m.tags or None
                body = bytes(m.body)
                records.append((_PRE_MESSAGE, qid, -1, -1, 0, m.topic, key, tags,
                                m.properties, body))
                kept.append((m.topic, qid, key, tags, len(body)))
            runs.append((tx_id, group, records))
        placed: list[tuple[int, int]] = []
        failure: BaseException | None = None
        try:
            self.log.append_tx_runs_locked(store_time, runs, placed)
        except BaseException as exc:  # noqa: BLE001 - the PREPAREs not placed whole fail
            failure = exc
        got = len(placed)
        first = 0  # the PREPARE record of the next transaction in ``placed``
        k = 0  # the next message in ``kept``
        forget = self.tx.forget
        untouched = []
        for item in ready:
            at, messages, tx = item[0], item[1], item[5]
            n = len(messages)
            if first + n < got:  # its PREPARE and every PRE_MESSAGE are placed
                tx.prepare_offset = placed[first][0]
                if n == 1:  # most transactions: no slices, no zip
                    offset, size = last = placed[first + 1]
                    topic, qid, key, tags, body_size = kept[k]
                    tx.messages = [PreMessage(offset, size, topic, qid, key, tags, body_size)]
                else:
                    tx.messages = [PreMessage(offset, size, topic, qid, key, tags, body_size)
                                   for (offset, size), (topic, qid, key, tags, body_size)
                                   in zip(placed[first + 1:first + 1 + n], kept[k:k + n],
                                          strict=True)]
                    last = placed[first + n]
                outcomes[at] = tx, last[0] + last[1]
            elif first >= got and len(ready) > 1 and isinstance(failure, Exception):
                untouched.append(item)  # nothing of it placed: tried again on its own
            else:
                forget(tx.key)
                outcomes[at] = failure
            first += n + 1
            k += n
        if failure is not None and not isinstance(failure, Exception):
            raise failure
        for item in untouched:
            self._place_prepare_runs([item], outcomes, store_time)

    def prepare_done(self, tx: OpenTransaction, failure: BaseException | None = None) -> str:
        """The second half of :meth:`prepare`: its records are durable (the transaction is
        prepared), or their write failed (it is forgotten). Returns the transaction id."""
        with self.tx.lock:
            if tx.prepared:  # a retried PREPARE: a failed wait undoes nothing stored
                return tx.tx_id
            if failure is not None:
                self.tx.forget(tx.key)
            else:
                self.tx.prepared(tx)
        return tx.tx_id

    def prepares_done(self, txs: list[OpenTransaction], failure: BaseException | None = None
                      ) -> list[str]:
        """:meth:`prepare_done` of each of ``txs`` (one flush covered them all), in order,
        under one hold of the manager's lock; each one's transaction id."""
        txm = self.tx
        with txm.lock:
            for tx in txs:
                if tx.prepared:  # a retried PREPARE: a failed wait undoes nothing stored
                    continue
                if failure is not None:
                    txm.forget((tx.producer_group, tx.tx_id))
                else:
                    txm.prepared(tx)
        return [tx.tx_id for tx in txs]

    # ------------------------------------------------------------------ commit / rollback

    def commit(self, producer_group: str, tx_id: str) -> TxState:
        """Commit by group and id; idempotent (a committed transaction answers COMMIT)."""
        return self._end(producer_group, tx_id, TxState.COMMIT, self.commit_tx)

    def rollback(self, producer_group: str, tx_id: str) -> TxState:
        """Roll back by group and id; idempotent, a conflict after commit."""
        return self._end(producer_group, tx_id, TxState.ROLLBACK, self.write_rollback)

    def place_commit(self, producer_group: str, tx_id: str
                     ) -> TxState | tuple[OpenTransaction, int] | None:
        """The first half of :meth:`commit`, which never blocks: the final state when the
        transaction already ended; None when it is being ended or relocated right now (use
        :meth:`commit`, which waits for that); else its REF/TX records and COMMIT are placed
        and it returns the transaction (its ``busy`` lock held) and the log offset they end
        at: call :meth:`commit_done` once that is durable (or failed)."""
        self.check_open()
        # An open transaction's group and id passed the stricter PREPARE checks: only names
        # that are not open need the label checks (for their error; the usual COMMIT finds
        # its transaction open and skips two calls).
        if (type(producer_group) is not str or type(tx_id) is not str
                or (producer_group, tx_id) not in self.tx.open):
            check_label(producer_group, "producer_group", allow_none=False)
            check_label(tx_id, "tx_id", allow_none=False)
        # `busy` is taken under the manager's lock (without waiting, so no lock order
        # matters): whoever ends a transaction holds `busy`, so one look is enough.
        with self.tx.lock:
            found = self.tx.get_for_end(producer_group, tx_id, TxState.COMMIT)
            if isinstance(found, TxState):
                return found
            if not found.busy.acquire(False):
                return None
        try:
            return found, self.place_commit_records(found)
        except BaseException:
            found.busy.release()
            raise

    def place_commits(self, requests: Sequence[tuple[str, str]]
                      ) -> list[TxState | tuple[OpenTransaction, int] | None | Exception]:
        """:meth:`place_commit` of several COMMITs of one event-loop turn (producer group,
        id): each one's outcome, in order, what :meth:`place_commit` returns or the
        exception that fails it alone. The transactions are looked up (and their ``busy``
        locks taken) under one hold of the manager's lock, then their records placed in
        order; two COMMITs of one transaction in a turn meet as they would one by one (the
        second finds it busy)."""
        self.check_open()
        outcomes: list = []
        txm = self.tx
        is_open = txm.open
        with txm.lock:
            for group, tx_id in requests:
                try:
                    found = (is_open.get((group, tx_id))
                             if type(group) is str and type(tx_id) is str else None)
                    # A prepared open transaction is what get_for_end gives a COMMIT:
                    # the usual one skips that call.
                    if found is None or not found.prepared:
                        if found is None:  # as place_commit checks
                            check_label(group, "producer_group", allow_none=False)
                            check_label(tx_id, "tx_id", allow_none=False)
                        found = txm.get_for_end(group, tx_id, _COMMITTED)
                except Exception as exc:  # noqa: BLE001 - it fails this request only
                    outcomes.append(exc)
                    continue
                if type(found) is OpenTransaction and not found.busy.acquire(False):
                    found = None  # being ended or relocated: the caller waits for that
                outcomes.append(found)
        found_at = [at for at, found in enumerate(outcomes) if type(found) is OpenTransaction]
        if found_at:
            try:
                self._place_commits_in_order(found_at, outcomes)
            except BaseException:  # not an Exception: the ones not placed are let go
                for at in found_at:
                    if type(outcomes[at]) is OpenTransaction:
                        outcomes[at].busy.release()
                raise
        return outcomes

    def _place_commits_in_order(self, found_at: list[int], outcomes: list) -> None:
        """The records of a turn's commits, in order (``outcomes[at]`` the transaction,
        its ``busy`` held, for each ``at`` of ``found_at``): consecutive usual commits
        (every message a REF, :func:`_ref_plan`) as one run of the log
        (:meth:`_place_commit_group`), the others each by :meth:`place_commit_records`;
        each outcome set to (transaction, end) or the exception that fails it alone (its
        ``busy`` released)."""
        threshold = self.config.tx_copy_threshold
        group: list[tuple] = []  # (position, transaction, pending messages, records' bytes)
        for at in found_at:
            tx = outcomes[at]
            plan = _ref_plan(tx, threshold)
            if plan is not None:
                group.append((at, tx, *plan))
                continue
            self._place_commit_group(group, outcomes)
            group = []
            self._place_one_commit(at, outcomes)
        self._place_commit_group(group, outcomes)

    def _place_one_commit(self, at: int, outcomes: list) -> None:
        """:meth:`place_commit_records` of the transaction ``outcomes[at]``: its outcome set,
        its ``busy`` released when it fails."""
        tx = outcomes[at]
        try:
            outcomes[at] = tx, self.place_commit_records(tx)
        except BaseException as exc:
            tx.busy.release()
            outcomes[at] = exc
            if not isinstance(exc, Exception):
                raise

    def _place_commit_group(self, group: list[tuple], outcomes: list) -> None:
        """Consecutive usual commits (:meth:`_place_commits_in_order`) placed as one run
        of the log when every one of their REFs surely lands in the active segment with
        the PRE_MESSAGE it names (:meth:`_all_refs` of the whole group), else one at a
        time (:meth:`place_commit_records`: its own reservation, a copy where needed)."""
        if not group:
            return
        log_ = self.log
        rest = group
        if len(group) > 1:
            store_time = now_ms()
            with log_.lock:
                if (log_.failed is None and log_.takes_message_runs()
                        and self._all_refs([m for item in group for m in item[2]],
                                           sum(item[3] for item in group))):
                    rest = self._place_commit_runs(group, outcomes, store_time)
        for item in rest:
            self._place_one_commit(item[0], outcomes)

    def _place_commit_runs(self, group: list[tuple], outcomes: list, store_time: int
                           ) -> list[tuple]:
        """The REF records and COMMIT of each commit of ``group`` in one run of the log
        (log lock held, :meth:`_all_refs` of all of them): the same bytes, queue offsets
        and index items as one :meth:`place_commit_records` after the other, the items
        handed over at once. Returns the commits none of whose records were placed (a
        failure before them: each is then tried on its own, as one by one); one placed in
        part fails (recovery rolls its commit forward)."""
        log_ = self.log
        queues = self.queues
        runs = []
        states = []
        taken: dict[tuple[str, int], int] = {}  # queue offsets this turn took so far
        for _at, tx, pending, _size in group:
            states.append(tx.state)
            tx.state = _COMMITTING
            records = []
            for m in pending:
                q = (m.topic, m.queue_id)
                qoff = taken.get(q)
                if qoff is None:
                    qoff = queues.next_offset(m.topic, m.queue_id)
                taken[q] = qoff + 1
                records.append((_REF_MESSAGE, m.queue_id, qoff, m.offset, m.size, m.topic,
                                m.key, m.tags, None, b""))
            records.append((_COMMIT, -1, -1, tx.prepare_offset, 0, "", None, None, None,
                            b""))
            runs.append((tx.tx_id, tx.producer_group, records))
        placed: list[tuple[int, int]] = []
        failure: BaseException | None = None
        try:
            log_.append_tx_runs_locked(store_time, runs, placed)
        except BaseException as exc:  # noqa: BLE001 - what was placed is taken first
            failure = exc
        items = []
        untouched = []
        first = 0
        advance = queues.advance
        for (at, tx, pending, _size), (tx_id, group_name, records), state in zip(
                group, runs, states, strict=True):
            n = len(records)
            got = min(n, len(placed) - first)  # of its records, those placed
            # Its REFs placed, by position (no slices and zips per commit: most hold one).
            for j in range(min(got, n - 1)):
                offset, size = placed[first + j]
                m = pending[j]
                qoff = records[j][2]
                advance(m.topic, m.queue_id, qoff, m.body_size)
                m.queue_offset = qoff
                items.append((offset + size, _new_tuple(QueueEntry, (
                    m.topic, m.queue_id, qoff, m.offset, m.size, tag_hash(m.tags),
                    store_time, m.key, offset))))
            mine = got > 0
            first += n
            if got == n:
                offset, size = placed[first - 1]
                items.append((offset + size, _new_tuple(TxEnd, (tx_id, group_name, True,
                                                                offset))))
                outcomes[at] = tx, offset + size
            elif mine or not isinstance(failure, Exception):
                tx.busy.release()
                outcomes[at] = failure
            else:  # nothing of it placed: tried again on its own, as it was
                tx.state = state
                untouched.append((at, tx, pending, _size))
        log_.hand_over_locked(items)
        if failure is not None and not isinstance(failure, Exception):
            raise failure
        return untouched

    def commit_done(self, tx: OpenTransaction, failure: BaseException | None = None) -> None:
        """The second half of :meth:`place_commit`: the COMMIT is durable (the transaction
        is finished), or its write failed (the log refuses every later write); either way
        the transaction's ``busy`` lock is released."""
        try:
            if failure is None:
                with self.tx.lock:
                    self.tx.finish(tx.key, TxState.COMMIT)
        finally:
            tx.busy.release()

    def commits_done(self, txs: list[OpenTransaction], failure: BaseException | None = None
                     ) -> list[None]:
        """:meth:`commit_done` of each of ``txs`` (one flush covered them all), in order,
        under one hold of the manager's lock; every ``busy`` lock is released, whatever
        happens."""
        try:
            if failure is None:
                txm = self.tx
                keys = [(tx.producer_group, tx.tx_id) for tx in txs]
                with txm.lock:
                    txm.finish_all(keys, _COMMITTED)
        finally:
            for tx in txs:
                tx.busy.release()
        return [None] * len(txs)

    def _end(self, producer_group: str, tx_id: str, wanted: TxState,
             write: Callable[[OpenTransaction], None]) -> TxState:
        self.check_open()
        check_label(producer_group, "producer_group", allow_none=False)
        check_label(tx_id, "tx_id", allow_none=False)
        with self.tx.lock:
            found = self.tx.get_for_end(producer_group, tx_id, wanted)
        if isinstance(found, TxState):
            return found
        with found.busy:
            with self.tx.lock:  # it may have ended while we waited for `busy`
                again = self.tx.get_for_end(producer_group, tx_id, wanted)
            if isinstance(again, TxState):
                return again
            write(found)
        return wanted

    def commit_tx(self, tx: OpenTransaction) -> None:
        """Write the missing REF/TX records and the COMMIT, wait for durability, forget the
        transaction. Also recovery's roll-forward of a commit a crash cut short."""
        end = self.place_commit_records(tx)
        self.log.wait_durable(end, sync=True)
        with self.tx.lock:
            self.tx.finish(tx.key, TxState.COMMIT)

    def place_commit_records(self, tx: OpenTransaction) -> int:
        """Place the missing REF/TX records and the COMMIT (the caller holds ``tx.busy``);
        returns the log offset they end at. Not committed before that is durable."""
        log_ = self.log
        tx_id, group = tx.tx_id, tx.producer_group
        pending, bodies, size = _uncommitted(tx, self.config.tx_copy_threshold,
                                             self.read_record)
        tail = HEADER_SIZE + len(tx_id.encode()) + len(group.encode())
        store_time = now_ms()
        queues = self.queues
        with log_.lock:
            # A REF or TX record is never larger than its PRE_MESSAGE; segments are
            # created ahead only when the records may not all fit in the active one.
            if not log_.fits_in_active(size + tail):
                log_.reserve_locked([m.size for m in pending] + [tail])
            elif log_.failed is not None:  # as reserve_locked would refuse it
                raise LogFailed(log_.failed)
            tx.state = _COMMITTING  # after the reservation: a refusal changes nothing
            if not bodies and log_.takes_message_runs() and self._all_refs(pending, size + tail):
                self._place_commit_run(tx, pending, store_time)
                return log_.next_offset
            for m in pending:
                topic, qid = m.topic, m.queue_id
                qoff = queues.next_offset(topic, qid)
                ref = Record(_REF_MESSAGE, store_time=store_time, queue_id=qid,
                             queue_offset=qoff, ref_offset=m.offset, ref_size=m.size,
                             topic=topic, tx_id=tx_id, producer_group=group, key=m.key,
                             tags=m.tags)
                if self._must_copy(m, ref):
                    pre = bodies.get(m.offset) or self.read_record(m.offset, m.size)
                    ref.type = RecordType.TX_MESSAGE
                    ref.properties = pre.properties
                    ref.body = pre.body
                log_.append_locked(ref)
                queues.advance(topic, qid, qoff, m.body_size)
                m.queue_offset = qoff
            commit = Record(_COMMIT, store_time=store_time, tx_id=tx_id,
                            producer_group=group, ref_offset=tx.prepare_offset)
            log_.append_locked(commit, encode_mark_into)
            return log_.next_offset

    def _all_refs(self, pending: list[PreMessage], size: int) -> bool:
        """Whether every pending message of a commit gets a REF (:meth:`_must_copy` says
        no to each) and its ``size`` bytes of records fit in the active segment (log lock
        held): the usual commit, whose records :meth:`_place_commit_run` places."""
        active = self.log.active_segment
        if active is None or not self.log.fits_in_active(size):
            return False
        threshold = self.config.tx_copy_threshold
        base = active.base
        for m in pending:
            if m.body_size < threshold or m.offset < base:
                return False
        return True

    def _place_commit_run(self, tx: OpenTransaction, pending: list[PreMessage],
                          store_time: int) -> None:
        """:meth:`place_commit_records`' REF records and COMMIT in one run of the log (log
        lock held; every message gets a REF, :meth:`_all_refs`): the same bytes, queue
        offsets and index items as the record-by-record way, the items handed over at once."""
        log_ = self.log
        queues = self.queues
        tx_id, group = tx.tx_id, tx.producer_group
        records = []
        taken: dict[tuple[str, int], int] = {}  # queue offsets this commit took so far
        for m in pending:
            q = (m.topic, m.queue_id)
            qoff = taken.get(q)
            if qoff is None:
                qoff = queues.next_offset(m.topic, m.queue_id)
            taken[q] = qoff + 1
            records.append((_REF_MESSAGE, m.queue_id, qoff, m.offset, m.size, m.topic, m.key,
                            m.tags, None, b""))
        records.append((_COMMIT, -1, -1, tx.prepare_offset, 0, "", None, None, None, b""))
        placed: list[tuple[int, int]] = []
        try:
            log_.append_tx_records_locked(tx_id, group, store_time, records, placed)
        finally:  # what was placed is taken and handed over, even when a later one failed
            items = []
            for (offset, size), spec, m in zip(placed, records, pending, strict=False):
                qoff = spec[2]
                queues.advance(m.topic, m.queue_id, qoff, m.body_size)
                m.queue_offset = qoff
                items.append((offset + size, _new_tuple(QueueEntry, (
                    m.topic, m.queue_id, qoff, m.offset, m.size, tag_hash(m.tags),
                    store_time, m.key, offset))))
            if len(placed) == len(records):
                offset, size = placed[-1]
                items.append((offset + size, _new_tuple(TxEnd, (tx_id, group, True, offset))))
            log_.hand_over_locked(items)

    def _must_copy(self, m: PreMessage, ref: Record) -> bool:
        """REF versus copy: a small body is copied (a TX record), and so is one whose
        PRE_MESSAGE is not in the active segment or whose REF would not fit in it (a REF
        must never point into another segment, which retention may delete on its own)."""
        active = self.log.active_segment
        if m.body_size < self.config.tx_copy_threshold or active is None or m.offset < active.base:
            return True
        # A REF is never larger than its PRE_MESSAGE: when that fits, no need to measure it.
        return not (self.log.fits_in_active(m.size)
                    or self.log.fits_in_active(encoded_length(ref)))

    def write_rollback(self, tx: OpenTransaction) -> None:
        """Append the transaction's ROLLBACK record, wait until it is durable, and forget
        the transaction."""
        log_ = self.log
        with log_.lock:
            rec = Record(RecordType.ROLLBACK, store_time=now_ms(), tx_id=tx.tx_id,
                         producer_group=tx.producer_group, ref_offset=tx.prepare_offset)
            log_.append_locked(rec, encode_mark_into)
            end = log_.next_offset
        log_.wait_durable(end, sync=True)
        with self.tx.lock:
            self.tx.finish(tx.key, TxState.ROLLBACK)


def _ref_plan(tx: OpenTransaction, threshold: int) -> tuple[list[PreMessage], int] | None:
    """A commit's messages still without a REF and the bytes of its records (their
    PRE_MESSAGEs' and the COMMIT's: a REF is never larger than its PRE_MESSAGE), when
    none of them is copied for its size (``tx_copy_threshold``); else None (its commit
    reads bodies back: :meth:`TxWriter.place_commit_records`)."""
    pending: list[PreMessage] = []
    size = HEADER_SIZE + len(tx.tx_id.encode()) + len(tx.producer_group.encode())
    for m in tx.messages:
        if m.queue_offset < 0:
            if m.body_size < threshold:
                return None
            pending.append(m)
            size += m.size
    return pending, size


def _uncommitted(tx: OpenTransaction, threshold: int, read: Callable[[int, int], Record]
                 ) -> tuple[list[PreMessage], dict[int, Record], int]:
    """A commit's messages still without a REF, the stored records of those that will
    surely be copied (read here, outside the log lock) and the bytes of their
    PRE_MESSAGEs: one pass, where most transactions hold one message too big to copy."""
    pending: list[PreMessage] = []
    bodies: dict[int, Record] = {}
    size = 0
    for m in tx.messages:
        if m.queue_offset < 0:
            pending.append(m)
            size += m.size
            if m.body_size < threshold:
                bodies[m.offset] = read(m.offset, m.size)
    return pending, bodies, size
