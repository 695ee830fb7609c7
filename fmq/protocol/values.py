"""The one translation between the wire's field dicts and FMQ's value types.

The server turns requests into :class:`~fmq.message.Message` and answers from
:class:`~fmq.message.SendResult`, :class:`~fmq.message.StoredMessage` and
:class:`~fmq.tx.state.UncertainTx`; the producer and the consumer do the reverse. Both sides
use these functions, so a field added to a composite type (``fmq.protocol.schema``) is
added in one place. Client-safe: nothing of the storage code is imported.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from fmq.errors import InvalidArgument
from fmq.message import (
    Message,
    PackedResults,
    ScheduledSend,
    SendResult,
    StoredMessage,
    new_message,
    pack_results,
)
from fmq.protocol.layout import SEND_RESULT_FORMAT
from fmq.protocol.types import Encoded, Packed
from fmq.tx.state import PreparedMessage, TxState, UncertainTx

#: The wire's queue_id that lets the broker pick (key hash, else round robin). Any other
#: negative value is an unknown queue, not a second way of saying "pick".
BROKER_PICKS_QUEUE = -1


def message_to_wire(m: Message) -> dict[str, Any]:
    """The ``message`` fields of ``m``; raises InvalidArgument for what the wire cannot
    carry (not a Message, a body that is not bytes)."""
    if not isinstance(m, Message):
        raise InvalidArgument(f"expected fmq.Message, got {type(m).__name__}")
    body = m.body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidArgument(
            f"message body must be bytes, not {type(body).__name__}; encode text first")
    return {"topic": m.topic, "body": bytes(body), "key": m.key or None,
            "tags": m.tags or None, "properties": m.properties or {},
            "queue_id": BROKER_PICKS_QUEUE if m.queue_id is None else m.queue_id}


def message_from_wire(d: dict[str, Any]) -> Message:
    qid = d["queue_id"]
    return new_message(d["topic"], d["body"], d["key"], d["tags"], d["properties"] or None,
                       None if qid == BROKER_PICKS_QUEUE else qid)


def result_to_wire(r: SendResult) -> dict[str, Any]:
    return {"offset": r.offset, "queue_id": r.queue_id, "queue_offset": r.queue_offset}


def send_answer(result: SendResult | PackedResults) -> Packed | dict[str, Any]:
    """A SEND answer's payload, packed at once in the wire's send_result format, or as the
    field dict when a value does not fit its field (for the codec to refuse with its own
    error): the same frame either way (tests/engine/test_batch_shortcuts.py). ``result``:
    the message's result, or the one result placement packed already."""
    if type(result) is PackedResults:
        if len(result) == 1:  # PackedResults.FORMAT is the wire's send_result
            return Packed(result.data)
        raise ValueError(f"a SEND has one result, not {len(result)}")
    try:
        return Packed(SEND_RESULT_FORMAT.pack(result.offset, result.queue_id,
                                              result.queue_offset))
    except struct.error:
        return {"result": result_to_wire(result)}


_STR_LENGTH = struct.Struct(">H")  # the wire's str: u16 byte length, then UTF-8
_NAME_BYTES = 255  # a transaction id is a name (docs/protocol.md, section 3)


def tx_id_answer(tx_id: str) -> Packed | dict[str, Any]:
    """A PREPARE answer's payload (its ``tx_id`` str) packed at once, or as the field dict
    for an id that is not a name (the codec then refuses it with its own error): the same
    frame either way (tests/protocol/test_tx_answers.py)."""
    if type(tx_id) is str:
        data = tx_id.encode()
        if len(data) <= _NAME_BYTES:
            return Packed(_STR_LENGTH.pack(len(data)) + data)
    return {"tx_id": tx_id}


def _packed_state(state: TxState) -> Packed:
    data = state.value.encode()
    return Packed(_STR_LENGTH.pack(len(data)) + data)


