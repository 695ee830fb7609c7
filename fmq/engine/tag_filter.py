"""Pulls filtered by tags (``Broker.reads.pull(tags=...)``): a consumer subscribes with a
tag expression (``"a || b"``, ``"*"``; :func:`fmq.message.parse_tag_expression`) and gets
only the messages whose tags value is one of those tags.

The consume-queue entries of the index hold a hash of each message's tags
(:func:`fmq.index.entries.tag_hash`, CRC-32C), so an entry whose hash is not one of the
expression's is skipped without reading its record: a filtered-out message costs an index
entry read, no log read and no network. A record whose hash matches is read and its tags
compared exactly (two tags may share a hash). The answer says where to pull next, past
the messages skipped, so a group whose consumers filter never stalls on them.
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.index.entries import tag_hash
from fmq.message import StoredMessage

#: A consume-queue entry as the index returns it: (queue offset, log offset, record size,
#: tag hash, store time).
Entry = tuple[int, int, int, int, int]

#: Queue entries one filtered pull examines at most (then it answers with what it found
#: and where to go on): a queue of millions of non-matching messages is walked in steps.
SCAN_LIMIT = 20_000
_CHUNK = 2_000  # entries read from the index at a time


def pull_tagged(entries_from: Callable[[int, int], list[Entry]],
                read: Callable[[list[Entry], int | None], list[StoredMessage]],
                pos: int, hi: int, tags: set[str], max_messages: int,
                max_bytes: int | None) -> tuple[list[StoredMessage], int]:
    """Up to ``max_messages`` messages of a queue from queue offset ``pos`` (below ``hi``,
    its next offset) whose tags are among ``tags``, within ``max_bytes`` as
    :meth:`fmq.engine.reads.Reader.pull`, and the queue offset to pull from next.
    ``entries_from(pos, n)``: the queue's next ``n`` index entries from ``pos``;
    ``read(entries, max_bytes)``: the messages of the leading entries that fit."""
    hashes = {tag_hash(t) for t in tags}
    out: list[StoredMessage] = []
    used = 0  # bytes of the messages read (the answer's trim to its real size is the caller's)
    scanned = 0
    while len(out) < max_messages and scanned < SCAN_LIMIT and pos < hi:
        entries = entries_from(pos, min(_CHUNK, SCAN_LIMIT - scanned, hi - pos))
        if not entries:
            break
        scanned += len(entries)
        for run in _matching_runs(entries, hashes):
            if isinstance(run, int):  # a run of entries that do not match: skipped unread
                pos = run
                continue
            want = min(len(run), max_messages - len(out))
            budget = None if max_bytes is None else max(1, max_bytes - used)
            got = read(run[:want], budget)
            used += sum(_size(m) for m in got)
            out += [m for m in got if m.tags in tags]
            if not got or got[-1].queue_offset != run[want - 1][0]:
                # stopped short (the byte budget, damage, retention): go on from there
                return out, got[-1].queue_offset + 1 if got else run[0][0]
            pos = run[want - 1][0] + 1
            if len(out) >= max_messages or (max_bytes is not None and used >= max_bytes):
                return out, pos
    return out, pos


def _matching_runs(entries: list[Entry], hashes: set[int]) -> list[list[Entry] | int]:
    """The entries as runs: the entries of a run whose tag hashes match, or for a run that
    does not, the queue offset past it (pull from there on)."""
    runs: list[list[Entry] | int] = []
    run: list[Entry] = []
    for entry in entries:
        if entry[3] in hashes:
            run.append(entry)
            continue
        if run:
            runs.append(run)
            run = []
        runs.append(entry[0] + 1)
    if run:
        runs.append(run)
    return runs


def _size(m: StoredMessage) -> int:
    return len(m.body) + len(m.topic) + len(m.key or "") + len(m.tags or "") + sum(
        len(k) + len(v) for k, v in m.properties.items())
