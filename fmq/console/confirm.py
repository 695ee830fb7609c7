"""Changing actions ask first: a form's POST without ``confirmed`` shows what will happen
(and, for an offset reset, the plan) with a button that posts the same fields again,
confirmed, with the session's CSRF token; only that second POST changes anything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from fmq.console.rendering import render
from fmq.errors import InvalidArgument

#: The form field a confirmation's button adds.
CONFIRMED = "confirmed"


def confirmed(form: Mapping[str, Any]) -> bool:
    return form.get(CONFIRMED) == "yes"


def ask(request: web.Request, title: str, explain: str, action: str, button: str,
        fields: Mapping[str, str], cancel: str, plan: list[dict] | None = None,
        choices: list[tuple[str, str]] | None = None) -> web.Response:
    """The confirmation page: ``explain`` what the action does, the ``plan`` rows if any,
    and ``button`` posting ``fields`` (plus the ticked ``choices``: (name, label)) to
    ``action`` again, confirmed; *Cancel* goes back to ``cancel``."""
    return render(request, "confirm.html", title=title, explain=explain, action=action,
                  button=button, fields=fields, cancel=cancel, plan=plan,
                  choices=choices or [])


def form_int(form: Mapping[str, Any], name: str, what: str) -> int | None:
    """A whole number >= 0 from the form; None when left blank."""
    value = str(form.get(name, "")).strip()
    if value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise InvalidArgument(f"{what} must be a whole number, not {value!r}") from None
    if n < 0:
        raise InvalidArgument(f"{what} must be >= 0, not {n}")
    return n
