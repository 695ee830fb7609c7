"""A Fetch's record batch straight from the records a pull read, undecoded.

Fetch reads a partition with :meth:`fmq.engine.reads.Reader.pull_stored`: the index entries
and each record's bytes as the log stores them. :func:`stored_batch` turns those into one
record batch v2 and says how many messages it holds and their bodies' bytes (the read
metrics). The reference below is the readable way, two steps: each record decoded as a
pull decodes it (:func:`fmq.engine.reads.stored_message`: the record's checks, its CRC
among them), then the messages made a batch (:func:`fmq.server.kafka.record_messages
.reference_batch`: the mapping of docs/kafka.md). The pure path runs it.

The compiled twin (``_stored_batches_c.pyx``) reads each record's header, checks and
fields in C and writes the Kafka record from them: no message, no record object, no
properties dict per message, the body copied once, from the log's bytes into the batch.
Whatever it does not take as it is (a record that fails a check, a record retention
deleted, text that is not ASCII where the mapping reads it, a property name given twice,
a CreateTime that is not plain digits, a timestamp outside 0..2**62 ...) it hands, whole,
to the reference, which returns the same batch or raises the same error;
tests/native/test_stored_batch_twins.py compares them.
"""

from __future__ import annotations

from collections.abc import Sequence

from fmq import native
from fmq.engine.reads import stored_message
from fmq.engine.tag_filter import Entry
from fmq.server.kafka.record_messages import reference_batch

#: (the record batch, how many messages it holds, their bodies' bytes).
StoredBatch = tuple[bytes, int, int]


def reference_stored_batch(topic: str, queue_id: int, entries: Sequence[Entry],
                           records: Sequence[bytes | memoryview | None], leader_epoch: int,
                           max_record_size: int) -> StoredBatch:
    """The batch of the messages of ``entries`` (index entries of queue ``queue_id`` of
    ``topic``, in offset order) from their records' bytes ``records``, stamped with
    ``leader_epoch``; a record retention deleted (None) is left out, as a pull leaves it
    (no message at all: an empty batch, b""). Raises BadRecord or IncompleteRecord for a
    damaged record, as a pull's decode does."""
    messages = [stored_message(topic, queue_id, entry, data, max_record_size)
                for entry, data in zip(entries, records, strict=True) if data is not None]
    if not messages:
        return b"", 0, 0
    return (reference_batch(messages, leader_epoch), len(messages),
            sum(len(m.body) for m in messages))


#: The compiled twin (``_stored_batches_c``), or None: the pure path runs the reference.
COMPILED = native.compiled_twin(__name__)


def _stored_batch():
    if COMPILED is not None:
        return COMPILED.StoredBatches(reference_stored_batch).encode
    return reference_stored_batch


#: ``stored_batch(topic, queue_id, entries, records, leader_epoch, max_record_size)``: as
#: :func:`reference_stored_batch`.
stored_batch = _stored_batch()
