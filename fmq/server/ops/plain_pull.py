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
* nothing to answer yet and a long poll asked for (``wait_ms`` > 0): the general way
  takes the wake-up events first, reads again, and waits;
* a read that is not among the log's last ``pull_on_loop_bytes`` (or they are 0), or an
  index behind the flushed log with no long poll: the general way reads in a thread;
* ``max_messages`` of 0: the general way gives the error.

An error of the read itself is answered as the general way answers it (the same read,
the same exception, :func:`~fmq.protocol.encode_error`).
tests/server/test_plain_read_step.py compares the two ways' answers.
"""

from __future__ import annotations

import logging
import struct
from typing import Protocol

from fmq.engine.reads import NotInMemory
from fmq.errors import FMQError
from fmq.protocol import PROTOCOL_VERSION, encode_error
from fmq.protocol.framing import FLAG_RESPONSE
from fmq.protocol.read_requests import PullFields
from fmq.server.context import ServerContext
from fmq.server.net.reply_account import ReplyAccount
from fmq.server.ops.pull_reads import pull_now

logger = logging.getLogger("fmq.server")

#: The answer's length prefix, header and list count; its range follows the messages.
_HEAD = struct.Struct(">IBBHQI").pack
_RANGE = struct.Struct(">QQ").pack
#: The length prefix counts the header, the list count and the range beside the messages.
_FIXED = 12 + 4 + 16
#: Messages a pull reads at most, whatever it asks for (as the general way).
MAX_PULLED = 4096


class PullSession(Protocol):
    """What the step uses of the session the PULL came on."""

    id: int
    replies: ReplyAccount

    def send(self, data: bytes, reserved: int = 0) -> None: ...


def answer_pull_now(ctx: ServerContext, session: PullSession, op: int, rid: int,
                    fields: PullFields) -> bool:
    """Answer the PULL ``fields`` of request ``rid`` now if it is answered at once (see the
    module doc): True when answered, False when left to the general way."""
    topic, queue_id, offset, max_messages, wait_ms = fields
    config = ctx.config
    window = config.pull_on_loop_bytes
    if not window or max_messages < 1:
        return False
    may_wait = wait_ms > 0 and config.max_wait_ms > 0  # the general way's long poll
    # The reply room, as the general way's ReplyRoom takes it (without waiting).
    share = session.replies.share
    budget = share.budget
    want = config.max_reply_size
    largest = ctx.largest_reply
    granted = budget.try_take(share, want if want < largest else largest, want)
    if not granted:
        return False
    counters = ctx.counters
    counters.pull_reads += 1
    keep = ctx.shared_queues.note(topic, queue_id, session.id, ctx.loop.time())
    try:
        items, count, lo, hi, size, _resume = pull_now(
            ctx.broker, ctx.encoded, keep, topic, queue_id, offset,
            max_messages if max_messages < MAX_PULLED else MAX_PULLED, None, granted,
            resident=window, may_wait=may_wait)
    except NotInMemory:
        budget.release(share, granted)
        return False
    except Exception as exc:  # noqa: BLE001 - the general way's answer to the same error
        budget.release(share, granted)
        counters.requests += 1
        counters.by_op[op] += 1
        counters.failed(op, exc)
        if not isinstance(exc, FMQError):
            logger.error("request PULL failed unexpectedly", exc_info=exc)
        session.send(encode_error(op, rid, exc))
        return True
    counters.pull_reads_on_loop += 1
    if size > granted or not count and may_wait:
        budget.release(share, granted)
        return False
    budget.release(share, granted - size)  # the answer holds the rest until written
    counters.requests += 1
    counters.by_op[op] += 1
    data = items.data
    session.send(b"".join((_HEAD(_FIXED + len(data), PROTOCOL_VERSION, op, FLAG_RESPONSE, rid,
                                 count), data, _RANGE(lo, hi))), size)
    return True
