"""Numbers for people: byte sizes with units, counts with separators, UTC dates, durations.
Shared by the command line's tables (``cli/output.py``) and the Spark job's summary."""

from __future__ import annotations

import time

#: What a missing value prints as.
NONE = "-"

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(n: int | None) -> str:
    """Bytes with a binary unit: ``512 B``, ``1.5 KiB``, ``64.0 MiB``."""
    if n is None:
        return NONE
    value = float(n)
    for unit in _UNITS[:-1]:
        if abs(value) < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"


def count(n: int | None) -> str:
    """An integer with thousands separators."""
    return NONE if n is None else f"{n:,}"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """A count and its noun in the right number: ``1 message``, ``2 messages``,
    ``1,024 queues``; ``nouns`` for an irregular plural."""
    return f"{count(n)} {noun if n == 1 else (nouns or noun + 's')}"


def date_s(seconds: float | None) -> str:
    """Seconds since the epoch as a UTC date and time."""
    if seconds is None:
        return NONE
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def date_ms(ms: int | None) -> str:
    """Milliseconds since the epoch as a UTC date and time."""
    return NONE if ms is None else date_s(ms / 1000.0)


def timestamp_ms(ms: int | None) -> str:
    """Milliseconds since the epoch as a compact UTC timestamp to the millisecond, one word
    (``2026-11-26T12:56:17.621Z``): for dumps, where a record's fields are ``key=value``."""
    if ms is None:
        return NONE
    seconds, millis = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def duration_ms(ms: int | float | None) -> str:
    """A duration in the largest unit that keeps it readable: ``850 ms``, ``12.3 s``,
    ``5.0 min``, ``2.5 h``, ``3.1 d``."""
    if ms is None:
        return NONE
    if ms < 1000:
        return f"{ms:.0f} ms"
    for unit, span in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms >= span:
            return f"{ms / span:.1f} {unit}"
    return f"{ms / 1000:.1f} s"
