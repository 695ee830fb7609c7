"""The fast twin of ``encode_into`` for a transaction's mark records (PREPARE, COMMIT,
ROLLBACK): records whose only fields are the transaction id and the producer group.

The same bytes the general encoder writes (same format, same CRC), without its work for the
five fields a mark never has: a transaction of one message places two marks, and the general
encoder spent about half its time on the empty fields. Anything else (a mark with another
field set, a write into the middle of a buffer, an oversized field) goes to the general
encoder, which encodes it or raises as before.
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.log.record.layout import (
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    LENGTH,
    MAGIC,
    MAX_SHORT_FIELD,
    Record,
)

Encoder = Callable[[bytearray, int, Record], int]

_pack = HEADER.pack
_crc_into = LENGTH.pack_into


def mark_encoder(crc32c: Callable[[bytes | memoryview], int], encode_into: Encoder) -> Encoder:
    """The mark encoder computing its CRC with ``crc32c`` and handing what it is not made
    for to ``encode_into``."""

    def encode_mark_into(buf: bytearray, offset: int, record: Record) -> int:
        """``encode_into`` for a record carrying only ``tx_id`` and ``producer_group``
        among the variable fields; sets ``record.size`` and returns it."""
        if (offset != len(buf) or record.topic or record.key or record.tags
                or record.properties or record.body):
            return encode_into(buf, offset, record)
        tx_id = record.tx_id.encode()
        group = record.producer_group.encode()
        lx = len(tx_id)
        lg = len(group)
        if lx > MAX_SHORT_FIELD or lg > MAX_SHORT_FIELD:
            return encode_into(buf, offset, record)  # which raises the usual error
        length = HEADER_SIZE + lx + lg
        buf += _pack(length, 0, MAGIC, FORMAT_VERSION, record.type, record.log_offset,
                     record.store_time, record.queue_id, record.queue_offset,
                     record.ref_offset, record.ref_size, 0, lx, lg, 0, 0, 0, 0, 0)
        buf += tx_id
        buf += group
        _crc_into(buf, offset + 4, crc32c(memoryview(buf)[offset + 8:offset + length]))
        record.size = length
        return length

    return encode_mark_into
