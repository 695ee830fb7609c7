"""The references of the runs: ``decode_run`` and ``decode_entry_run`` decode the records
lying one after the other in a buffer with one call, so that a scan pays its per-record
Python steps once per run (``position_run`` only checks them, for a column-wise reader); ``encode_message_run`` places the MESSAGE records of a batch of
sends the same way (:meth:`fmq.log.log.Log.append_messages_locked`), and ``encode_tx_run``
a transaction's records of one request (:meth:`fmq.log.log.Log.append_tx_records_locked`:
a PREPARE and its PRE_MESSAGEs, or the REF records and the COMMIT).

The compiled twins (``DecodeAt.run``, ``entry_run`` and ``position_run`` in
``_record_c.pyx``) append the same items, but may
stop earlier: before the first position it does not take (a buffer type or argument it
leaves to the reference, a record failing a check). A scan therefore decodes the position
a run stopped at with ``decode_at`` itself, which returns the record or raises the error
the reference gives (:meth:`fmq.log.reader.SegmentReader.records`).
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.errors import BadRecord, IncompleteRecord
from fmq.log.record.layout import Record, RecordType
from fmq.log.record.queue_entry import QueueEntry
from fmq.message import Message

#: A NamedTuple's own constructor is a Python function parsing its arguments: the runs make
#: one entry per message, so they build the tuple directly, in the fields' order.
_new_tuple = tuple.__new__


def decode_run(decode_at: Callable[..., Record], buf, pos: int, base: int,
               max_record_size: int, copy_body: bool, end: int, max_records: int,
               out: list[Record]) -> int:
    """Append to ``out`` the records ``decode_at`` returns at ``pos`` and after it while each
    starts before ``end``: up to ``max_records``, up to and including a FILLER, stopping
    before the first position that holds no valid record. Returns the position after the
    last record appended."""
    taken = 0
    while pos < end and taken < max_records:
        try:
            rec = decode_at(buf, pos, base + pos, max_record_size, copy_body)
        except (BadRecord, IncompleteRecord):
            break
        out.append(rec)
        taken += 1
        pos += rec.size
        if rec.type == RecordType.FILLER:
            break
    return pos


def position_run(check: Callable[..., tuple], buf, pos: int, base: int, max_record_size: int,
                 end: int, max_records: int, out: list[int]) -> int:
    """Append to ``out`` the position of each record at ``pos`` and after it that ``check``
    passes (length, CRC, header; the text fields are left to the caller) while each starts
    before ``end``: up to ``max_records``, up to and including a FILLER, stopping before the
    first position that holds no valid record. Returns the position after the last record
    appended."""
    taken = 0
    while pos < end and taken < max_records:
        try:
            header = check(buf, pos, base_offset=base, max_record_size=max_record_size)
        except (BadRecord, IncompleteRecord):
            break
        out.append(pos)
        taken += 1
        pos += header[0]
        if header[4] == RecordType.FILLER:
            break
    return pos


def plain_message(rec: Record) -> bool:
    """Whether ``rec`` is a MESSAGE whose only index item is its queue entry, computable
    from the header, the topic and the key: no properties field, no tags, no timer."""
    return (rec.type == RecordType.MESSAGE and rec.properties is None and rec.tags is None
            and rec.ref_offset < 0)


def decode_entry_run(decode_at: Callable[..., Record], buf, pos: int, base: int,
                     max_record_size: int, copy_body: bool, end: int, max_records: int,
                     out: list) -> int:
    """As :func:`decode_run`, but each plain MESSAGE (:func:`plain_message`) is appended as
    its :class:`QueueEntry` (topic, queue id, queue offset, log offset, size, 0, store time,
    key, log offset), the entry ``fmq.index.derive.queue_entry`` makes of its record.
    A run holds entries only or records only: it stops before the first item of the other
    kind, so that its reader can take a run of entries as a whole."""
    taken, entries = 0, None
    while pos < end and taken < max_records:
        one: list[Record] = []
        after = decode_run(decode_at, buf, pos, base, max_record_size, copy_body, end, 1, one)
        if not one:
            break
        rec = one[0]
        plain = plain_message(rec)
        if entries is not None and plain != entries:
            break
        entries = plain
        out.append(_new_tuple(QueueEntry, (
            rec.topic, rec.queue_id, rec.queue_offset, rec.log_offset, rec.size, 0,
            rec.store_time, rec.key, rec.log_offset)) if plain else rec)
        taken += 1
        pos = after
        if rec.type == RecordType.FILLER:
            break
    return pos


def encode_message_run(encode_into: Callable[[bytearray, int, Record], int],
                       crc32c: Callable[[bytes], int], buf: bytearray, room: int,
                       log_offset: int, store_time: int, messages: list[Message],
                       queue_ids: list[int], queue_offsets: list[int], start: int, stop: int,
                       out: list) -> int:
    """Encode the MESSAGE records of ``messages[start:stop]`` at the end of ``buf`` while the
    next one fits in the ``room`` bytes left: message ``i`` at ``log_offset`` (the first;
    each next one after the last), in queue ``queue_ids[i]`` at ``queue_offsets[i]``, stamped
    ``store_time``, with exactly the bytes ``encode_into`` writes for the record
    :func:`fmq.engine.queue_placement.append_message_locked` builds. For each record appends
    ``(end offset, entry)`` to ``out``, ``entry`` its :class:`QueueEntry` as
    ``fmq.index.derive.queue_entry`` derives it (the tag hash is ``crc32c`` of the tags).
    Returns the index of the first message not encoded (``stop`` when all were); a record
    that does not fit leaves ``buf`` as it was."""
    i = start
    while i < stop:
        m = messages[i]
        key = m.key or None
        tags = m.tags or None
        rec = Record(RecordType.MESSAGE, log_offset=log_offset, store_time=store_time,
                     queue_id=queue_ids[i], queue_offset=queue_offsets[i], topic=m.topic,
                     key=key, tags=tags, properties=m.properties, body=bytes(m.body))
        at = len(buf)
        size = encode_into(buf, at, rec)
        if size > room:
            del buf[at:]
            break
        room -= size
        out.append((log_offset + size, _new_tuple(QueueEntry, (
            rec.topic, rec.queue_id, rec.queue_offset, log_offset, size,
            crc32c(tags.encode()) if tags else 0, store_time, key, log_offset))))
        log_offset += size
        i += 1
    return i


#: What :func:`encode_tx_run` takes per record, in this order: type, queue id, queue offset,
#: ref offset, ref size, topic, key, tags, properties, body (a :class:`Record`'s fields
#: but its offsets, size, transaction id and producer group, which the run gives).
TX_RECORD_FIELDS = ("type", "queue_id", "queue_offset", "ref_offset", "ref_size", "topic",
                    "key", "tags", "properties", "body")


def encode_tx_run(encode_into: Callable[[bytearray, int, Record], int], buf: bytearray,
                  room: int, log_offset: int, store_time: int, tx_id: str,
                  producer_group: str, records: list[tuple], start: int, stop: int,
                  out: list) -> int:
    """Encode the records ``records[start:stop]`` of transaction ``tx_id`` of
    ``producer_group`` at the end of ``buf`` while the next one fits in the ``room`` bytes
    left: record ``i`` at ``log_offset`` (the first; each next one after the last), stamped
    ``store_time``, its other fields the tuple ``records[i]`` (:data:`TX_RECORD_FIELDS`),
    with exactly the bytes ``encode_into`` writes for that :class:`Record`. Appends
    ``(log offset, size)`` per record to ``out``. Returns the index of the first record
    not encoded (``stop`` when all were); a record that does not fit leaves ``buf`` as it
    was."""
    i = start
    while i < stop:
        (rtype, queue_id, queue_offset, ref_offset, ref_size, topic, key, tags, properties,
         body) = records[i]
        rec = Record(rtype, log_offset=log_offset, store_time=store_time, queue_id=queue_id,
                     queue_offset=queue_offset, ref_offset=ref_offset, ref_size=ref_size,
                     topic=topic, tx_id=tx_id, producer_group=producer_group, key=key,
                     tags=tags, properties=properties, body=body)
        at = len(buf)
        size = encode_into(buf, at, rec)
        if size > room:
            del buf[at:]
            break
        room -= size
        out.append((log_offset, size))
        log_offset += size
        i += 1
    return i
