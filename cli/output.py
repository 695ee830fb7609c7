"""Human output of the ``fmq`` commands: aligned tables, sizes with units, dates and ages.
``--json`` output never goes through here: it stays the complete data."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

NONE = "-"

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(n: int | None) -> str:
    """Bytes with a binary unit: ``512 B``, ``1.5 KiB``, ``64.0 MiB``."""
    if n is None:
        return NONE
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def count(n: int | None) -> str:
    """An integer with thousands separators."""
    return NONE if n is None else f"{n:,}"


def date_ms(ms: int | None) -> str:
    """Milliseconds since the epoch as a UTC date and time."""
    return NONE if ms is None else date_s(ms / 1000.0)


def date_s(seconds: float | None) -> str:
    """Seconds since the epoch as a UTC date and time."""
    if seconds is None:
        return NONE
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


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


def text(value: Any) -> str:
    """A cell: ``-`` for None, numbers with separators, anything else as its string."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return count(value)
    return str(value)


Column = tuple[str, Callable[[dict], Any]]


def table(rows: Iterable[dict], columns: Sequence[Column], empty: str = "(none)") -> str:
    """An aligned table: a header line, then one line per row. A column whose cells are all
    numbers (sizes and durations included) is right-aligned; ``columns`` are (header,
    function of the row giving the cell)."""
    cells = [[text(fn(row)) for _h, fn in columns] for row in rows]
    if not cells:
        return empty
    headers = [h for h, _fn in columns]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    right = [all(c[i] == NONE or c[i][:1].isdigit() for c in cells) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w)
                         for v, w, r in zip(values, widths, right, strict=True)).rstrip()

    return "\n".join([line(headers), *(line(c) for c in cells)])


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """``name  value`` lines with the values aligned."""
    width = max((len(k) for k, _v in pairs), default=0)
    return "\n".join(f"{k.ljust(width)}  {text(v)}" for k, v in pairs)


def section(title: str, body: str) -> str:
    """A titled block: the title, then the body indented by two spaces."""
    return title + "\n" + "\n".join("  " + line if line else line for line in body.splitlines())
