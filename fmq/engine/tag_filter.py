"""Pulls filtered by tags, on the server: a consumer subscribes with a tag expression
(``"a || b"``, ``"*"``; :func:`fmq.message.parse_tag_expression`) and gets only the
messages whose tags value is one of those tags.

The consume-queue entries of the index hold a hash of each message's tags
(:func:`fmq.index.entries.tag_hash`, CRC-32C), so an entry whose hash is not one of the
expression's is skipped without reading its record: a filtered-out message costs an index
entry read, no log read and no network. A record whose hash matches is read and its tags
compared exactly (two tags may share a hash). The answer says where to pull next, past
the messages skipped, so a group whose consumers filter never stalls on them.
"""

from __future__ import annotations

from fmq.engine.broker import Broker
from fmq.index.entries import tag_hash
from fmq.message import (
    StoredMessage,
    check_count,
    check_offset,
    check_queue_id,
    check_topic,
    parse_tag_expression,
)

#: Queue entries one filtered pull examines at most (then it answers with what it found
#: and where to go on): a queue of millions of non-matching messages is walked in steps.
SCAN_LIMIT = 20_000
_CHUNK = 2_000  # entries read from the index at a time


def pull_tagged(broker: Broker, topic: str, queue_id: int, offset: int, expression: str,
                max_messages: int = 32, max_bytes: int | None = None
                ) -> tuple[list[StoredMessage], int]:
    """Up to ``max_messages`` messages of the queue from ``offset`` whose tags
    ``expression`` selects, within ``max_bytes`` as :meth:`Broker.pull`, and the queue
    offset to pull from next."""
    tags = parse_tag_expression(expression)
    check_topic(topic)
    check_queue_id(queue_id, broker.queue_count(topic))
    check_offset(offset)
    check_count(max_messages, "max_messages")
    lo, hi = broker.queue_range(topic, queue_id)  # hi: the high watermark's, when gated
    pos = max(offset, lo)
    if tags is None:
        msgs = broker.pull(topic, queue_id, pos, max_messages, max_bytes)
        return msgs, msgs[-1].queue_offset + 1 if msgs else pos
    hashes = {tag_hash(t) for t in tags}
    out: list[StoredMessage] = []
    used = 0  # bytes of the messages read (the answer's trim to its real size is the caller's)
    scanned = 0
    while len(out) < max_messages and scanned < SCAN_LIMIT and pos < hi:
        entries = broker.index.queue_entries(topic, queue_id, pos,
                                             min(_CHUNK, SCAN_LIMIT - scanned, hi - pos))
        if not entries:
            break
        scanned += len(entries)
        for run_start, run_len in _matching_runs(entries, hashes, pos):
            if run_len == 0:  # a run of entries that do not match: skipped unread
                pos = run_start
                continue
            want = min(run_len, max_messages - len(out))
            budget = None if max_bytes is None else max(1, max_bytes - used)
            got = broker.pull(topic, queue_id, run_start, want, budget)
            used += sum(_size(m) for m in got)
            out += [m for m in got if m.tags in tags]
            if not got or got[-1].queue_offset != run_start + want - 1:
                # stopped short (the byte budget, damage, retention): go on from there
                return out, got[-1].queue_offset + 1 if got else run_start
            pos = run_start + want
            if len(out) >= max_messages or (max_bytes is not None and used >= max_bytes):
                return out, pos
    return out, pos


def _matching_runs(entries: list[tuple], hashes: set[int], pos: int
                   ) -> list[tuple[int, int]]:
    """The entries as runs of consecutive queue offsets: (start, length) for a run whose
    tag hashes match, (end, 0) for a run that does not (pull from ``end`` on)."""
    runs: list[tuple[int, int]] = []
    start = None
    for qoff, _doff, _dsize, th, _st in entries:
        if th in hashes:
            if start is None:
                start, length = qoff, 0
            length += 1
            continue
        if start is not None:
            runs.append((start, length))
            start = None
        runs.append((qoff + 1, 0))
    if start is not None:
        runs.append((start, length))
    return runs


def _size(m: StoredMessage) -> int:
    return len(m.body) + len(m.topic) + len(m.key or "") + len(m.tags or "") + sum(
        len(k) + len(v) for k, v in m.properties.items())
