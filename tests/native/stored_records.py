"""Records as the log stores them, for the twin tests of the writers that read them whole
(a PULL answer's messages, ``_pull_messages_c``; a Fetch's record batch,
``_stored_batches_c``): a record's bytes with its properties written in any order (a name
given twice too), its CRC made right again after a change, and the damage a log may hold
(a byte changed, a record cut short or read at another log offset, a deleted one, a view
of a larger buffer, field lengths that lie), each writer's twins then compared on it."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from fmq.log.record import Record, RecordType, encode
from fmq.log.record.crc import reference_crc32c

#: The damage :func:`damaged_records` makes.
DAMAGES = ["changed, CRC made right", "changed", "truncated", "offset", "deleted", "view",
           "field lengths"]


def record_bytes(kind: RecordType, log_offset: int, queue_offset: int, body: bytes,
                 key: str | None, properties: list[tuple[str, str]] | None, store_time: int,
                 tags: str | None) -> bytes:
    """A record of ``kind`` in topic ``t``, queue 0, as the log stores it (a transaction's
    records of ``tx-1`` in producer group ``pg``); ``properties`` in order, a name given
    twice written twice (what a dict never writes, a damaged or foreign log may hold)."""
    tx = kind != RecordType.MESSAGE
    rec = Record(kind, log_offset=log_offset, store_time=store_time, queue_id=0,
                 queue_offset=-1 if kind == RecordType.PRE_MESSAGE else queue_offset,
                 topic="t", key=key, tags=tags, body=body, tx_id="tx-1" if tx else "",
                 producer_group="pg" if tx else "")
    data = bytearray(encode(rec))
    if properties:
        props = bytearray(struct.pack("<H", len(properties)))
        for name, text in properties:
            for part in (name.encode("utf-8", "surrogatepass"),
                         text.encode("utf-8", "surrogatepass")):
                props += struct.pack("<H", len(part)) + part
        at = len(data) - len(body)
        data[at:at] = props
        struct.pack_into("<I", data, 0, len(data))
        struct.pack_into("<I", data, 64, len(props))
        data = crc_made_right(data)
    return bytes(data)


def crc_made_right(data: bytearray) -> bytearray:
    """``data`` (a record's bytes, changed) with the CRC of what it holds now."""
    struct.pack_into("<I", data, 4, reference_crc32c(bytes(data[8:])))
    return data


def damaged_records(data: st.DataObject, how: str, entries: list, records: list, i: int,
                    record: bytes | None = None) -> list:
    """The records with the ``i``-th one damaged as ``how`` (one of :data:`DAMAGES`) says,
    its byte positions and values drawn from ``data``: the records to read (a new list for
    ``view``; ``entries[i]`` changed in place for ``offset``). The bytes damaged are
    ``record`` where given (a record standing in for a message kept encoded, which
    ``offset`` and ``view`` leave as it is), else ``records[i]``."""
    record = bytearray(records[i] if record is None else record)
    if how.startswith("changed"):
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(record) - 1))
            record[at] = data.draw(st.integers(0, 255))
        if how == "changed, CRC made right":
            record = crc_made_right(record)
        records[i] = bytes(record)
    elif how == "truncated":
        records[i] = bytes(record[:data.draw(st.integers(0, len(record) - 1))])
    elif how == "offset":
        qoff, doff, size, th, st_ = entries[i]
        entries[i] = (qoff, doff + data.draw(st.sampled_from([-1, 1, -doff - 1])), size, th,
                      st_)
    elif how == "deleted":
        records[i] = None
    elif how == "view":
        records = [memoryview(b"..." + r + b"...")[3:-3] if type(r) is bytes else r
                   for r in records]
    elif how == "field lengths":
        struct.pack_into("<H", record, 52 + 2 * data.draw(st.integers(0, 4)),
                         data.draw(st.integers(0, 300)))
        records[i] = bytes(crc_made_right(record))
    else:
        raise ValueError(f"no damage {how!r}: one of {DAMAGES}")
    return records
