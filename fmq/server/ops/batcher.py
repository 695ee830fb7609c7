"""The send pipeline: the sends of one event-loop turn, from every session, are placed in
the log together, and one thread acknowledges them flush by flush.

* On the event loop, at the end of each turn, everything submitted in that turn is placed
  in the log (:meth:`Broker.place_batch`: queue offsets, encoding, all or none per batch),
  without waiting for the disk.
* In flush mode ``sync`` without followers to wait for (and :attr:`SendBatcher.LOOP_FLUSH`
  on, the default), the loop then leads the flush itself
  (:mod:`fmq.server.ops.loop_flush`): a flusher thread that needs no interpreter
  lock writes and fdatasyncs what was placed, an eventfd wakes the loop, which answers
  every batch that flush covered and starts the next one.
* Otherwise (and always in flush mode ``async``, or ``sync`` acknowledgement, whose
  followers are waited for in a thread: :class:`ReplicaStage`) the *acknowledger* thread waits until the group
  commit covers what was placed and hands every batch that flush covered back to the event
  loop in one call.

Placing is pure Python work: in another thread it would only contend for the interpreter
lock with the event loop (a placer thread cost more in lock hand-offs than it saved). The
disk wait is where a thread pays off: while one fsync runs, the loop decodes and places the
next requests, so the next flush carries everything that arrived during this one. Every
message is checked when its request arrives (then not again), so one bad message fails only
its own request, as does a sequence the dedup window refuses (:meth:`Broker.place_requests`
places each request all or none, and decides whether a batch needs the window); what can
still fail a batch (an index that refuses writes, a failed fsync, a closed broker) fails
every request in it, and none of them was acknowledged.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from fmq.engine.broker import Broker
from fmq.engine.idempotence import bind_principal
from fmq.errors import InvalidArgument, ServerBusy
from fmq.message import Message
from fmq.server.net.answer_writes import AnswerWrites
from fmq.server.ops.loop_flush import LoopFlush
from fmq.server.ops.placed import (
    Answered,
    Finish,
    Place,
    PlaceAll,
    Placed,
    PlacedSends,
    PlacedWrites,
    Reply,
    SendRequest,
    WriteRequest,
    answer_now,
    answer_placed,
    answer_sends,
)
from fmq.threadname import name_os_thread


class SendBatcher:
    """Coalesces the :meth:`submit` calls of an event-loop turn into ``place_batch`` calls
    and answers them flush by flush."""

    MAX_BATCH = 4096  # messages per place_batch
    MAX_BATCH_BYTES = 16 * 1024 * 1024  # body bytes per place_batch (it holds the log lock)
    #: Whether the loop leads the flushes where it can (:mod:`fmq.server.ops.loop_flush`);
    #: False: the acknowledger thread does, as with followers or flush mode ``async``. On:
    #: row 1 ran 1.09x-1.15x faster with it on a quiet machine, 0.79x on one whose cores
    #: were oversubscribed (docs/performance.md, "The event loop leads the flushes").
    LOOP_FLUSH = True

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop,
                 max_batch_messages: int,
                 wait_replicated: Callable[[int], None] | None = None,
                 loop_flush: bool | None = None) -> None:
        """``loop_flush``: whether the loop leads the flushes where it can (None:
        :attr:`LOOP_FLUSH`)."""
        self.broker = broker
        self.loop = loop
        self.max_batch_messages = max_batch_messages
        #: This turn's requests, not placed yet: the sends (placed first), the other writes.
        self._sends: list[SendRequest] = []
        self._writes: list[WriteRequest] = []
        self._scheduled = False
        self._placed_cond = threading.Condition()
        #: Placed batches of sends and turns' writes waiting for their flush, in log order.
        self._placed: deque[Placed] = deque()
        #: The highest end handed over: the deque's ends never go down (see _hand_over).
        self._last_end = 0
        self._stopping = False
        self._acker_waiting = False  # it waits for placements (not for the disk)
        #: Held while a flush's requests are answered: a connection's answers are written
        #: once (the sessions look at it).
        self.answer_writes = AnswerWrites()
        #: Flushes the acknowledger handed back, not answered yet: (placed, failure,
        #: durable), in log order. The loop answers them at the first of: its wake-up
        #: callback, the next read of any session (:meth:`answer_handed_back`), the end of
        #: its next turn's placement.
        self.handed_back: deque[tuple[list[Placed], BaseException | None, bool]] = deque()
        self._wake_sent = False  # a wake-up callback is scheduled and has not run yet
        #: The loop's own flushes (None: the acknowledger thread's).
        self._loop_flush: LoopFlush | None = None
        self._acknowledger: threading.Thread | None = None
        if loop_flush is None:
            loop_flush = self.LOOP_FLUSH
        if (loop_flush and wait_replicated is None
                and broker.config.flush_mode == "sync"):
            self._loop_flush = LoopFlush(broker, loop, self._placed, self._answer_flushed)
        else:
            self._acknowledger = threading.Thread(target=self._acknowledge_loop,
                                                  name="fmq-send-acker", daemon=True)
            self._acknowledger.start()
        #: ``sync`` acknowledgement: flushed batches wait here for the followers, in a
        #: thread of their own so that the next flush is not held up meanwhile.
        self._replicated: ReplicaStage | None = None
        if wait_replicated is not None:
            self._replicated = ReplicaStage(wait_replicated, self._hand_back)

    def submit(self, msgs: list[Message], reply: Reply | None = None,
               principal: str | None = None, checked: bool = False) -> asyncio.Future:
        """Queue ``msgs`` for this turn's batch; the future ends with their results once
        they are durable (``reply(results)`` when given: the request's answer, made without
        a task or a second future). Raises at once (nothing queued) for a message that
        cannot be stored. ``principal``: the user who sent them (None without users), the
        owner of their producer ids and message ids. ``checked``: the caller made
        ``Broker.check_messages``' checks of ``msgs`` in this turn (the Kafka door makes
        them per partition, with its decoder's knowledge of them)."""
        limit = self.max_batch_messages
        if len(msgs) > limit:  # the wire checks this before decoding; embedded callers here
            raise InvalidArgument(f"a batch of {len(msgs)} messages is over the limit "
                                  f"(max_batch_messages) of {limit}; send smaller batches")
        self._check_running()
        if not checked:
            self.broker.check_messages(msgs)
        if principal is not None:
            msgs = bind_principal(msgs, principal, self.broker.config,
                                  self.broker.topics.queue_count)
        fut = self._this_turn()
        self._sends.append((msgs, fut, reply, None))
        return fut

    def plain_queue(self) -> list[SendRequest]:
        """This turn's sends, for a session's plain SENDs and SEND_BATCHes to join as they
        are taken from its frames (:meth:`fmq.server.net.plain_sends.PlainSends.take`: the
        messages passed ``check_message`` as they were decoded, and the broker's checks of
        their topic and record size, ``max_batch_messages`` and the list limit there;
        each entry ``(messages, None, plain, request id, opcode, request bytes)``, answered
        into its session's answers once durable, without a future). Placement is scheduled
        for the end of this turn. Raises ServerBusy (nothing queued) once the server stops."""
        if self._stopping:
            self._check_running()  # raises its error
        if not self._scheduled:  # _this_turn's, inline
            self._scheduled = True
            self.loop.call_soon(self._place)
        return self._sends

    def submit_write(self, place: Place, finish: Finish) -> asyncio.Future:
        """Queue a write that is not a send (a transaction's PREPARE or COMMIT) for the end
        of this turn: ``place()`` runs after the turn's sends, the same flush covers both,
        and the future ends with ``finish(token, None)`` once the write is durable (and
        replicated in ``sync`` acknowledgement); an exception of ``place()`` fails it at
        once. The write's records must need the fdatasync: only for ``flush_mode`` sync."""
        self._check_running()
        fut = self._this_turn()
        self._writes.append((place, fut, finish, None))
        return fut

    def submit_grouped(self, place_all: PlaceAll, item: Any, finish: Finish,
                       answered: Answered, key: Any = None) -> asyncio.Future:
        """:meth:`submit_write` of a write placed with the turn's others of its kind: the
        turn's consecutive writes with the same ``place_all`` are placed by one
        ``place_all(items)`` call (a transaction's PREPAREs, or COMMITs, of many producers:
        :mod:`fmq.server.ops.tx_ops`), which returns each one's outcome as ``place()``
        would (token and end, or the exception that fails it alone). Answered by
        ``answered(fut)`` as :meth:`answer_directly` has it.

        ``key``: the state the write touches (a transaction's group and id;
        :data:`UNSHARED`: none another write of the turn can name; None: not said). When
        every write of a turn is grouped and says a key no other one says, the turn's
        writes are placed kind by kind (:func:`by_kind`): producers whose COMMIT comes with
        their next PREPARE interleave the two kinds, which would otherwise be placed one
        by one."""
        if self._stopping:
            self._check_running()  # raises its error
        if not self._scheduled:  # _this_turn's, inline
            self._scheduled = True
            self.loop.call_soon(self._place)
        fut = self.loop.create_future()
        self._writes.append(((place_all, item, key), fut, finish, answered))
        return fut

    def answer_directly(self, fut: asyncio.Future, answered: Answered) -> None:
        """Have ``answered(fut)`` called as soon as the request ``fut`` ends, in the same
        loop turn: the session writes its answer there, where a done callback on the future
        would wait for the next turn (a loop callback per request). ``fut``: the future a
        :meth:`submit` or :meth:`submit_write` of this turn returned, the latest one; any
        other future gets a done callback."""
        for queued in (self._sends, self._writes):
            if queued and queued[-1][1] is fut:
                queued[-1] = (*queued[-1][:3], answered)
                return
        fut.add_done_callback(answered)

    def _check_running(self) -> None:
        if self._stopping:
            raise ServerBusy("the server is shutting down; retry against the restarted server")

    def _this_turn(self) -> asyncio.Future:
        """A future for a request placed at the end of this event-loop turn."""
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._place)
        return self.loop.create_future()

    def close(self) -> None:
        """Stop the acknowledger, or the loop's flushes, once everything placed is answered
        (the server stops; called from a thread other than the event loop's)."""
        with self._placed_cond:
            self._stopping = True
            self._placed_cond.notify()
        if self._loop_flush is not None:
            self._loop_flush.close()
        if self._acknowledger is not None:
            self._acknowledger.join()
        if self._replicated is not None:
            self._replicated.close()

    # ------------------------------------------------------------------ the event loop

    def _place(self) -> None:
        self._scheduled = False
        try:
            self._place_turn()
        finally:
            if self._loop_flush is not None:
                # Answers a flush that ended meanwhile, and starts one for this turn's
                # sends unless one is under way (its end starts the next at once).
                self._loop_flush.look()
            if self.handed_back:
                self.answer_handed_back()

    def _place_turn(self) -> None:
        sends, self._sends = self._sends, []
        for batch in _split(sends, self.MAX_BATCH, self.MAX_BATCH_BYTES):
            msgs = [m for item in batch for m in item[0]]
            try:
                results, end, refused = self.broker.place_requests(
                    msgs, [len(item[0]) for item in batch], packed=True)
                batch = self._refuse(batch, refused)
            except Exception as exc:  # noqa: BLE001 - it fails these requests only
                PlacedSends(0, batch, []).answer(exc, False)
                continue
            self._hand_over(PlacedSends(end, batch, results))
        if self._writes:
            self._place_writes()

    def _place_writes(self) -> None:
        writes, self._writes = self._writes, []
        if len(writes) > 2:
            writes = by_kind(writes)
        placed = PlacedWrites()  # one hand-over for the turn's writes
        at, count = 0, len(writes)
        while at < count:
            place = writes[at][0]
            if type(place) is not tuple:  # a write of its own
                outcomes = (_outcome(place),)
                run = writes[at:at + 1]
            else:  # a run of grouped writes of one kind, placed by one call
                place_all = place[0]
                stop = at + 1
                while (stop < count and type(writes[stop][0]) is tuple
                       and writes[stop][0][0] is place_all):
                    stop += 1
                run = writes[at:stop]
                try:
                    outcomes = place_all([w[0][1] for w in run])
                except Exception as exc:  # noqa: BLE001 - it fails these requests only
                    outcomes = (exc,) * len(run)
            at += len(run)
            for (_place, fut, finish, answered), outcome in zip(run, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    if not fut.done():
                        fut.set_exception(outcome)
                    if answered is not None:
                        answer_now(answered, fut)
                    continue
                token, end = outcome
                if end is None:  # nothing written: answered now, or by the awaitable it gave
                    if asyncio.isfuture(token):
                        token.add_done_callback(functools.partial(copy_outcome, fut))
                        if answered is not None:
                            fut.add_done_callback(answered)
                        continue
                    if not fut.done():
                        fut.set_result(token)
                    if answered is not None:
                        answer_now(answered, fut)
                    continue
                placed.add(fut, finish, token, end, answered)
        if placed.writes:
            self._hand_over(placed)

    def answer_handed_back(self) -> None:
        """Answer every flush handed back so far (on the event loop), each connection's
        answers written in one piece once all are made.

        The acknowledger's wake-up callback waits for the loop's next round of events: when
        the flush ends while the loop reads, the requests that arrived meanwhile (a socket
        each, the clients answered by the previous flush) are read first. So each read,
        and each turn's placement, answers what is already durable before its own work
        (``handed_back`` is looked at first: an empty deque costs one test)."""
        due = self.handed_back
        if not due:
            return
        with self.answer_writes:
            while due:
                done, failure, durable = due.popleft()
                answer_placed(done, failure, durable)

    def _answer_flushed(self, done: list[Placed], failure: BaseException | None) -> None:
        """Answer the batches a flush of the loop's covered (on the loop), as a hand-back
        is answered."""
        self.handed_back.append((done, failure, False))
        self.answer_handed_back()

    def _woken(self) -> None:
        self._wake_sent = False  # before draining: a hand-back from now on wakes again
        self.answer_handed_back()

    def _hand_over(self, placed: Placed) -> None:
        """Queue placed requests for the acknowledger, or the loop's flushes (in log order:
        all placing is here).

        A retried PREPARE is answered from its first attempt, whose records end before
        what this turn placed: its entry is queued at the highest end so far, so that the
        acknowledger, which waits for the last entry's end and releases every entry up to
        it, always finds the entries in order (it spun without releasing anything before)."""
        if placed.end < self._last_end:
            placed.end = self._last_end
        self._last_end = placed.end
        if self._loop_flush is not None:  # read on the loop only
            self._placed.append(placed)
            return
        with self._placed_cond:
            self._placed.append(placed)
            if self._acker_waiting:  # else it is flushing and looks again after
                self._placed_cond.notify()

    @staticmethod
    def _refuse(batch: list[SendRequest], refused: dict[int, Exception]
                ) -> list[SendRequest]:
        """Fail the requests an idempotent producer's sequence refused (nothing of them
        was stored, so at once); the others, whose results follow, stay."""
        if not refused:
            return batch
        for i, exc in refused.items():
            item = batch[i]
            if item[1] is None:  # a plain send (none carries a sequence: never here)
                answer_sends([item], [], exc)
                continue
            fut, answered = item[1], item[3]
            if not fut.done():
                fut.set_exception(exc)
            if answered is not None:
                answer_now(answered, fut)
        return [item for i, item in enumerate(batch) if i not in refused]

    # ------------------------------------------------------------------ the acknowledger

    def _acknowledge_loop(self) -> None:
        name_os_thread()
        placed = self._placed
        while True:
            with self._placed_cond:
                while not placed:
                    if self._stopping:
                        return
                    self._acker_waiting = True
                    self._placed_cond.wait()
                    self._acker_waiting = False
                end = placed[-1].end
            failure: BaseException | None = None
            try:
                self.broker.wait_durable(end)
            except BaseException as exc:  # noqa: BLE001 - a failed fsync fails these requests
                failure = exc
            with self._placed_cond:
                done = []
                while placed and placed[0].end <= end:
                    done.append(placed.popleft())
            if self._replicated is not None and failure is None:
                self._replicated.put(end, done)
            else:
                self._hand_back(done, failure)

    def _hand_back(self, done: list[Placed], failure: BaseException | None,
                   durable: bool = False) -> None:
        """Queue a flush's requests for their answers (from the acknowledger's or the
        replica stage's thread) and wake the loop, once until it has looked."""
        self.handed_back.append((done, failure, durable))
        if self._wake_sent:
            return
        self._wake_sent = True
        try:
            self.loop.call_soon_threadsafe(self._woken)
        except RuntimeError:  # the loop is closed: a shutdown abandoned these requests
            pass


class ReplicaStage:
    """The ``sync`` acknowledgement's second stage: batches the primary flushed wait until
    enough followers hold them; one wait covers every batch queued meanwhile."""

    def __init__(self, wait_replicated: Callable[[int], None],
                 hand_back: Callable[[list[Placed], BaseException | None, bool], None]
                 ) -> None:
        self._wait_replicated = wait_replicated
        self._hand_back = hand_back
        self._cond = threading.Condition()
        self._queued: list[tuple[int, list[Placed]]] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="fmq-replica-acker",
                                        daemon=True)
        self._thread.start()

    def put(self, end: int, done: list[Placed]) -> None:
        with self._cond:
            self._queued.append((end, done))
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                while not self._queued:
                    if self._stopping:
                        return
                    self._cond.wait()
                queued, self._queued = self._queued, []
            failure: BaseException | None = None
            try:
                self._wait_replicated(queued[-1][0])
            except BaseException as exc:  # noqa: BLE001 - NotEnoughReplicas fails them all
                failure = exc
            self._hand_back([item for _end, done in queued for item in done], failure, True)


