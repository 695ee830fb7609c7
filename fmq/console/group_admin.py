"""Moving a consumer group's offsets and redriving its dead letters from the console
(``fmq groups reset-offsets``, ``fmq dlq redrive``).

A reset is planned first (RESET_OFFSETS without executing: each queue's committed offset now
and after), shown, and executed only once confirmed; while the group has live members it is
refused, as Kafka refuses it: they keep their own positions and would overwrite it (the
console offers no ``--force``). Both are the administrators' (ADMIN on the cluster, checked
by the server as for a client)."""

from __future__ import annotations

import datetime
from urllib.parse import quote

from aiohttp import web

from fmq.console.confirm import ask, confirmed, form_int
from fmq.console.rendering import gateway_of, render, session_of
from fmq.engine.inventory import RESET_TARGETS
from fmq.errors import GroupHasMembers, InvalidArgument
from fmq.protocol import Op

routes = web.RouteTableDef()

#: Dead letters one redrive moves at most unless the form says fewer (``fmq dlq redrive``).
REDRIVE_MAX = 10_000


def _page(group: str) -> str:
    return "/groups/" + quote(group, safe="")


def _time_ms(value: str) -> int:
    """A reset time: ms since the epoch, or an ISO 8601 date (UTC unless it says)."""
    if value.isdigit():
        return int(value)
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgument(f"a reset time is ms since the epoch or a date such as "
                              f"2026-01-31T08:00:00, not {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _reset_request(group: str, form) -> dict:
    to = str(form.get("to", ""))
    if to not in RESET_TARGETS:
        raise InvalidArgument(f"reset to one of {', '.join(RESET_TARGETS)}, not {to!r}")
    raw = str(form.get("value", "")).strip()
    value = -1
    if to == "time":
        if not raw:
            raise InvalidArgument("a reset to a time needs the time")
        value = _time_ms(raw)
    elif to == "offset":
        offset = form_int(form, "value", "the offset")
        if offset is None:
            raise InvalidArgument("a reset to an offset needs the offset")
        value = offset
    topic = str(form.get("topic", "")).strip() or None
    queue = form_int(form, "queue", "the queue")
    if queue is not None and topic is None:
        raise InvalidArgument("a reset of one queue needs its topic")
    return {"group": group, "topic": topic, "queue_id": -1 if queue is None else queue,
            "to": to, "value": value, "force": False}


def _refused(request: web.Request, exc: GroupHasMembers) -> web.Response:
    return render(request, "error.html", status=409, kind="Not reset",
                  error=f"consumer group {exc.group} has live members ({exc.members}): "
                        f"they keep their own positions and would overwrite the reset. "
                        f"Stop them, and plan the reset again once the group has none")


@routes.post("/groups/{name}/reset")
async def reset_offsets(request: web.Request) -> web.Response:
    group = request.match_info["name"]
    form = await request.post()
    req = _reset_request(group, form)
    gateway, session = gateway_of(request), session_of(request)
    execute = confirmed(form)
    try:
        answer = await gateway.call_json(session, Op.RESET_OFFSETS,
                                         {**req, "mode": {"execute": execute}})
    except GroupHasMembers as exc:
        return _refused(request, exc)
    where = req["topic"] or "every topic it committed in"
    if not execute:
        fields = {k: str(form.get(k, "")).strip() for k in ("topic", "queue", "to", "value")}
        return ask(request, f"Reset the offsets of group {group}",
                   f"The plan for group {group} in {where}, to {req['to']}: the committed "
                   f"offsets below move to the new ones; its consumers then read from "
                   f"there (messages before are skipped, after are read again).",
                   _page(group) + "/reset", "Reset these offsets", fields, _page(group),
                   plan=answer["changes"])
    return render(request, "done.html", title=f"Offsets of group {group} reset",
                  said=f"Group {group}: {len(answer['changes'])} committed offsets moved "
                       f"to {req['to']}.", changes=answer["changes"], back=_page(group),
                  back_label=f"Group {group}")


@routes.post("/groups/{name}/redrive")
async def redrive(request: web.Request) -> web.Response:
    group = request.match_info["name"]
    form = await request.post()
    most = form_int(form, "max", "the most to redrive") or REDRIVE_MAX
    if not confirmed(form):
        return ask(request, f"Redrive the dead letters of group {group}",
                   f"Send up to {most} of group {group}'s dead letters back to it through "
                   f"its retry topic: consumable again at once, their redelivery count "
                   f"starting over.", _page(group) + "/redrive", "Redrive them",
                   {"max": str(most)}, _page(group))
    moved = (await gateway_of(request).call(session_of(request), Op.DLQ_REDRIVE,
                                            {"group": group, "max_messages": most}))["redriven"]
    return render(request, "done.html", title=f"Dead letters of group {group} redriven",
                  said=f"Redrove {moved} dead letter{'' if moved == 1 else 's'} of group "
                       f"{group}.", changes=None, back=_page(group),
                  back_label=f"Group {group}")
