"""The short step's PULL and COMMIT_OFFSET decode (``fmq.protocol.read_requests``) against
the general decode (``decode_request_payload``): for well-formed payloads near the fields'
edges, and for payloads cut short, grown, or with names that are not UTF-8, it gives the
general decode's fields in schema order, or None exactly where the general decode raises
(the step then leaves the request to the general way, which answers that error)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.errors import ProtocolError
from fmq.protocol import Op
from fmq.protocol.frame import decode_request_payload
from fmq.protocol.read_requests import plain_commit_offset, plain_pull

NAMES = st.binary(max_size=6) | st.text(alphabet="aé%\x00", max_size=5).map(
    lambda s: s.encode()) | st.sampled_from([b"\xff", b"\xc3", b"a" * 300])
U32 = st.sampled_from([0, 1, 4095, 4096, 4097, 2**31, 2**32 - 1])
U64 = st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 1])


def _name(raw: bytes) -> bytes:
    return struct.pack(">H", len(raw)) + raw


def _damaged(payload: bytes, cut: int, extra: bytes) -> bytes:
    """``payload`` cut at ``cut`` (when below its length) and ``extra`` appended."""
    return (payload[:cut] if cut < len(payload) else payload) + extra


def _general(op: int, payload: bytes) -> tuple | None:
    try:
        fields = decode_request_payload(op, memoryview(payload))
    except ProtocolError:
        return None
    return tuple(fields.values())


@settings(max_examples=400, deadline=None)
@given(NAMES, U32, U64, U32, U32, st.integers(0, 60), st.sampled_from([b"", b"\x00", b"ab"]))
def test_a_pull_payload_is_read_as_the_general_decode_reads_it(topic, queue_id, offset,
                                                               max_messages, wait_ms, cut,
                                                               extra):
    payload = _damaged(_name(topic) + struct.pack(">IQII", queue_id, offset, max_messages,
                                                  wait_ms), cut, extra)
    expected = _general(Op.PULL, payload)
    assert plain_pull(payload) == expected
    assert plain_pull(memoryview(payload)) == expected  # a frame's payload is a view


@settings(max_examples=400, deadline=None)
@given(NAMES, NAMES, U32, U64, st.integers(0, 60), st.sampled_from([b"", b"\x00", b"ab"]))
def test_a_commit_offset_payload_is_read_as_the_general_decode_reads_it(group, topic,
                                                                        queue_id, offset, cut,
                                                                        extra):
    payload = _damaged(_name(group) + _name(topic) + struct.pack(">IQ", queue_id, offset),
                       cut, extra)
    expected = _general(Op.COMMIT_OFFSET, payload)
    assert plain_commit_offset(payload) == expected
    assert plain_commit_offset(memoryview(payload)) == expected


def test_well_formed_payloads_are_read():
    """Not only Nones: the cases above include these."""
    assert plain_pull(_name(b"t") + struct.pack(">IQII", 1, 2, 3, 4)) == ("t", 1, 2, 3, 4)
    assert plain_commit_offset(_name("é".encode()) + _name(b"t")
                               + struct.pack(">IQ", 5, 6)) == ("é", "t", 5, 6)
