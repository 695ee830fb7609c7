"""Every builder of :class:`~fmq.log.record.QueueEntry` fills each field by its name's meaning.

The builders make the tuple by position (``tuple.__new__``, no constructor call per message):
the record runs of ``runs.py``, their compiled twins in ``_record_c.pyx`` (where built), and
``fmq.index.derive.queue_entry``. The twin tests compare them with each other; this reads
each field of what they build by name, so a builder whose order drifts from the type's
fails here even when all of them drift alike."""

from __future__ import annotations

import functools

import pytest

from fmq.index.derive import queue_entry
from fmq.index.entries import QueueEntry as IndexQueueEntry
from fmq.log import record as R
from fmq.log.record import QueueEntry, Record, RecordType, runs
from fmq.message import Message

BASE = 8192
STAMP = 1_700_000_000_123


def _expected(log_offset: int, size: int, tags: str | None) -> dict:
    return dict(topic="orders", queue_id=3, queue_offset=41, data_offset=log_offset,
                data_size=size, tag_hash=R.crc32c(tags.encode()) if tags else 0,
                store_time=STAMP, key="k1", source_offset=log_offset)


def _assert_fields(entry: object, expected: dict) -> None:
    assert type(entry) is QueueEntry
    assert {name: getattr(entry, name) for name in QueueEntry._fields} == expected


def _message_record(log_offset: int, tags: str | None = None) -> Record:
    return Record(RecordType.MESSAGE, log_offset=log_offset, store_time=STAMP, queue_id=3,
                  queue_offset=41, topic="orders", key="k1", tags=tags, body=b"body" * 9)


def test_the_index_uses_the_record_formats_type() -> None:
    assert IndexQueueEntry is QueueEntry


ENCODERS = {
    "reference": functools.partial(runs.encode_message_run, R.REFERENCE.encode_into,
                                   R.reference_crc32c),
    "chosen": R.encode_message_run,
}


@pytest.mark.parametrize("tags", [None, "red"])
@pytest.mark.parametrize("encoder", sorted(ENCODERS))
def test_a_placed_message_comes_back_as_its_entry(encoder: str, tags: str | None) -> None:
    buf, out = bytearray(), []
    message = Message("orders", b"body" * 9, key="k1", tags=tags)
    assert ENCODERS[encoder](buf, 1 << 20, BASE, STAMP, [message], [3], [41], 0, 1, out) == 1
    [(end, entry)] = out
    assert end == BASE + len(buf)
    _assert_fields(entry, _expected(BASE, len(buf), tags))


DECODERS = {"reference": functools.partial(runs.decode_entry_run, R.REFERENCE.decode_at)}
if R.decode_entry_run is not None:
    DECODERS["chosen"] = R.decode_entry_run


@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_a_scanned_plain_message_comes_as_its_entry(decoder: str) -> None:
    data = R.encode(_message_record(BASE))
    out: list = []
    assert DECODERS[decoder](data, 0, BASE, R.FORMAT_MAX_RECORD, False, len(data), 8,
                             out) == len(data)
    [entry] = out
    _assert_fields(entry, _expected(BASE, len(data), None))


def test_the_index_derives_the_same_entry_from_the_record() -> None:
    data = R.encode(_message_record(BASE, tags="red"))
    _assert_fields(queue_entry(R.decode(data, base_offset=BASE)), _expected(BASE, len(data), "red"))
