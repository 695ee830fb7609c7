"""Rebuild the error an error response carries: the same :class:`~fmq.errors.FMQError`
subclass the server raised, with the same message and the same fields.

The wire carries only a class code and the message (docs/protocol.md section 3). A class
with fields writes its message from its ``message_format``, so the fields are read back out
of the message and the error is built again through its own constructor; it is kept only
when that reproduces the message exactly, so a field is never guessed.
"""

from __future__ import annotations

import re
from string import Formatter

from fmq.errors import FMQError, all_error_classes

_CLASSES = all_error_classes()
_PATTERNS: dict[type[FMQError], re.Pattern[str]] = {}


def make_error(code: int, message: str, retriable: bool = False) -> FMQError:
    """The error with class ``code`` and ``message`` (the root FMQError, keeping
    ``retriable``, for a code this side does not know)."""
    cls = _CLASSES.get(code)
    if cls is None:
        exc = FMQError(message)
        exc.retriable = retriable  # keep the server's hint for a code this client lacks
        return exc
    if cls.fields:
        rebuilt = _rebuild_with_fields(cls, message)
        if rebuilt is not None:
            return rebuilt
    # No fields, or a message not in the class's format (cut at the wire's length limit):
    # the text as it came, and every field None rather than missing.
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for name in cls.fields:
        setattr(exc, name, None)
    return exc


def _rebuild_with_fields(cls: type[FMQError], message: str) -> FMQError | None:
    match = _message_pattern(cls).fullmatch(message)
    return None if match is None else _built(cls, match)


def find_error(cls: type[FMQError], text: str) -> FMQError | None:
    """The first message of ``cls`` found inside ``text`` (a traceback that carried the
    error only as text), rebuilt with its fields; None when ``text`` holds none. Only for a
    class whose ``message_format`` ends with text, not a field (else the end is unknown)."""
    if not cls.fields or cls.message_format.endswith("}"):
        raise ValueError(f"{cls.__name__}'s message cannot be found inside other text")
    for match in _message_pattern(cls).finditer(text):
        exc = _built(cls, match)
        if exc is not None:
            return exc
    return None


def _built(cls: type[FMQError], match: re.Match[str]) -> FMQError | None:
    """``cls`` built from the fields ``match`` read, if it writes exactly the matched text."""
    try:
        exc = cls(**{name: cls.fields[name](text) for name, text in match.groupdict().items()})
    except (TypeError, ValueError):
        return None
    return exc if str(exc) == match.group(0) else None


def _message_pattern(cls: type[FMQError]) -> re.Pattern[str]:
    """A pattern matching exactly the messages ``cls.message_format`` produces, with one
    named group per field (a field used twice must repeat the same text)."""
    pattern = _PATTERNS.get(cls)
    if pattern is None:
        parts: list[str] = []
        seen: set[str] = set()
        for literal, name, _spec, _conversion in Formatter().parse(cls.message_format):
            parts.append(re.escape(literal))
            if name is None:
                continue
            if name in seen:
                parts.append(f"(?P={name})")
            else:
                seen.add(name)
                text = r"-?\d+" if cls.fields[name] is int else ".*?"
                parts.append(f"(?P<{name}>{text})")
        pattern = _PATTERNS[cls] = re.compile("".join(parts), re.DOTALL)
    return pattern
