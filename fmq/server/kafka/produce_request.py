"""Produce's request read straight from its frame, one small layout per version.

kio reads every other request into its generated entities (:func:`fmq.server.kafka.framing
.read_request`); for Produce, sent once per record batch, that was 1.2k instructions a
message of librdkafka's batches of 64, the largest part of the door's own Produce work
after its answer. The layouts are Kafka's ProduceRequest v3..v9 (the versions
:mod:`fmq.server.kafka.produce` serves) behind the request header (v1; v2, with tagged
fields, for the flexible v9): the transactional id, acks, timeout, then each topic's name
and each partition's index and record batches, which are sliced, not copied.

kio stays the reference: whatever this reader does not take as it is (a length out of
range, text that is not UTF-8, tagged fields, a frame cut short) it hands, whole, to
:func:`fmq.server.kafka.framing.read_request`, which returns the request or raises its
error. tests/kafka/test_produce_request.py holds the two equal on kio's own frames and on
frames damaged at random.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any, NamedTuple

from kio.index import load_request_schema

from fmq.server.kafka.framing import read_request

#: The versions read here (Produce's served range).
VERSIONS = range(3, 10)
#: The first flexible version (compact encodings, tagged fields).
FLEXIBLE = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
#: acks, timeout (ms).
_ACKS_TIMEOUT = struct.Struct(">hi")
#: The fixed part of the request header: api key, version, correlation id.
_HEADER_FIXED = 8


class PartitionProduceData(NamedTuple):
    index: int
    records: bytes | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: tuple[PartitionProduceData, ...]


class ProduceRequest(NamedTuple):
    """The fields of kio's ProduceRequest the handler reads, under the same names."""

    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[TopicProduceData, ...]


class _KioDecides(Exception):
    """Raised inside the reader: the frame goes to kio, whole."""


def reference_produce_request(frame: bytes, version: int) -> Any:
    """The request as kio reads it."""
    return read_request(frame, load_request_schema(0, version))


def read_produce_request(frame: bytes, version: int) -> Any:
    """The Produce request of ``version`` in ``frame`` (as
    :func:`reference_produce_request` reads it)."""
    if version not in VERSIONS or type(frame) is not bytes:
        return reference_produce_request(frame, version)
    try:
        return _Reader(frame, version >= FLEXIBLE).request()
    except (_KioDecides, struct.error, UnicodeDecodeError, IndexError):
        return reference_produce_request(frame, version)


class _Reader:
    __slots__ = ("data", "at", "flexible")

    def __init__(self, data: bytes, flexible: bool) -> None:
        self.data = data
        self.flexible = flexible
        self.at = _HEADER_FIXED

    def request(self) -> ProduceRequest:
        self._classic_nullable_string()  # the header's client id: never compact
        if self.flexible:
            self._no_tagged_fields()
        transactional_id = self._nullable_string()
        acks, timeout = _ACKS_TIMEOUT.unpack_from(self.data, self.at)
        self.at += _ACKS_TIMEOUT.size
        topics = []
        for _ in range(self._count()):
            name = self._string()
            parts = []
            for _ in range(self._count()):
                (index,) = _I32.unpack_from(self.data, self.at)
                self.at += 4
                parts.append(PartitionProduceData(index, self._records()))
                if self.flexible:
                    self._no_tagged_fields()
            topics.append(TopicProduceData(name, tuple(parts)))
            if self.flexible:
                self._no_tagged_fields()
        if self.flexible:
            self._no_tagged_fields()
        return ProduceRequest(transactional_id, acks, datetime.timedelta(milliseconds=timeout),
                              tuple(topics))

    def _uvarint(self) -> int:
        data, at = self.data, self.at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 28:
                raise _KioDecides()
        self.at = at
        return value

    def _no_tagged_fields(self) -> None:
        if self._uvarint() != 0:
            raise _KioDecides()

    def _length(self, null: int) -> int:
        """A string's, an array's or bytes' length; ``null``: the width of a classic one
        (2 or 4 bytes), -1 for a null."""
        if self.flexible:
            return self._uvarint() - 1
        n = (_I16 if null == 2 else _I32).unpack_from(self.data, self.at)[0]
        self.at += null
        return n

    def _bytes(self, n: int) -> bytes:
        end = self.at + n
        if n < 0 or end > len(self.data):
            raise _KioDecides()
        value = self.data[self.at:end]
        self.at = end
        return value

    def _classic_nullable_string(self) -> str | None:
        (n,) = _I16.unpack_from(self.data, self.at)
        self.at += 2
        return None if n == -1 else self._bytes(n).decode()

    def _nullable_string(self) -> str | None:
        n = self._length(2)
        return None if n == -1 else self._bytes(n).decode()

    def _string(self) -> str:
        n = self._length(2)
        if n < 0:
            raise _KioDecides()
        return self._bytes(n).decode()

    def _count(self) -> int:
        n = self._length(4)
        if n < 0:
            raise _KioDecides()
        return n

    def _records(self) -> bytes | None:
        n = self._length(4)
        return None if n == -1 else self._bytes(n)
