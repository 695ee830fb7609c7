"""The columns the ``fmq-topic`` sink takes (Kafka's Spark sink is the model: ``key``,
``value``, ``headers``, ``topic``, ``partition`` there; ``key``, ``body``, ``properties``,
``topic``, ``queue_id`` here, plus ``tags``), checked once on the driver against the
DataFrame's schema, and the conversion of one row into an :class:`fmq.Message` in a task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from fmq.errors import InvalidArgument
from fmq.message import Message

_STRING = (StringType,)
#: column -> (accepted Spark types, what to tell the user)
SINK_COLUMNS: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    "topic": (_STRING, "string"),
    "key": (_STRING, "string"),
    "body": ((BinaryType, StringType), "binary or string (UTF-8 encoded)"),
    "tags": (_STRING, "string"),
    "properties": ((MapType,), "map<string,string>"),
    "queue_id": ((IntegerType, ShortType, LongType), "int"),
}


@dataclass(frozen=True)
class SinkColumns:
    """Which of the sink's columns a DataFrame has (``body`` always; ``topic`` unless the
    ``topic`` option names one)."""

    names: tuple[str, ...]
    topic: str | None  # the ``topic`` option: the topic of rows without a topic column


def check_schema(schema: StructType, topic_option: str | None) -> SinkColumns:
    """The sink's columns of ``schema``; an unknown column or a wrong type is refused
    before any task runs (a typo such as ``value`` would otherwise write nothing)."""
    names = []
    for field in schema.fields:
        if field.name not in SINK_COLUMNS:
            raise InvalidArgument(
                f"column {field.name!r} is not one the fmq-topic sink writes: select only "
                f"{', '.join(SINK_COLUMNS)} (rename or drop the others)")
        types, wanted = SINK_COLUMNS[field.name]
        ok = isinstance(field.dataType, types)
        if ok and isinstance(field.dataType, MapType):
            ok = (isinstance(field.dataType.keyType, StringType)
                  and isinstance(field.dataType.valueType, StringType))
        if not ok:
            raise InvalidArgument(
                f"column {field.name!r} is {field.dataType.simpleString()}; the fmq-topic "
                f"sink takes {wanted}: cast it")
        names.append(field.name)
    if "body" not in names:
        raise InvalidArgument("the fmq-topic sink needs a 'body' column (binary or string)")
    if "topic" not in names and not topic_option:
        raise InvalidArgument("the fmq-topic sink needs a 'topic' column or the 'topic' "
                              "option")
    return SinkColumns(tuple(names), topic_option)


def row_message(row: Any, columns: SinkColumns) -> Message:
    """One row as a message; a row that cannot be one raises :class:`InvalidArgument`
    naming what is wrong (the task, and so the write, fails: nothing is skipped)."""
    values = row.asDict() if hasattr(row, "asDict") else dict(row)
    topic = values.get("topic") or columns.topic
    if not topic:
        raise InvalidArgument("a row has no topic (its 'topic' column is null and no "
                              "'topic' option is given)")
    body = values["body"]
    if body is None:
        raise InvalidArgument(f"a row for topic {topic!r} has a null body: filter it out "
                              f"or give it an empty one")
    if isinstance(body, str):
        body = body.encode()
    properties = values.get("properties")
    queue_id = values.get("queue_id")
    return Message(topic, bytes(body), values.get("key"), values.get("tags"),
                   dict(properties) if properties else None,
                   None if queue_id is None else int(queue_id))
