"""Human output of the ``fmq`` commands: aligned tables and fields, with the sizes, counts,
dates and durations of :mod:`fmq.units`. ``--json`` output never goes through here: it
stays the complete data."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fmq.units import NONE, count, date_ms, date_s, duration_ms, plural, size

__all__ = ["NONE", "Column", "count", "date_ms", "date_s", "duration_ms", "fields", "plural",
           "section", "size", "table", "text"]

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

#: A count, size or duration cell ("1,234", "1.5 MiB", "12 ms"); an address such as
#: "127.0.0.1:9876" starts with a digit but is not one.
_NUMBER = re.compile(r"-?\d[\d,]*(\.\d+)?( ?[A-Za-z%/]+)?")


def table(rows: Iterable[dict], columns: Sequence[Column], empty: str = "(none)") -> str:
    """An aligned table: a header line, then one line per row. A column whose cells are all
    numbers (sizes and durations included) is right-aligned; ``columns`` are (header,
    function of the row giving the cell)."""
    cells = [[text(fn(row)) for _h, fn in columns] for row in rows]
    if not cells:
        return empty
    headers = [h for h, _fn in columns]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    right = [all(c[i] == NONE or _NUMBER.fullmatch(c[i]) for c in cells)
             for i in range(len(headers))]

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
