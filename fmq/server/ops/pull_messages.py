"""A PULL answer's messages straight from the records a pull read, undecoded.

An untagged pull reads its queue with :meth:`fmq.engine.reads.Reader.pull_records`: the
index entries that fit the answer and, per entry, either the bytes of its record as the log
stores them or what the server kept of it encoded (:mod:`fmq.server.ops.pull_answers`).
:func:`pull_messages` turns those into the answer's list of ``stored_message`` items
(docs/protocol.md), as many as fit the budget (at least one).

The reference below is the readable way, two steps: each record decoded as a pull decodes
it (:func:`fmq.engine.reads.stored_message`: the record's checks, its CRC among them), then
the messages encoded as the answer encodes them (:func:`~fmq.server.ops.pull_answers
.encode_stored`), fitted as :func:`~fmq.server.ops.pull_answers.encode_fitting` fits them.
The pure path runs it.

The compiled twin (``_pull_messages_c.pyx``) reads each record's header, checks and fields
in C and writes the wire's ``stored_message`` from them into the answer's one buffer: no
Record, no StoredMessage, no properties dict, no bytes object per message (but the ones
the cache keeps), the body copied once. Whatever it does not take as it is (a record that
fails a check, a record retention deleted, a property name given twice, a key or tags the
wire cannot carry ...) it hands, whole, to the reference, which returns the same answer or
raises the same error; tests/native/test_pull_messages_twins.py compares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fmq import native
from fmq.engine.reads import stored_message
from fmq.engine.tag_filter import Entry
from fmq.server.ops.pull_answers import encode_stored

#: (the messages' bytes, how many, their bodies' bytes, the queue offset to pull from
#: next): what :func:`pull_messages` returns.
PulledMessages = tuple[bytes, int, int, int]

#: A message encoded from its record, for the cache: (its entry, its bytes, its body's
#: length).
Fresh = tuple[Entry, bytes, int]


def reference_pull_messages(topic: str, queue_id: int, entries: Sequence[Entry],
                            records: Sequence[Any], budget: int, max_record_size: int,
                            fresh: list[Fresh] | None) -> PulledMessages:
    """The answer's messages of ``entries`` (index entries of queue ``queue_id`` of
    ``topic``, in offset order) from ``records``, one per entry: its record's bytes, None
    (retention deleted it after the index was read: left out, as a pull leaves it) or what
    the server kept of its message, (the encoded bytes, the body's length). The
    leading ones whose encoded sizes add up to at most ``budget`` (the first whatever its
    size), as (their bytes, how many, their bodies' bytes, the next queue offset: the
    first message left out, else past the last one). ``fresh``: a list to append each
    message encoded from its record to (the cache's). Raises BadRecord or IncompleteRecord
    for a damaged record, as a pull's decode does, and ProtocolError for a message the
    answer cannot carry, as its encoding does."""
    # Every record decoded first, as the pull reads them before its answer is encoded.
    messages: list[tuple[Entry, Any]] = []
    for entry, data in zip(entries, records, strict=True):
        if data is None:
            continue
        if type(data) is tuple:
            messages.append((entry, data))
        else:
            messages.append((entry, stored_message(topic, queue_id, entry, data,
                                                   max_record_size)))
    parts: list[bytes] = []
    total = body_bytes = 0
    resume = None
    for entry, m in messages:
        if type(m) is tuple:
            data, body = m[0], m[1]
        else:
            data, body = encode_stored(m), len(m.body)
            if fresh is not None:
                fresh.append((entry, data, body))
        if parts and total + len(data) > budget:
            resume = entry[0]
            if fresh and fresh[-1][1] is data:
                fresh.pop()  # not in the answer: not kept either
            break
        parts.append(data)
        total += len(data)
        body_bytes += body
    if resume is None:
        resume = messages[len(parts) - 1][0][0] + 1 if parts else 0
    return b"".join(parts), len(parts), body_bytes, resume


#: The compiled twin (``_pull_messages_c``), or None: the pure path runs the reference.
COMPILED = native.compiled_twin(__name__)


def _pull_messages():
    if COMPILED is not None:
        return COMPILED.PullMessages(reference_pull_messages).build
    return reference_pull_messages


#: ``pull_messages(topic, queue_id, entries, records, budget, max_record_size, fresh)``:
#: as :func:`reference_pull_messages`.
pull_messages = _pull_messages()

#: Whether an untagged pull looks its messages up among the encoded ones the server kept
#: and keeps what it encodes (:mod:`fmq.server.ops.pull_answers`). The reference decodes
#: and encodes each message in Python, which the cache saves the other groups of a shared
#: queue. Written in C from the record, a message costs less than keeping it did: a
#: lookup per entry (a Python call, a key tuple) for every pull, and for the first group's
#: a bytes object, an ordered-dict insertion and a lock per message; two groups pulling 16
#: messages each cost the server 18 % more with the cache than without
#: (docs/performance.md, "Readers, fourth step").
KEEPS_ENCODED = COMPILED is None
