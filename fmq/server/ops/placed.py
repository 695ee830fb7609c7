"""What the send pipeline (:mod:`fmq.server.ops.batcher`) places, by kind, and how each kind is
answered once the flush covering it is durable (or failed): a batch of send requests
(:class:`PlacedSends`), and the transaction writes of one event-loop turn
(:class:`PlacedWrites`). The acknowledger queues both in log order and needs only their
``end``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from fmq import native
from fmq.message import Message, SendResult
from fmq.server.net import plain_sends

logger = logging.getLogger("fmq.server")

#: ``answer_sends`` of the compiled twin where it runs, else the reference.
_ANSWER_SENDS = native.choose(plain_sends).answer_sends

#: Turns a request's results into its answer (on the event loop).
Reply = Callable[[Sequence[SendResult]], Any]

#: Called on the event loop with a request's future once it ended: the session's answer,
#: written at once instead of from the future's done callback in the next loop turn.
Answered = Callable[[asyncio.Future], Any]

#: One send request: its messages, the future its answer goes to, how to make that answer
#: and who writes it (None: whoever awaits the future). A plain send of a session's short
#: step has no future: ``(messages, None, PlainSends, request id, opcode, request bytes)``
#: (:mod:`fmq.server.net.plain_sends`), answered into its session's answers.
SendRequest = tuple[list[Message], asyncio.Future, Reply | None, Answered | None]

#: A write other than a send (a transaction's records): places its records without waiting
#: and returns a token and the log offset they end at, or (answer, None) when it placed
#: nothing and is answered at once.
Place = Callable[[], tuple[Any, int | None]]

#: Places the writes of one kind of a turn together (:meth:`SendBatcher.submit_grouped`):
#: given their items, returns each one's outcome, in order: what a :data:`Place` returns,
#: or the exception that fails that write alone.
PlaceAll = Callable[[list[Any]], Sequence[tuple[Any, int | None] | Exception]]

#: Called on the event loop with the token once the write is durable (failure None: its
#: return value is the answer) or failed (the failure: undo what memory holds of it).
Finish = Callable[[Any, BaseException | None], Any]

#: One write request: how to place it, the future its answer goes to, how to finish it and
#: who writes its answer (None: whoever awaits the future).
WriteRequest = tuple[Place, asyncio.Future, Finish, Answered | None]


class FinishTogether:
    """A :data:`Finish` that also finishes several writes of its kind at once: a turn's
    PREPAREs (or COMMITs) that one flush covered are finished by one ``together(tokens,
    failure)`` call (one hold of the transaction manager's lock for all of them, where
    ``one`` takes it per write), which returns each one's answer in order, as ``one``
    would one after the other."""

    __slots__ = ("one", "together")

    def __init__(self, one: Finish,
                 together: Callable[[list[Any], BaseException | None], list[Any]]) -> None:
        self.one = one
        self.together = together

    def __call__(self, token: Any, failure: BaseException | None) -> Any:
        return self.one(token, failure)


def answer_now(answered: Answered, fut: asyncio.Future) -> None:
    """``answered(fut)``; a bug in it is logged and stops no other request's answer (as an
    exception in a done callback is logged by the loop)."""
    try:
        answered(fut)
    except Exception:  # noqa: BLE001 - the other requests of the flush still get theirs
        logger.exception("answering a request failed")


def answer_placed(done: list[Placed], failure: BaseException | None, durable: bool) -> None:
    """Answer what a flush covered, on the event loop; ``durable``: the failure came after
    the local fdatasync (the followers' wait)."""
    for placed in done:
        placed.answer(failure, durable)


class PlacedSends:
    """A batch of send requests placed together, waiting for the flush covering ``end``."""

    __slots__ = ("end", "requests", "results")

    def __init__(self, end: int, requests: list[SendRequest], results: Sequence[SendResult]
                 ) -> None:
        self.end = end
        self.requests = requests
        self.results = results  # every request's, in request order (a list or packed)

    def answer(self, failure: BaseException | None, durable: bool) -> None:
        """Each request gets its results, or ``failure``: a send is acknowledged only when
        all of it succeeded (``durable`` changes nothing for sends). A plain send (no
        future: the session's short step) is framed into its session's answers
        (:func:`fmq.server.net.plain_sends.answer_sends`, compiled where the twins are);
        any other through its future, by :func:`_answer_request`."""
        answer_sends(self.requests, self.results, failure)


def answer_sends(requests: list[SendRequest], results: Sequence[SendResult],
                 failure: BaseException | None) -> None:
    """Answer send ``requests`` (plain or not) with their ``results``, or ``failure``."""
    _ANSWER_SENDS(requests, results, failure, _answer_request)


def _answer_request(item: SendRequest, mine: Sequence[SendResult] | None,
                    failure: BaseException | None) -> None:
    """A send request of the general way ended: its future gets its results through its
    ``reply`` (``mine``), or ``failure``; then whoever answers it does."""
    _msgs, fut, reply, answered = item
    if not fut.done():
        if failure is not None:
            fut.set_exception(failure)
        else:
            try:
                fut.set_result(reply(mine) if reply is not None else mine)
            except Exception as exc:  # noqa: BLE001 - a bug fails its request only
                fut.set_exception(exc)
    if answered is not None:
        answer_now(answered, fut)


class PlacedWrites:
    """The writes of one turn that placed records (transactions' PREPARE and COMMIT),
    waiting for the flush covering ``end``, the last one's end."""

    __slots__ = ("end", "writes")

    def __init__(self) -> None:
        self.end = 0
        #: future, finish, token, who writes the answer
        self.writes: list[tuple[asyncio.Future, Finish, Any, Answered | None]] = []

    def add(self, fut: asyncio.Future, finish: Finish, token: Any, end: int,
            answered: Answered | None = None) -> None:
        self.writes.append((fut, finish, token, answered))
        # A retried PREPARE's records (its first attempt's) may end before those of a
        # write placed earlier in the turn: the turn waits for the furthest end.
        if end > self.end:
            self.end = end

    def answer(self, failure: BaseException | None, durable: bool) -> None:
        """``durable``: the failure came after the local fdatasync (the followers' wait),
        so each write's state is that of a durable write. Consecutive writes of one
        :class:`FinishTogether` are finished by one call, before their answers go."""
        writes = self.writes
        at, count = 0, len(writes)
        while at < count:
            fut, finish, token, answered = writes[at]
            if type(finish) is not FinishTogether:
                _finish_write(fut, finish, token, failure, durable)
                if answered is not None:
                    answer_now(answered, fut)
                at += 1
                continue
            stop = at + 1
            while stop < count and writes[stop][1] is finish:
                stop += 1
            _finish_together(writes[at:stop], finish, failure, durable)
            at = stop


#: What the acknowledger queues: a batch of sends or a turn's writes.
Placed = PlacedSends | PlacedWrites


def _finish_write(fut: asyncio.Future, finish: Finish, token: Any,
                  failure: BaseException | None, durable: bool) -> None:
    try:
        # Stored locally (only the followers failed): the transaction is prepared or
        # committed here, as a worker thread's write was; the request still fails.
        answer = finish(token, None if durable else failure)
    except Exception as exc:  # noqa: BLE001 - a bug fails its request only
        failure = failure or exc
    if fut.done():
        return
    if failure is not None:
        fut.set_exception(failure)
    else:
        fut.set_result(answer)


def _finish_together(run: list[tuple[asyncio.Future, Finish, Any, Answered | None]],
                     finish: FinishTogether, failure: BaseException | None,
                     durable: bool) -> None:
    """:func:`_finish_write` of each write of ``run`` (one ``finish``), finished by one
    ``finish.together`` call; a bug in it fails these requests only."""
    try:
        answers = finish.together([w[2] for w in run], None if durable else failure)
    except Exception as exc:  # noqa: BLE001 - a bug fails these requests only
        failure = failure or exc
        answers = None
    for i, (fut, _finish, _token, answered) in enumerate(run):
        if not fut.done():
            if failure is not None:
                fut.set_exception(failure)
            else:
                fut.set_result(answers[i])
        if answered is not None:
            answer_now(answered, fut)
