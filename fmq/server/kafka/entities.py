"""Plain values into kio's generated entities, for any version of a message.

A handler describes its answer once, as nested dicts holding the fields of every version it
serves; :func:`build` keeps the fields the requested version's schema has (a field new in a
later version is simply left out of an older answer) and converts the values the schema
types as durations, times and error codes. The bytes are then written by kio from Kafka's
own schemas; only Produce's and Fetch's answers, one per record batch, are packed by their
own layouts (``produce_answer.py``, ``fetch_answer.py``), held equal to kio's bytes.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity


def _entity_type(annotation: Any) -> tuple[type | None, bool]:
    """(the entity class an annotation holds, whether it is a sequence of them)."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _entity_type(inner[0]) if len(inner) == 1 else (None, False)
    if origin is tuple:
        args = typing.get_args(annotation)
        inner, _ = _entity_type(args[0]) if args else (None, False)
        return inner, True
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation, False
    return None, False


def _value(field: dataclasses.Field, value: Any) -> Any:
    kind = field.metadata.get("kafka_type")
    if value is None:
        return None
    if kind == "error_code":
        return ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=int(value))
    if kind == "datetime_i64":
        return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
    entity, many = _entity_type(field.type)
    if entity is not None:
        if many:
            return tuple(build(entity, v) for v in value)
        return build(entity, value)
    if isinstance(value, list):
        return tuple(value)
    return value


def build(entity_type: type[Entity], values: dict[str, Any]) -> Entity:
    """An ``entity_type`` from ``values``: the keys it has no field for are dropped, the
    fields not given keep the schema's defaults."""
    kwargs = {}
    for field in dataclasses.fields(entity_type):
        if field.name in values:
            kwargs[field.name] = _value(field, values[field.name])
    return entity_type(**kwargs)


def ms(value: datetime.timedelta | int) -> int:
    """Milliseconds of a duration field as kio reads it."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)
