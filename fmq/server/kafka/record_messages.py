"""A partition's record batches as FMQ messages (Produce) and stored messages as a record
batch (Fetch), each in one step.

The references below are the door's two steps each way, the readable ones: Produce decodes
the batches (:func:`fmq.server.kafka.records.decode_batches`, a :class:`KafkaRecord` per
record), then maps the records to messages (:func:`fmq.server.kafka.mapping.to_messages`)
and numbers an idempotent producer's (:func:`fmq.server.kafka.producer_ids.number`); Fetch
maps each stored message to a record (:func:`~fmq.server.kafka.mapping.to_record`), then
encodes the batch (:func:`~fmq.server.kafka.records.encode_batch`). The pure path runs
them.

The compiled twin (``fmq/server/kafka/_record_messages_c.pyx``) reads the batches and makes
the messages in C, no record object in between, and encodes a Fetch batch from the stored
messages in C. Whatever it does not take as it is (a CRC that does not match, a control
batch, a varint past its record, a key that is not UTF-8 text, a header name given twice or
one of the door's own, a timestamp outside 0..2**62 ...) it hands, whole, to the reference
before returning anything, so the two always give the same messages and bytes or raise the
same error; tests/native/test_record_messages_twins.py compares them on valid and hostile
batches.

Produce's messages also come with what the send path's checks need to know of them
(:func:`plain_messages_of_records`): whether each passes ``check_message``'s rules of its
own fields, the ones that depend on no setting (its key, tags and properties: a
record's CreateTime, and headers that are ASCII text, pass them), and which message has
the largest body. The engine then checks what a partition's messages share once, and each
message's size by the largest (the ``largest`` of :func:`fmq.engine.queue_placement.
check_messages`). The twin finds both while it makes the messages, in C.
"""

from __future__ import annotations

from collections.abc import Sequence

from fmq import native
from fmq.message import MAX_NAME, Message, StoredMessage, plain_properties
from fmq.server.kafka.mapping import to_messages, to_record
from fmq.server.kafka.producer_ids import number
from fmq.server.kafka.records import decode_batches, encode_batch


def reference_messages(data: bytes, max_size: int, topic: str, partition: int
                       ) -> list[Message]:
    """The messages of a non-transactional Produce's ``records`` for queue ``partition`` of
    ``topic``: every batch checked (RecordError), every record mapped (MappingError);
    transaction markers (control batches) carry none."""
    messages: list[Message] = []
    for batch in decode_batches(data, max_size):
        if batch.control:
            continue
        batch_messages = to_messages(topic, partition, batch.records)
        if batch.producer_id >= 0 and batch.base_sequence >= 0:
            number(batch_messages, batch.producer_id, batch.producer_epoch, partition,
                   batch.base_sequence)
        messages += batch_messages
    return messages


def plain_largest(messages: Sequence[Message]) -> int:
    """The index of the first of ``messages`` with the largest body when each passes
    ``check_message``'s rules of its own fields that depend on no setting (a key of 1-255
    bytes without NUL, or none; no tags; :func:`fmq.message.plain_properties`), else -1
    (and -1 for no message)."""
    largest, largest_size = -1, -1
    for i, m in enumerate(messages):
        key = m.key
        if ((key is not None and ("\x00" in key or len(key.encode()) > MAX_NAME))
                or m.tags is not None
                or (m.properties is not None and not plain_properties(m.properties))):
            return -1
        if len(m.body) > largest_size:
            largest, largest_size = i, len(m.body)
    return largest


def reference_plain_messages(data: bytes, max_size: int, topic: str, partition: int
                             ) -> tuple[list[Message], int]:
    """:func:`reference_messages`, with :func:`plain_largest` of them."""
    messages = reference_messages(data, max_size, topic, partition)
    return messages, plain_largest(messages)


def reference_batch(messages: Sequence[StoredMessage], leader_epoch: int = 0) -> bytes:
    """One record batch of ``messages`` (read from one queue, in offset order): its base
    offset the first one's queue offset, stamped with ``leader_epoch``."""
    base = messages[0].queue_offset
    return encode_batch(base, [(m.queue_offset - base, to_record(m)) for m in messages],
                        leader_epoch)


#: The compiled twin (``_record_messages_c``), or None: the pure path runs the references.
COMPILED = native.compiled_twin(__name__)


def _messages_of_records():
    if COMPILED is not None:
        return COMPILED.RecordMessages(reference_messages).decode
    return reference_messages


def _plain_messages_of_records():
    if COMPILED is not None:
        return COMPILED.RecordMessages(reference_messages, reference_plain_messages
                                       ).decode_plain
    return reference_plain_messages


def _batch_of_messages():
    if COMPILED is not None:
        return COMPILED.MessageBatch(reference_batch).encode
    return reference_batch


#: ``messages_of_records(data, max_size, topic, partition)``: as :func:`reference_messages`.
messages_of_records = _messages_of_records()
#: ``plain_messages_of_records(data, max_size, topic, partition)``: as
#: :func:`reference_plain_messages`.
plain_messages_of_records = _plain_messages_of_records()
#: ``batch_of_messages(messages, leader_epoch)``: as :func:`reference_batch`.
batch_of_messages = _batch_of_messages()
