"""A PULL's read of its queue, and where it runs.

A consumer following the writes pulls records written a moment ago, which the page cache
holds: such a pull is read on the event loop (:func:`pull_on_loop`), with no thread
hand-off. Any other read (records older than the log's last ``pull_on_loop_bytes``, a
tagged pull, which may scan far, or a pull that must wait for the index) runs in a
reader thread (:func:`pull_now` through ``ServerContext.read``), where a wait for the
disk or the index blocks nobody else. Both give the same answer for the same queue state.

Why: with 16 consumers following 64 producers, the reader threads' trades of the
interpreter lock with the event loop cost the sends more than the reads themselves
(docs/performance.md, "Pulls on the event loop").
"""

from __future__ import annotations

from typing import NamedTuple

from fmq.engine.broker import Broker
from fmq.engine.reads import NotInMemory
from fmq.engine.recent import RecentMessages
from fmq.errors import BadRecord, IncompleteRecord
from fmq.protocol.types import Encoded
from fmq.server.context import ServerContext
from fmq.server.net.replies import PULL_REPLY_BASE, PULL_TAGGED_REPLY_BASE
from fmq.server.ops.pull_answers import encode_fitting, kept_lookup
from fmq.server.ops.pull_messages import KEEPS_ENCODED, Fresh, pull_messages


class PullRead(NamedTuple):
    """A pull's read, as :func:`pull_now` takes its arguments (``pull_now(*read)``)."""

    broker: Broker
    encoded: RecentMessages
    keep: bool
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    tags: str | None
    max_bytes: int


#: An answer with no message.
_NOTHING = Encoded(0, b"")

#: What a pull read: the encoded messages, how many, the queue's range (lo, hi), the
#: answer's size and the offset to pull from next.
Pulled = tuple[Encoded, int, int, int, int, int]


def pull_now(broker: Broker, encoded: RecentMessages, keep: bool, topic: str,
             queue_id: int, offset: int, max_messages: int, tags: str | None,
             max_bytes: int, resident: int = 0, may_wait: bool = True) -> Pulled:
    """The messages that fit an answer of ``max_bytes`` (at least one), encoded, and how
    many, the queue range (read once, with the messages), the answer's size and the offset
    to pull from next (``tags``: PULL_TAGGED's filter; ``encoded``: answers' messages
    encoded lately, which the read takes instead of reading and writing them again;
    ``keep``: the queue is shared, keep what it encodes for the next reader).

    An untagged pull of a shared queue keeps its answer's messages, whole, under (topic,
    queue, first offset) with the index entries they were written from: the other groups'
    consumers following the queue, woken by the same write, pull the same entries, and
    take those bytes with one lookup and a comparison of the entries (an answer that left
    entries out for its budget is not kept: a larger budget may fit more). Where pulls
    differ, on the pure path each message is also kept and looked up by its entry
    (``KEEPS_ENCODED``).

    ``resident`` (on the event loop): read only the log's last that many bytes and never
    block, else raise NotInMemory. ``may_wait``: the pull is a long poll with time left,
    which took its wake-up events before the read, so an empty answer is final (what the
    index applies next wakes it); without it an empty read while the index is behind
    raises NotInMemory, to wait for the index in a thread.

    An untagged pull's messages are written from their records' bytes as the log stores
    them (:func:`~fmq.server.ops.pull_messages.pull_messages`, in C where compiled); a
    tagged one, and one whose records that way refuses (damaged, deleted meanwhile), is
    read and decoded into messages first (:func:`pull_decoded`), which skips and reports
    them as a pull does."""
    if tags is not None:
        return pull_decoded(broker, encoded, keep, topic, queue_id, offset, max_messages,
                            tags, max_bytes, resident, may_wait)
    budget = max_bytes - PULL_REPLY_BASE
    reads = broker.reads
    found = reads.pull_entries(topic, queue_id, offset, max_messages, budget, resident)
    entries = found.entries
    if not entries:
        if may_wait and resident:
            # A long poll on the event loop took its wake-up events before this read: what
            # the index applies from now on wakes it, so nothing is read again here.
            lo = found.min_offset
            return (_NOTHING, 0, lo, found.next_offset, PULL_REPLY_BASE,
                    offset if offset > lo else lo)
        # Nothing yet, but a write acknowledged just before may still be on its way to the
        # index: a pull sees every message acknowledged before it arrived.
        if broker.wait_indexed(0.0 if resident else 0.5):
            found = reads.pull_entries(topic, queue_id, offset, max_messages, budget,
                                       resident)
            entries = found.entries
        elif resident:
            raise NotInMemory("the index is behind the flushed log: wait for it in a thread")
        if not entries:
            lo = found.min_offset
            return (_NOTHING, 0, lo, found.next_offset, PULL_REPLY_BASE,
                    offset if offset > lo else lo)
    # Another group's consumer pulled the same entries a moment ago: its answer's messages.
    key = (topic, queue_id, entries[0][0])
    answer = encoded.get(key)
    if answer is not None and answer[0] == entries and len(answer[1]) <= budget:
        _entries, data, count, body_bytes, resume = answer
    else:
        fresh: list[Fresh] | None = [] if keep and KEEPS_ENCODED else None
        # Written in C, the records are read again rather than looked up (KEEPS_ENCODED).
        records = reads.records_of(entries,
                                   kept_lookup(encoded, queue_id) if KEEPS_ENCODED else None)
        try:
            data, count, body_bytes, resume = pull_messages(
                topic, queue_id, entries, records, budget, reads.max_record_size, fresh)
        except (BadRecord, IncompleteRecord):
            count = 0
        if not count:  # damaged, or every record deleted meanwhile: the decoding way's
            return pull_decoded(broker, encoded, keep, topic, queue_id, offset,
                                max_messages, tags, max_bytes, resident, may_wait)
        if keep and count == len(entries):  # (the next budget may fit more of a cut one)
            encoded.put(key, (entries, data, count, body_bytes, resume), len(data))
        if fresh:
            put = encoded.put
            for (qoff, doff, _size, _hash, store_time), form, body in fresh:
                put((doff, queue_id, qoff, store_time), (form, body), len(form))
    reads.count_out(topic, count, body_bytes)
    return (Encoded(count, data), count, found.min_offset, found.next_offset,
            PULL_REPLY_BASE + len(data), resume)


