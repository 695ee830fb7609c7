"""What users send and receive, and the checks every message passes before anything is
written."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from fmq import units
from fmq.errors import InvalidArgument, MessageTooLarge, UnknownQueue

_TOPIC_RE = re.compile(r"[A-Za-z0-9_.:%|-]{1,127}")  # matched with fullmatch: "t\n" is no topic
#: Characters no name may hold: C0 and C1 controls (NUL, newline, escape...) and the Unicode
#: line and paragraph separators. A name reaches log lines, so a newline in one would let a
#: client forge a line.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_NAME = 255  # bytes of a key, tags value, producer group or transaction id
MAX_PROPERTIES = 65_536  # encoded bytes
#: Largest offset (log, queue, consumer) and timestamp the store holds: they are i64 in the
#: log records and the index.
MAX_OFFSET = (1 << 63) - 1
#: Topics whose names start with this belong to FMQ itself (retries, dead letters, timers,
#: offsets...): clients may read them, only the broker writes them. docs/format.md lists them.
INTERNAL_TOPIC_PREFIX = "%"
#: A consumer group's retry and dead-letter topics are these prefixes and the group's name.
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: Properties the broker sets on a retried or dead-lettered message: its redeliveries so
#: far, and where it was first stored.
RECONSUME_TIMES = "%RECONSUME_TIMES"
ORIGIN_TOPIC = "%ORIGIN_TOPIC"
ORIGIN_QUEUE = "%ORIGIN_QUEUE"
ORIGIN_OFFSET = "%ORIGIN_OFFSET"
#: Properties of an idempotent send (docs/format.md, "Idempotent producers"): the producer's
#: id and the message's sequence number (both or neither), and an application's own dedup
#: key, unique per topic. The broker answers a resend of either with the original's result.
PRODUCER_ID_PROPERTY = "%producer"
SEQUENCE_PROPERTY = "%seq"
MESSAGE_ID_PROPERTY = "%msgid"
MAX_PRODUCER_ID = 64  # bytes
#: The user an idempotent send came from, written into it by a server with users: the dedup
#: window is kept per principal, so no user can claim another's producer or message ids.
PRINCIPAL_PROPERTY = "%principal"
#: The only properties starting with ``%`` a client may set (the idempotence ones); every
#: other belongs to the broker (retries, dead letters, the principal) and is refused.
CLIENT_PROPERTIES = frozenset({PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, MESSAGE_ID_PROPERTY})
#: Tags one subscription expression may name.
MAX_TAGS_IN_EXPRESSION = 64
#: The properties a consumer does not get: the dedup window's bookkeeping, not the
#: application's.
HIDDEN_PROPERTIES = frozenset({PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, PRINCIPAL_PROPERTY})


@dataclass
class Message:
    topic: str
    body: bytes
    key: str | None = None
    tags: str | None = None
    properties: dict[str, str] | None = None
    queue_id: int | None = None


@dataclass(frozen=True)
class SendResult:
    """Where a message was stored: its log offset and queue position in the broker group
    ``group`` that took it ("" when the server did not say: a server without ROUTE)."""

    offset: int
    queue_id: int
    queue_offset: int
    group: str = ""


_new_object = object.__new__
_set_attribute = object.__setattr__


def new_message(topic: str, body: bytes, key: str | None, tags: str | None,
                properties: dict[str, str] | None, queue_id: int | None) -> Message:
    """``Message(topic, body, key, tags, properties, queue_id)`` for the server, which makes
    one per message received: its fields given in one step instead of the dataclass's
    ``__init__`` with keywords. Equal alike (tests/engine)."""
    message = _new_object(Message)
    message.__dict__ = {"topic": topic, "body": body, "key": key, "tags": tags,
                        "properties": properties, "queue_id": queue_id}
    return message


def new_send_result(offset: int, queue_id: int, queue_offset: int) -> SendResult:
    """``SendResult(offset, queue_id, queue_offset)`` for the send path, which makes one per
    message: the frozen dataclass's ``__init__`` sets each field with a call of
    ``object.__setattr__`` (about 7,900 instructions a result, callgrind); this gives the new
    result its fields in one step (about 4,900). Equal, hashed and immutable alike
    (tests/engine/test_batch_shortcuts.py)."""
    result = _new_object(SendResult)
    _set_attribute(result, "__dict__", {"offset": offset, "queue_id": queue_id,
                                        "queue_offset": queue_offset, "group": ""})
    return result


class PackedResults(Sequence[SendResult]):
    """The results of messages placed together, packed back to back as ``FORMAT`` (offset,
    queue id, queue offset: big-endian u64, u32, u64), which is the wire's send_result
    (docs/protocol.md): the server answers a send with these bytes as they are, without a
    :class:`SendResult` per message. Read as a sequence it gives a ``SendResult`` per
    message (group ""), equal to the list the embedded API returns
    (tests/engine/test_packed_results.py)."""

    __slots__ = ("data",)

    FORMAT = struct.Struct(">QIQ")

    def __init__(self, data: bytes) -> None:
        if len(data) % self.FORMAT.size:
            raise ValueError(f"packed send results must be a multiple of {self.FORMAT.size} "
                             f"bytes, not {len(data)}")
        self.data = data

    @classmethod
    def part(cls, data: bytes, start: int, count: int) -> PackedResults:
        """Results ``start`` to ``start + count`` of ``data`` (whole results, unchecked: the
        send path's answers take their parts of a placement this way)."""
        size = cls.FORMAT.size
        part = _new_object(cls)
        part.data = data[start * size:(start + count) * size]
        return part

    def __len__(self) -> int:
        return len(self.data) // self.FORMAT.size

    def __getitem__(self, index):  # type: ignore[override]  # int -> result, slice -> packed
        size = self.FORMAT.size
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return PackedResults(self.data[start * size:max(start, stop) * size])
            return [self[i] for i in range(start, stop, step)]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("send result index out of range")
        return new_send_result(*self.FORMAT.unpack_from(self.data, index * size))

    def __iter__(self) -> Iterator[SendResult]:
        for fields in self.FORMAT.iter_unpack(self.data):
            yield new_send_result(*fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedResults):
            return self.data == other.data
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which do not hash

    def __repr__(self) -> str:
        return f"PackedResults({list(self)!r})"


def pack_results(results: Sequence[SendResult]) -> PackedResults:
    """``results`` as :class:`PackedResults` (raises ``struct.error`` for a value outside
    its field)."""
    if type(results) is PackedResults:
        return results
    pack = PackedResults.FORMAT.pack
    return PackedResults(b"".join([pack(r.offset, r.queue_id, r.queue_offset)
                                   for r in results]))


@dataclass(frozen=True)
class ScheduledSend:
    """The answer to a scheduled send: the message is durable at ``offset`` (its TIMER
    record) and becomes consumable in its topic at ``deliver_at`` (ms since the epoch)."""

    offset: int
    deliver_at: int


@dataclass(frozen=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    offset: int  # log offset of the record holding the body
    body: bytes
    key: str | None
    tags: str | None
    properties: dict[str, str] = field(default_factory=dict)
    store_time: int = 0
    #: The broker group that stores it, set by a consumer reading a topic routed over
    #: several groups (docs/cluster.md); "" otherwise.
    group: str = ""

    @property
    def reconsume_times(self) -> int:
        """How many times this message was delivered again after a consumer of the group
        failed it (0 for a first delivery)."""
        return int((self.properties or {}).get(RECONSUME_TIMES, "0"))

    @property
    def origin_topic(self) -> str:
        """The topic the message was sent to (``topic`` is the group's retry or
        dead-letter topic for a redelivery)."""
        return (self.properties or {}).get(ORIGIN_TOPIC, self.topic)


def valid_topic_name(topic: str) -> bool:
    """Whether ``topic`` passes :func:`check_topic`."""
    return _TOPIC_RE.fullmatch(topic) is not None


def check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic):
        raise InvalidArgument(
            f"invalid topic {topic!r}: use 1-127 characters from A-Z a-z 0-9 _ . : % | -"
        )
    return topic


def retry_topic(group: str) -> str:
    """The topic ``group``'s failed messages come back through (its consumers read it)."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """The dead-letter topic of ``group``."""
    return DLQ_PREFIX + group


def is_internal_topic(topic: str) -> bool:
    """Whether ``topic`` is one of FMQ's own topics (see :data:`INTERNAL_TOPIC_PREFIX`)."""
    return topic.startswith(INTERNAL_TOPIC_PREFIX)


def check_name(value: object, what: str, allow_none: bool = True) -> str | None:
    """A group, producer group, member or new transaction id: 1-255 bytes of UTF-8
    without control characters (empty counts as absent when ``allow_none``)."""
    value = check_label(value, what, allow_none)
    if value is not None:
        bad = _CONTROL_RE.search(value)
        if bad:
            raise InvalidArgument(
                f"{what} {value!r} contains the control character {bad.group()!r} at "
                f"position {bad.start()}; names may not contain control characters "
                f"(newline, NUL, escape...)")
    return value


def check_label(value: object, what: str, allow_none: bool = True) -> str | None:
    """A key or tags value (message data, never logged), or the id of an existing
    transaction: 1-255 bytes of UTF-8 without NUL (the index separates names with NUL).
    Transaction ids are looked up with this looser rule so that one prepared before names
    refused control characters can still be ended."""
    if value is None or value == "":
        if allow_none:
            return None
        raise InvalidArgument(f"{what} must not be empty")
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidArgument(f"{what} must not contain NUL (control character '\\x00')")
    if len(value.encode()) > MAX_NAME:
        raise InvalidArgument(f"{what} is longer than {MAX_NAME} bytes")
    return value


def check_message(msg: object, max_size: int, queues: int | Callable[[str], int], *,
                  internal: bool = False, topic_checked: bool = False) -> Message:
    """``msg`` checked; ``queues`` is the queue count, or a function of the topic giving it.
    Only the broker's own writes pass ``internal=True``: they may target an internal topic
    and set the broker's own ``%`` properties. ``topic_checked``: the topic passed these
    checks before, with the same ``internal`` (a batch checks each topic once)."""
    if not isinstance(msg, Message):
        raise InvalidArgument(f"expected fmq.Message, got {type(msg).__name__}")
    if not topic_checked:
        check_topic(msg.topic)
    if not internal and not topic_checked and is_internal_topic(msg.topic):
        raise InvalidArgument(
            f"topic {msg.topic!r} is reserved: names starting with {INTERNAL_TOPIC_PREFIX!r} "
            f"belong to FMQ's internal topics (retries, dead letters, timers); pick another name"
        )
    if not isinstance(msg.body, (bytes, bytearray, memoryview)):
        raise InvalidArgument(
            f"message body must be bytes, not {type(msg.body).__name__}; encode text first"
        )
    if len(msg.body) > max_size:
        # Both in the same unit as people set the limit (4MiB), and exactly in bytes.
        raise MessageTooLarge(
            f"message body is {units.size(len(msg.body))} ({len(msg.body)} bytes), the limit "
            f"(max_message_size) is {units.size(max_size)} ({max_size} bytes); split the "
            f"payload or raise the limit"
        )
    # The usual message (no key or tags, a few plain properties, a queue id in range)
    # passes without a call of the checks that would tell what is wrong with it.
    if msg.key is not None or msg.tags is not None or msg.properties is not None:
        check_fields(msg, internal)
    queue_id = msg.queue_id
    if queue_id is not None:
        count = queues(msg.topic) if callable(queues) else queues
        if type(queue_id) is not int or not 0 <= queue_id < count:
            check_queue_id(queue_id, count)
    return msg


def check_fields(msg: Message, internal: bool = False) -> None:
    """:func:`check_message`'s checks of ``msg``'s key, tags and properties (the ones that
    depend on no setting); ``internal`` as there."""
    if msg.key is not None:
        check_label(msg.key, "key")
    if msg.tags is not None:
        check_label(msg.tags, "tags")
    properties = msg.properties
    if properties is not None and not plain_properties(properties):
        _check_properties(properties, internal)


def plain_properties(properties: object) -> bool:
    """Whether ``properties`` surely pass :func:`_check_properties` (``internal`` or not):
    a dict of ASCII strings, no name starting with ``%`` (an ASCII string's length is its
    encoded length; within the size limit, their count is within 0xFFFF). A message's
    usual properties cost a fraction of the full checks this way; anything else takes
    them, and gets their error."""
    if type(properties) is not dict:
        return False
    size = 2
    for k, v in properties.items():
        if (type(k) is not str or type(v) is not str or not k.isascii() or not v.isascii()
                or k[:1] == "%"):
            return False
        size += 4 + len(k) + len(v)
    return size <= MAX_PROPERTIES



def _check_properties(properties: object, internal: bool) -> None:
    """A message's properties: a dict of str to str taking at most :data:`MAX_PROPERTIES`
    bytes encoded, no broker's ``%`` property unless ``internal``, well-formed idempotence
    properties."""
    if not isinstance(properties, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise InvalidArgument("properties must be a dict of str to str")
    size = 2 + sum(4 + len(k.encode()) + len(v.encode()) for k, v in properties.items())
    if size > MAX_PROPERTIES or len(properties) > 0xFFFF:
        raise InvalidArgument(f"properties take {size} bytes encoded; the limit is {MAX_PROPERTIES}")
    if not internal:
        for name in properties:
            if name[:1] == "%" and name not in CLIENT_PROPERTIES:
                raise reserved_property(name)
    if (PRODUCER_ID_PROPERTY in properties or SEQUENCE_PROPERTY in properties
            or MESSAGE_ID_PROPERTY in properties):
        check_dedup_properties(properties)


def reserved_property(name: str) -> InvalidArgument:
    """The refusal of a client's message setting the broker's property ``name``."""
    allowed = ", ".join(sorted(CLIENT_PROPERTIES))
    return InvalidArgument(
        f"property {name!r} is reserved: properties starting with '%' are set by FMQ itself "
        f"(retries, dead letters, the sender's principal); a client may set only {allowed}. "
        f"Rename the property without the leading '%'")


def check_dedup_properties(properties: dict[str, str]) -> None:
    """The idempotence properties of a message: a producer id (1-64 bytes, no control
    characters) together with a sequence number (decimal, 0..2**63-1), and a message id."""
    producer = properties.get(PRODUCER_ID_PROPERTY)
    seq = properties.get(SEQUENCE_PROPERTY)
    if (producer is None) != (seq is None):
        raise InvalidArgument(
            f"an idempotent send carries both {PRODUCER_ID_PROPERTY!r} and "
            f"{SEQUENCE_PROPERTY!r} properties, or neither; set both or remove the other")
    if producer is not None:
        # The common id (printable ASCII) is checked without the general name rules.
        if not (producer.isascii() and producer.isprintable()
                and 0 < len(producer) <= MAX_PRODUCER_ID):
            check_name(producer, "producer id", allow_none=False)
            if len(producer.encode()) > MAX_PRODUCER_ID:
                raise InvalidArgument(f"producer id is longer than {MAX_PRODUCER_ID} bytes")
        if not (seq.isascii() and seq.isdigit() and (len(seq) < 19 or int(seq) <= MAX_OFFSET)):
            raise InvalidArgument(f"sequence {seq!r} of producer {producer!r} is not a "
                                  f"decimal number in 0..{MAX_OFFSET}")
    if MESSAGE_ID_PROPERTY in properties:
        check_label(properties[MESSAGE_ID_PROPERTY], "message id", allow_none=False)


def parse_tag_expression(expression: object) -> frozenset[str] | None:
    """The tags a subscription expression selects: ``"a || b"`` (a message whose tags
    value is exactly one of them), or None for ``"*"`` or empty (every message)."""
    if expression is None:
        return None
    if not isinstance(expression, str):
        raise InvalidArgument(f"a tag expression is a string such as 'a || b' or '*', not "
                              f"{type(expression).__name__}")
    if expression.strip() in ("", "*"):
        return None
    tags = [t.strip() for t in expression.split("||")]
    if not all(tags) or len(tags) > MAX_TAGS_IN_EXPRESSION:
        raise InvalidArgument(
            f"tag expression {expression!r} is not 1-{MAX_TAGS_IN_EXPRESSION} tags separated "
            f"by '||' (like 'a || b'), nor '*'")
    for t in tags:
        check_label(t, "tag")
    return frozenset(tags)


def check_queue_id(queue_id: object, queues: int) -> int:
    if not isinstance(queue_id, int) or isinstance(queue_id, bool) or not 0 <= queue_id < queues:
        raise UnknownQueue(
            f"queue id {queue_id!r} does not exist: the topic has queues 0..{queues - 1} "
            f"(its own setting, fmq topic describe, else queues_per_topic)"
        )
    return queue_id


def check_offset(offset: object, what: str = "offset") -> int:
    if (not isinstance(offset, int) or isinstance(offset, bool)
            or not 0 <= offset <= MAX_OFFSET):
        raise InvalidArgument(f"{what} must be an integer in 0..{MAX_OFFSET}, got {offset!r}")
    return offset


def check_count(value: object, what: str) -> int:
    """A number of items asked for (messages, transactions): at least one."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument(f"{what} must be an integer >= 1, got {value!r}")
    return value