#: The answer of COMMIT, ROLLBACK, ANSWER_UNCERTAIN and RESOLVE_TX (one ``state`` str) for
#: each state, packed once: a transaction's COMMIT is answered without the codec.
_STATE_ANSWERS = {state: _packed_state(state) for state in TxState}


def state_answer(state: TxState) -> Packed:
    """The answer payload ``{"state": state}``, packed (the same frame as the codec's)."""
    return _STATE_ANSWERS[state]


def results_to_wire(results: Sequence[SendResult]) -> Encoded | list[dict[str, Any]]:
    """The ``results`` field of a SEND_BATCH answer: packed at once in the wire's
    send_result format (no field dict per result; placement's packed results as they are),
    or as field dicts when a value does not fit its field, for the codec to refuse with its
    own error."""
    try:
        packed = pack_results(results)  # PackedResults.FORMAT is the wire's send_result
    except struct.error:
        return [result_to_wire(r) for r in results]
    return Encoded(len(packed), packed.data)


def result_from_wire(d: dict[str, Any]) -> SendResult:
    return SendResult(d["offset"], d["queue_id"], d["queue_offset"])


def stored_to_wire(m: StoredMessage) -> dict[str, Any]:
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "offset": m.offset, "body": m.body, "key": m.key, "tags": m.tags,
            "properties": m.properties or {}, "store_time": m.store_time}


def stored_from_wire(d: dict[str, Any]) -> StoredMessage:
    return StoredMessage(d["topic"], d["queue_id"], d["queue_offset"], d["offset"], d["body"],
                         d["key"], d["tags"], d["properties"], d["store_time"])


def uncertain_to_wire(t: UncertainTx) -> dict[str, Any]:
    return {"tx_id": t.tx_id, "producer_group": t.producer_group,
            "prepare_offset": t.prepare_offset, "store_time": t.store_time, "checks": t.checks,
            "messages": [{"topic": m.topic, "queue_id": m.queue_id, "key": m.key,
                          "tags": m.tags, "properties": m.properties or {}, "body": m.body,
                          "offset": m.offset} for m in t.messages]}


def uncertain_from_wire(d: dict[str, Any]) -> UncertainTx:
    return UncertainTx(d["tx_id"], d["producer_group"], d["prepare_offset"], d["store_time"],
                       d["checks"],
                       [PreparedMessage(m["topic"], m["body"], m["key"], m["tags"],
                                        m["properties"] or {}, m["queue_id"], m["offset"])
                        for m in d["messages"]])


#: ``deliver_at`` / ``delay_ms`` of SEND_AT when the other one is given.
NOT_GIVEN = -1


def schedule_to_wire(deliver_at: object = None, delay: object = None) -> dict[str, int]:
    """SEND_AT's ``deliver_at`` and ``delay_ms`` for exactly one of ``deliver_at`` (ms since
    the Unix epoch, or an aware ``datetime``) and ``delay`` (seconds, or a ``timedelta``).
    The server adds a delay to its own clock, so clocks need not agree for delays."""
    if (deliver_at is None) == (delay is None):
        raise InvalidArgument("give exactly one of deliver_at (ms since the epoch or a "
                              "datetime) and delay (seconds or a timedelta)")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
            raise InvalidArgument(f"delay must be seconds >= 0 or a timedelta, got {delay!r}")
        return {"deliver_at": NOT_GIVEN, "delay_ms": round(seconds * 1000)}
    if isinstance(deliver_at, datetime):
        if deliver_at.tzinfo is None:
            raise InvalidArgument("deliver_at must be an aware datetime (with a time zone)")
        deliver_at = round(deliver_at.timestamp() * 1000)
    if not isinstance(deliver_at, int) or isinstance(deliver_at, bool) or deliver_at < 0:
        raise InvalidArgument(f"deliver_at must be ms since the epoch >= 0 or a datetime, "
                              f"got {deliver_at!r}")
    return {"deliver_at": deliver_at, "delay_ms": NOT_GIVEN}


def scheduled_from_wire(d: dict[str, Any]) -> ScheduledSend:
    return ScheduledSend(d["offset"], d["deliver_at"])
