"""Long lists a page at a time: ``?page=N`` (from 1) on any list page, with links to the
pages before and after that keep the rest of the query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from fmq.errors import InvalidArgument

#: Rows of a list page.
PAGE_ROWS = 100


def page_number(request: web.Request) -> int:
    raw = request.query.get("page", "1")
    try:
        number = int(raw)
    except ValueError:
        raise InvalidArgument(f"page must be a whole number, not {raw!r}") from None
    if number < 1:
        raise InvalidArgument(f"page must be 1 or more, not {number}")
    return number


@dataclass(frozen=True)
class Paged:
    """The rows of page ``number`` of a list, and where its neighbours are."""

    rows: Sequence[Any]
    number: int
    total: int
    size: int
    previous: str | None
    next: str | None

    @property
    def first_row(self) -> int:
        return (self.number - 1) * self.size + 1 if self.rows else 0


def link(request: web.Request, **changes: Any) -> str:
    query = {**request.query, **{k: str(v) for k, v in changes.items()}}
    return request.path + "?" + urlencode(query)


def paged(request: web.Request, rows: Sequence[Any], size: int = PAGE_ROWS) -> Paged:
    number = page_number(request)
    start = (number - 1) * size
    return Paged(rows[start:start + size], number, len(rows), size,
                 link(request, page=number - 1) if number > 1 else None,
                 link(request, page=number + 1) if start + size < len(rows) else None)