def _split(pending: list[SendRequest], max_messages: int, max_bytes: int
           ) -> list[list[SendRequest]]:
    """Requests in arrival order, cut into batches of at most ``max_messages`` messages and
    about ``max_bytes`` body bytes (a request is never split)."""
    batches: list[list[SendRequest]] = []
    batch: list[SendRequest] = []
    count = size = 0
    for item in pending:
        n = len(item[0])
        if batch and (count + n > max_messages or size >= max_bytes):
            batches.append(batch)
            batch, count, size = [], 0, 0
        batch.append(item)
        count += n
        for m in item[0]:  # a loop, not sum() of a generator: a SEND has one message
            size += len(m.body)
    if batch:
        batches.append(batch)
    return batches


def _outcome(place: Place) -> tuple[Any, int | None] | Exception:
    """``place()``'s token and end, or the exception it raised (which fails its request)."""
    try:
        return place()
    except Exception as exc:  # noqa: BLE001 - it fails this request only
        return exc


def copy_outcome(to: asyncio.Future, source: asyncio.Future) -> None:
    """End ``to`` as ``source`` ended."""
    if to.done():
        return
    if source.cancelled():
        to.cancel()
    elif source.exception() is not None:
        to.set_exception(source.exception())
    else:
        to.set_result(source.result())


#: The ``key`` of a grouped write that touches no state another write of its turn can name
#: (a PREPARE whose transaction id the server makes).
UNSHARED = object()


def by_kind(writes: list) -> list:
    """A turn's writes with those of one kind brought together, each kind where its first
    write was and in arrival order within it, when that changes no outcome: every write is
    grouped and says the state it touches, and no two say the same (so no write's outcome
    depends on another's having been placed first). Else the writes as they came."""
    kinds: dict[Any, list] = {}
    keys: set = set()
    for write in writes:
        place = write[0]
        if type(place) is not tuple:
            return writes
        key = place[2]
        if key is not UNSHARED:
            if key is None or key in keys:
                return writes
            keys.add(key)
        run = kinds.get(place[0])
        if run is None:
            run = kinds[place[0]] = []
        run.append(write)
    if len(kinds) < 2:
        return writes
    return [write for run in kinds.values() for write in run]
