"""Kafka records to FMQ messages and back.

* The key is the message key: UTF-8 text of 1-255 bytes without NUL (FMQ's key rule); a
  null or empty key is no key. Any other key is refused (INVALID_RECORD), never altered.
* The value is the body, byte for byte. A null value (a tombstone) is an empty body with
  the property :data:`NULL_VALUE_PROPERTY` set, so it reads back as null.
* Headers are properties, in order. A header value that is UTF-8 text is the property's
  value as it is; any other value (binary, or text beginning with NUL) is stored as NUL
  followed by its base64, and a null value as NUL alone, so every value reads back byte
  for byte. A header name given twice is refused (properties are a map).
"""

from __future__ import annotations

import base64
import binascii

from fmq.message import HIDDEN_PROPERTIES, Message, StoredMessage, new_message
from fmq.server.kafka.records import KafkaRecord

#: The property marking a Kafka null value (an empty body stands for it).
NULL_VALUE_PROPERTY = "kafka.null_value"
#: The property keeping a Kafka record's CreateTime (ms since the epoch, decimal).
CREATE_TIME_PROPERTY = "kafka.create_time"
#: Properties of FMQ's own that a Kafka producer's headers may not name.
KAFKA_PROPERTIES = frozenset({NULL_VALUE_PROPERTY, CREATE_TIME_PROPERTY})
#: A property value beginning with this is an escaped header value (see the module's text).
ESCAPE = "\x00"


class MappingError(ValueError):
    """A Kafka record FMQ cannot store as it is (the producer gets INVALID_RECORD)."""


def header_to_property(value: bytes | None) -> str:
    if value is None:
        return ESCAPE
    if not value.startswith(b"\x00"):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return ESCAPE + base64.b64encode(value).decode("ascii")


def property_to_header(value: str) -> bytes | None:
    if not value.startswith(ESCAPE):
        return value.encode("utf-8")
    if value == ESCAPE:
        return None
    try:
        return base64.b64decode(value[1:], validate=True)
    except (binascii.Error, ValueError):
        return value.encode("utf-8")  # not one of ours: the text as it is


def to_message(topic: str, partition: int, record: KafkaRecord) -> Message:
    """``record`` as the message stored in queue ``partition`` of ``topic``."""
    key = None
    if record.key:
        try:
            key = record.key.decode("utf-8")
        except UnicodeDecodeError:
            raise MappingError("the record key is not UTF-8 text; FMQ keys are text of "
                               "1-255 bytes") from None
    properties: dict[str, str] = {}
    for name, value in record.headers:
        if name in KAFKA_PROPERTIES:
            raise MappingError(f"header {name!r} is a property FMQ's Kafka door keeps for "
                               f"itself; rename it")
        if name in properties:
            raise MappingError(f"header {name!r} is given twice; FMQ properties are a map, "
                               f"so each header name may appear once")
        properties[name] = header_to_property(value)
    if record.value is None:
        properties[NULL_VALUE_PROPERTY] = "1"
    if record.timestamp >= 0:
        properties[CREATE_TIME_PROPERTY] = str(record.timestamp)
    return new_message(topic, record.value or b"", key, None, properties or None, partition)


def to_messages(topic: str, partition: int, records: list[KafkaRecord]) -> list[Message]:
    """:func:`to_message` of each record of a batch: the same messages, with the common
    record (no headers, a value) made without a call, and each CreateTime's text made once
    (a batch's records mostly share their millisecond)."""
    messages = []
    append = messages.append
    last_time, last_text = None, ""
    for record in records:
        key, value, timestamp = record.key, record.value, record.timestamp
        if record.headers or value is None or timestamp < 0:
            append(to_message(topic, partition, record))
            continue
        if key:
            try:
                key = key.decode("utf-8")
            except UnicodeDecodeError:
                raise MappingError("the record key is not UTF-8 text; FMQ keys are text of "
                                   "1-255 bytes") from None
        else:
            key = None
        if timestamp != last_time:
            last_time, last_text = timestamp, str(timestamp)
        append(new_message(topic, value, key, None, {CREATE_TIME_PROPERTY: last_text},
                           partition))
    return messages


def to_record(message: StoredMessage) -> KafkaRecord:
    """A stored message as the Kafka record a consumer gets."""
    props = message.properties or {}
    value: bytes | None = bytes(message.body)
    headers = []
    timestamp = message.store_time
    for name, text in props.items():
        if name in HIDDEN_PROPERTIES:
            continue
        if name == CREATE_TIME_PROPERTY and text.isdigit():
            timestamp = int(text)
            continue
        if name == NULL_VALUE_PROPERTY and not value:
            value = None
            continue
        headers.append((name, property_to_header(text)))
    key = message.key.encode("utf-8") if message.key else None
    return KafkaRecord(key, value, headers, timestamp)