def pull_decoded(broker: Broker, encoded: RecentMessages, keep: bool, topic: str,
                 queue_id: int, offset: int, max_messages: int, tags: str | None,
                 max_bytes: int, resident: int = 0, may_wait: bool = True) -> Pulled:
    """:func:`pull_now` with every message read as a StoredMessage (or found encoded) and
    encoded then: a tagged pull's way, and an untagged one's where its records are not
    taken as they are."""
    base = PULL_REPLY_BASE if tags is None else PULL_TAGGED_REPLY_BASE
    budget = max_bytes - base

    kept = kept_lookup(encoded, queue_id)
    pull_answer = broker.reads.pull_answer
    answer = pull_answer(topic, queue_id, offset, max_messages, budget, tags=tags,
                         resident=resident, kept=kept)
    if not answer.messages:
        # As in pull_now: a write acknowledged just before may be on its way to the index.
        if broker.wait_indexed(0.0 if resident else 0.5):
            answer = pull_answer(topic, queue_id, offset, max_messages, budget, tags=tags,
                                 resident=resident, kept=kept)
        elif resident and not may_wait:
            raise NotInMemory("the index is behind the flushed log: wait for it in a thread")
    msgs, resume = answer.messages, answer.resume_offset
    # An untagged read looked each message up in ``encoded`` already (``kept``).
    items, count, size = encode_fitting(encoded, msgs, budget, keep, looked=tags is None)
    if count < len(msgs):  # the next pull starts at the first message left out
        resume = msgs[count].queue_offset
    return items, count, answer.min_offset, answer.next_offset, base + size, resume


def pull_on_loop(ctx: ServerContext, read: PullRead, may_wait: bool) -> Pulled | None:
    """:func:`pull_now` on the event loop when the pull is untagged and reads only records
    among the log's last ``pull_on_loop_bytes``; else None (read it in a reader thread).
    ``may_wait``: the long poll has time left (see :func:`pull_now`)."""
    window = ctx.config.pull_on_loop_bytes
    if not window or read.tags is not None:
        return None
    try:
        pulled = pull_now(*read, resident=window, may_wait=may_wait)
    except NotInMemory:
        return None
    ctx.counters.pull_reads_on_loop += 1
    return pulled
