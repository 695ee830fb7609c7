"""The compiled ``encode_into`` and ``decode_at`` (``fmq.log.record._record_c``, written in
Cython) against the codec's own functions they fall back to, with the same CRC: the same
bytes written and record size set, or the same record slot by slot, or the same error (type
and message): for records with hostile fields, buffers written at any position or exported,
damaged records in every kind of buffer a scan hands over (bytes, bytearray, memoryview,
mmap) at any position, and hostile arguments."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.log import record as R
from tests.log.test_twins import _copy, _damaged_record, records
from tests.native.twins import compiled, outcome

CODEC = R.python_codec(R.crc32c)
HOSTILE = [None, -1, 2**64, 2**70, -(2**70), True, 1.5, "0", b"0"]


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.log.record._record_c").DecodeAt(R.crc32c, CODEC.decode_at)


@pytest.fixture(scope="module")
def fast_encode():
    return compiled("fmq.log.record._record_c").EncodeInto(R.crc32c, CODEC.encode_into)


def _plain(got: tuple) -> tuple:
    if got[0] == "value" and isinstance(got[1], R.Record):
        return ("value", tuple(bytes(v) if isinstance(v, memoryview) else v
                               for v in (getattr(got[1], n) for n in R.Record.__slots__)))
    return got


def _buffer(kind: str, data: bytes):
    if kind == "bytes":
        return data
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(data)
    if kind == "wide view":  # not bytes: the C path leaves it to the reference
        return memoryview(data[: len(data) - len(data) % 4]).cast("I")
    m = mmap.mmap(-1, max(1, len(data)))
    m[: len(data)] = data
    return m


@settings(max_examples=400, deadline=None)
@given(case=st.builds(lambda d: d, st.data()),
       kind=st.sampled_from(["bytes", "bytearray", "memoryview", "wide view", "mmap"]),
       prefix=st.binary(max_size=9), copy_body=st.booleans(), shift=st.sampled_from([0, 0, 1]))
def test_compiled_decodes_and_fails_as_the_reference(fast, case, kind, prefix, copy_body,
                                                     shift) -> None:
    rec, data, limit = _damaged_record(case.draw)
    buf = _buffer(kind, prefix + data)
    args = (buf, len(prefix), rec.log_offset + shift, limit, copy_body)
    assert _plain(outcome(fast, *args)) == _plain(outcome(CODEC.decode_at, *args))


def test_hostile_arguments_fail_alike(fast) -> None:
    rec = R.Record(R.RecordType.MESSAGE, log_offset=64, topic="t", key="k", body=b"body")
    good = bytes(CODEC.encode(rec))
    for bad in HOSTILE:
        for args in ((bad, 0, 64, 1 << 20, True), (good, bad, 64, 1 << 20, True),
                     (good, 0, bad, 1 << 20, True), (good, 0, 64, bad, True),
                     (good, 0, 64, 1 << 20, bad)):
            assert _plain(outcome(fast, *args)) == _plain(outcome(CODEC.decode_at, *args)), args


def test_an_uncopied_body_is_a_view_of_the_buffer(fast) -> None:
    rec = R.Record(R.RecordType.MESSAGE, log_offset=10, topic="t", body=b"payload")
    buf = bytearray(b"\0" * 10 + bytes(CODEC.encode(rec)))
    got = fast(buf, 10, 10, 1 << 20, False)
    assert isinstance(got.body, memoryview) and bytes(got.body) == b"payload"
    copied = fast(bytes(buf), 10, 10, 1 << 20, True)
    buf[-7:] = b"PAYLOAD"  # the view sees the buffer, as the reference's does; a copy not
    assert bytes(got.body) == b"PAYLOAD" and copied.body == b"payload"


def test_the_scans_run_the_compiled_decode_unless_told_not_to() -> None:
    compiled("fmq.log.record._record_c")
    if R.NO_EXTENSIONS:
        assert R.decode_at is R.REFERENCE.decode_at
    else:
        assert type(R.decode_at).__name__ == "DecodeAt"


#: What a hostile record may hold in a field (made per draw: some are not hashable).
_WRONG = (None, -1, 2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 1.5, "x", b"x", True, 300,
          "\ud800", {"k": "v"}, {"k": 5})
WRONG_FIELD = (st.sampled_from(_WRONG)
               | st.sampled_from(["bytearray", "wide view", "view"]).map(
                   lambda kind: {"bytearray": lambda: bytearray(b"ab"),
                                 "wide view": lambda: memoryview(b"abcd").cast("I"),
                                 "view": lambda: memoryview(b"abcd")}[kind]()))
FIELDS = ("type", "log_offset", "store_time", "queue_id", "queue_offset", "ref_offset",
          "ref_size", "topic", "tx_id", "producer_group", "key", "tags", "properties", "body")


def _encoded(encode, buf: bytearray, at, rec: R.Record) -> tuple:
    mine = _copy(rec)
    return outcome(encode, buf, at, mine), bytes(buf), mine.size


@settings(max_examples=500, deadline=None)
@given(rec=records(), prefix=st.binary(max_size=40), where=st.sampled_from(["end", "middle",
       "start", "past", "negative"]), wrong=st.lists(st.tuples(st.sampled_from(FIELDS),
                                                               WRONG_FIELD), max_size=2))
def test_compiled_encodes_and_fails_as_the_reference(fast_encode, rec, prefix, where,
                                                     wrong) -> None:
    for name, value in wrong:
        setattr(rec, name, value)
    at = {"end": len(prefix), "middle": len(prefix) // 2, "start": 0, "past": len(prefix) + 3,
          "negative": -1}[where]
    assert (_encoded(fast_encode, bytearray(prefix), at, rec)
            == _encoded(CODEC.encode_into, bytearray(prefix), at, rec))


#: Property texts: ASCII ones (written in C), others and the longest ones the reference's.
PROPERTY_TEXT = st.text(max_size=6) | st.sampled_from(
    ["", "kafka.create_time", "1700000000000", "a" * 65_535, "a" * 65_536, "\u00e9" * 32_768,
     "\u00e9" * 32_767, "\ud800", "\x00", "\x7f"])


@settings(max_examples=300, deadline=None)
@given(properties=st.dictionaries(PROPERTY_TEXT, PROPERTY_TEXT, max_size=4)
       | st.sampled_from([{"k": 5}, {5: "v"}, {"k": b"v"}, {"k": None}]),
       as_subclass=st.booleans())
def test_properties_are_encoded_as_the_reference(fast_encode, properties, as_subclass) -> None:
    """A record's properties (a message's usual ones are ASCII strings, which the C path
    writes itself): the same bytes, or the same error."""
    if as_subclass:
        properties = type("Props", (dict,), {})(properties)
    rec = R.Record(R.RecordType.MESSAGE, log_offset=3, topic="t", properties=properties,
                   body=b"body")
    assert (_encoded(fast_encode, bytearray(), 0, rec)
            == _encoded(CODEC.encode_into, bytearray(), 0, rec))


def test_more_properties_than_their_count_holds_fail_alike(fast_encode) -> None:
    rec = R.Record(R.RecordType.MESSAGE, log_offset=3, topic="t", body=b"body",
                   properties={str(i): "" for i in range(65_536)})
    got = _encoded(fast_encode, bytearray(), 0, rec)
    assert got == _encoded(CODEC.encode_into, bytearray(), 0, rec)
    assert got[0][0] == "raised"


def test_an_exported_buffer_fails_alike_and_stays_as_it_was(fast_encode) -> None:
    rec = R.Record(R.RecordType.MESSAGE, log_offset=3, topic="t", body=b"body")
    for encode in (fast_encode, CODEC.encode_into):
        buf = bytearray(b"abc")
        view = memoryview(buf)
        got = outcome(encode, buf, 3, _copy(rec))
        assert got[:2] == ("raised", "BufferError") and bytes(buf) == b"abc", got
        view.release()
    # in place inside the buffer needs no resize: an exported buffer takes it
    buf = bytearray(200)
    with memoryview(buf):
        assert fast_encode(buf, 0, _copy(rec)) == CODEC.encode_into(bytearray(200), 0,
                                                                    _copy(rec))


def test_the_log_runs_the_compiled_encoder_unless_told_not_to() -> None:
    compiled("fmq.log.record._record_c")
    if R.NO_EXTENSIONS:
        assert R.encode_into is R.REFERENCE.encode_into
    else:
        assert type(R.encode_into).__name__ == "EncodeInto"


def test_buffers_the_c_paths_cannot_read_go_to_the_reference(fast, fast_encode) -> None:
    """Views with gaps, released views, a closed mmap, a body that is the buffer itself:
    the same outcome as the reference, never an error of the C path's own."""
    rec = R.Record(R.RecordType.MESSAGE, log_offset=0, topic="t", body=b"body")
    good = bytes(CODEC.encode(_copy(rec)))
    released = memoryview(b"abcd")
    released.release()
    for body in (memoryview(b"abcdefgh")[::2], released):
        odd = _copy(rec)
        odd.body = body
        assert (_encoded(fast_encode, bytearray(b"xy"), 2, odd)
                == _encoded(CODEC.encode_into, bytearray(b"xy"), 2, odd))
    got = []
    for encode in (fast_encode, CODEC.encode_into):  # the body is the buffer being written
        buf = bytearray(b"abc")
        mine = _copy(rec)
        mine.body = buf
        got.append((outcome(encode, buf, 3, mine), bytes(buf)))
    assert got[0] == got[1]
    closed = mmap.mmap(-1, len(good))
    closed[:] = good
    closed.close()
    gappy = memoryview(good + good)[::2]
    for buf in (closed, gappy):
        args = (buf, 0, 0, 1 << 20, True)
        assert _plain(outcome(fast, *args)) == _plain(outcome(CODEC.decode_at, *args))


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=300), topic=st.text(max_size=20))
def test_the_compiled_crc_takes_every_valid_record_itself(body, topic) -> None:
    """The CRC computed in C (SSE 4.2, when the CPU has it) is CRC-32C: a valid record of
    any length is decoded without a call of the reference, and written as it writes it."""
    module = compiled("fmq.log.record._record_c")

    def reference(*args):
        raise AssertionError(f"the C path left a valid record to the reference: {args[1:]}")

    rec = R.Record(R.RecordType.MESSAGE, log_offset=7, topic=topic, body=body)
    data = bytes(CODEC.encode(rec))
    got = module.DecodeAt(R.crc32c, reference)(data, 0, 7, 1 << 20, True)
    assert (got.topic, got.body, got.size) == (topic, body, len(data))
    written = bytearray()
    module.EncodeInto(R.crc32c, reference)(written, 0, _copy(rec))
    assert bytes(written) == data


def test_another_crc_function_is_called_as_given() -> None:
    """Only CRC-32C is computed in C; a codec built around another function keeps it."""
    import zlib

    module = compiled("fmq.log.record._record_c")
    other = R.python_codec(zlib.crc32)
    rec = R.Record(R.RecordType.MESSAGE, log_offset=0, topic="t", body=b"body")
    written = bytearray()
    module.EncodeInto(zlib.crc32, other.encode_into)(written, 0, _copy(rec))
    assert bytes(written) == bytes(other.encode(rec)) != bytes(CODEC.encode(rec))
    got = module.DecodeAt(zlib.crc32, other.decode_at)(bytes(written), 0, 0, 1 << 20, True)
    assert got.body == b"body"
