"""A PULL answered in the step that read its frame: the short step of the common pull, a
consumer following its queue whose messages are there (issue 41 item 1).

The general way (:func:`fmq.server.ops.handlers._pull`) makes each PULL a task: a coroutine,
a reply room entered and left as an ``async with``, a field dict, the schema's codec for
the answer and a done callback a loop turn later. A pull answered at once needs none of
that: :func:`answer_pull_now` reserves its reply bytes, reads the queue on the event loop
as :func:`~fmq.server.ops.pull_reads.pull_on_loop` does, and frames the answer from the
encoded messages (the list count, their bytes, the range) in one ``struct`` pack and a
join. Whatever would make the general way wait or read elsewhere declines it, with nothing
answered, for the general way to run from the start:

* no reply room now (the general way waits for it), or one message larger than the room;
* a read that is not among the log's last ``pull_on_loop_bytes`` (or they are 0), or an
  index behind the flushed log with no long poll: the general way reads in a thread;
* ``max_messages`` of 0: the general way gives the error.

A pull that finds nothing and may wait (``wait_ms`` > 0, the long poll) took its wake-up
events before it read, as the general way does (a pull at or past the end of its queue's
tail in memory, a consumer that caught up, reads nothing else: no reply room, no read of the
queue, :meth:`~fmq.engine.reads.Reader.nothing_from`), and waits on them with a timer and no task
(:func:`wait_then`); woken, it is read and answered by this step again (``deadline``), as
the general way's loop reads after its wait: a message, or nothing once the time is up, the
session closes or the server stops; or it waits again. A woken pull the step declines goes
on as the general way's task from its read (:func:`fmq.server.ops.handlers.pull_after_wait`).

The PULLs of one read of frames that the step answers at once are written together
(:class:`GatheredAnswers`): a pipelined consumer's window costs one ``write``. An error of the read itself is answered
as the general way answers it (the same read, the same exception,
:func:`~fmq.protocol.encode_error`).
tests/server/test_plain_read_step.py compares the two ways' answers.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import NamedTuple, Protocol

from fmq.engine.reads import NotInMemory
from fmq.errors import FMQError
from fmq.protocol import PROTOCOL_VERSION, encode_error
from fmq.protocol.framing import FLAG_RESPONSE
from fmq.protocol.read_requests import PullFields
from fmq.server.context import ServerContext
from fmq.server.net.reply_account import ReplyAccount
from fmq.server.ops.pull_reads import pull_now
from fmq.server.ops.wakeups import PullEvents

logger = logging.getLogger("fmq.server")

#: The answer's length prefix, header and list count; its range follows the messages.
_HEAD = struct.Struct(">IBBHQI").pack
_RANGE = struct.Struct(">QQ").pack
#: The length prefix counts the header, the list count and the range beside the messages.
_FIXED = 12 + 4 + 16
#: Messages a pull reads at most, whatever it asks for (as the general way).
MAX_PULLED = 4096


class PullWait(NamedTuple):
    """A PULL the step read and found nothing for, left to wait: the wake-up events it
    took before reading, when its long poll ends, and the offset to read from then."""

    events: PullEvents
    deadline: float
    offset: int


class PullSession(Protocol):
    """What the step uses of the session the PULL came on."""

    id: int
    closing: bool
    replies: ReplyAccount

    def send(self, data: bytes, reserved: int = 0) -> None: ...

    def send_parts(self, parts: list[bytes], reserved: int = 0) -> None: ...


def answer_pull_now(ctx: ServerContext, session: PullSession, op: int, rid: int,
                    fields: PullFields, deadline: float | None = None) -> bool | PullWait:
    """Answer the PULL ``fields`` of request ``rid`` now if it is answered at once (see the
    module doc): True when answered, False when left to the general way (nothing of it
    done but the shared queues' note and its wake-up events taken), or its
    :class:`PullWait` when it is to wait. ``deadline``: a long poll woken from its wait
    (:func:`wait_then`), counted as a request already, reading again until then."""
    topic, queue_id, offset, max_messages, wait_ms = fields
    config = ctx.config
    window = config.pull_on_loop_bytes
    if not window or max_messages < 1:
        return False
    now = ctx.loop.time()
    if deadline is None:
        poll = wait_ms > 0 and config.max_wait_ms > 0  # the general way's long poll
        may_wait = poll
    else:  # as the general way's loop after a wait: an answer now unless time is left
        poll = deadline > now
        may_wait = poll and not ctx.stopping and not session.closing
    counters = ctx.counters
    if may_wait:
        # Taken before the read, so that a write landing between the read and the wait
        # wakes it.
        events = ctx.wakeups.events(topic, queue_id, session.id)
        try:
            resume = ctx.broker.reads.nothing_from(topic, queue_id, offset)
        except FMQError:  # the read below meets it again, and answers it
            resume = None
        if resume is not None:  # the queue's tail in memory ends at or before the offset
            counters.pull_reads += 1
            counters.pull_reads_on_loop += 1
            return PullWait(events, now + ctx.wait_ms(wait_ms) if deadline is None
                            else deadline, resume)
    else:
        events = None
    # The reply room, as the general way's ReplyRoom takes it (without waiting).
    share = session.replies.share
    budget = share.budget
    want = config.max_reply_size
    largest = ctx.largest_reply
    granted = budget.try_take(share, want if want < largest else largest, want)
    if not granted:
        return False
    keep = ctx.shared_queues.note(topic, queue_id, session.id, now)
    try:
        items, count, lo, hi, size, resume = pull_now(
            ctx.broker, ctx.encoded, keep, topic, queue_id, offset,
            max_messages if max_messages < MAX_PULLED else MAX_PULLED, None, granted,
            resident=window, may_wait=poll)
    except NotInMemory:
        budget.release(share, granted)
        return False
    except Exception as exc:  # noqa: BLE001 - the general way's answer to the same error
        budget.release(share, granted)
        counters.pull_reads += 1
        if deadline is None:
            counters.requests += 1
            counters.by_op[op] += 1
        counters.failed(op, exc)
        if not isinstance(exc, FMQError):
            logger.error("request PULL failed unexpectedly", exc_info=exc)
        session.send(encode_error(op, rid, exc))
        return True
    if size > granted:  # the general way reads again with room for the one message
        budget.release(share, granted)
        return False
    counters.pull_reads += 1
    counters.pull_reads_on_loop += 1
    if not count and may_wait:
        budget.release(share, granted)
        return PullWait(events, now + ctx.wait_ms(wait_ms) if deadline is None else deadline,
                        resume)
    budget.release(share, granted - size)  # the answer holds the rest until written
    if deadline is None:
        counters.requests += 1
        counters.by_op[op] += 1
    data = items.data
    # The messages as the read made them (or another group's answer kept them), behind
    # and before the frame's own bytes: not copied to put a header before them.
    session.send_parts([_HEAD(_FIXED + len(data), PROTOCOL_VERSION, op, FLAG_RESPONSE, rid,
                              count), data, _RANGE(lo, hi)], size)
    return True


def wait_then(ctx: ServerContext, wait: PullWait, woken: Callable[[], None]) -> None:
    """Call ``woken()`` once, when data lands in the waiting pull's queue, its session
    closes, the server stops or its deadline passes (within a tick after it,
    :mod:`~fmq.server.ops.pull_deadlines`): the general way's wait
    (:meth:`ServerContext.wait_for_data`) without its task and future, counted alike."""
    qev, sev = wait.events
    wakeups = ctx.wakeups
    counters = ctx.counters
    ended = False

    def wake() -> None:
        nonlocal ended
        if ended:
            return
        ended = True
        wakeups.waiting -= 1
        bucket.pop(wake, None)
        qev.forget(wake)
        sev.forget(wake)
        counters.pull_wakeups += qev.is_set() and not ctx.stopping
        woken()

    wakeups.waiting += 1
    # Before on_set, which may call at once. The deadline's timer is shared
    # (pull_deadlines): none armed per wait.
    bucket = wakeups.deadlines.add(ctx.loop, wait.deadline, wake)
    qev.on_set(wake)
    sev.on_set(wake)


class GatheredAnswers:
    """The answers of the PULLs of one read of a connection's frames (a pipelined consumer's
    window) that the step answers at once, written to the session in one piece
    (:meth:`flush`): one ``write`` for the run instead of one per PULL. The session's
    requests flush it before any other request of the run may answer or close the
    session, and at the run's end, in the same loop turn."""

    __slots__ = ("session", "id", "replies", "_parts", "_reserved")

    def __init__(self, session: PullSession) -> None:
        self.session = session
        self.id = session.id
        self.replies = session.replies
        self._parts: list[bytes] = []
        self._reserved = 0

    @property
    def closing(self) -> bool:
        return self.session.closing

    def send(self, data: bytes, reserved: int = 0) -> None:
        self._parts.append(data)
        self._reserved += reserved

    def send_parts(self, parts: list[bytes], reserved: int = 0) -> None:
        self._parts += parts  # joined once, with the others, by flush
        self._reserved += reserved

    def flush(self) -> None:
        """Write what was gathered, if anything, with the reply bytes reserved for it."""
        parts = self._parts
        if parts:
            reserved, self._reserved = self._reserved, 0
            self._parts = []
            # One copy of the run (its answers' parts were not joined one by one): a
            # transport's write of a list costs uvloop per part, more than the copy here.
            self.session.send(b"".join(parts), reserved)
