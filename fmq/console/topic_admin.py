"""Creating, altering and deleting a topic from the console (``fmq topic create``,
``alter``, ``delete``): each a form, then a confirmation, then the server's own request
(TOPIC_CREATE, TOPIC_ALTER, TOPIC_DELETE), which checks the user's right to alter the topic
as it does a client's."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from fmq.console.confirm import ask, confirmed, form_int
from fmq.console.rendering import gateway_of, render, session_of
from fmq.errors import TopicHasLag
from fmq.message import check_topic
from fmq.protocol import Op

routes = web.RouteTableDef()

#: The settings a form may give, with what a person reads for each.
SETTINGS = (("queues", "queues"), ("retention_ms", "retention (ms)"),
            ("retention_bytes", "retention (bytes)"),
            ("max_message_size", "largest message (bytes)"))


def _settings(form, name: str) -> dict:
    """TOPIC_CREATE's and TOPIC_ALTER's settings from the form (-1: not given)."""
    given = {key: form_int(form, key, label) for key, label in SETTINGS}
    return {"name": name, **{k: -1 if v is None else v for k, v in given.items()}}


def _said(settings: dict, blank: str) -> str:
    parts = [f"{label} {settings[key]}" for key, label in SETTINGS if settings[key] >= 0]
    return ", ".join(parts) if parts else blank


def _fields(form) -> dict[str, str]:
    return {key: str(form.get(key, "")).strip() for key, _label in SETTINGS}


def _page(name: str) -> str:
    return "/topics/" + quote(name, safe="")


@routes.get("/new-topic")
async def new_topic_form(request: web.Request) -> web.Response:
    return render(request, "topic_new.html")


@routes.post("/new-topic")
async def create_topic(request: web.Request) -> web.Response:
    form = await request.post()
    name = check_topic(str(form.get("name", "")).strip())
    settings = _settings(form, name)
    if not confirmed(form):
        return ask(request, f"Create topic {name}",
                   f"Create topic {name} with {_said(settings, 'the broker’s settings')} "
                   f"(settings not given are the broker's).", "/new-topic",
                   "Create it", {"name": name, **_fields(form)}, "/topics")
    await gateway_of(request).call_json(session_of(request), Op.TOPIC_CREATE,
                                        {"settings": settings})
    raise web.HTTPSeeOther(_page(name))


@routes.post("/topics/{name}/alter")
async def alter_topic(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    form = await request.post()
    settings = _settings(form, name)
    if not confirmed(form):
        return ask(request, f"Change topic {name}",
                   f"Change topic {name}: {_said(settings, 'nothing')} (0 for a retention "
                   f"or the largest message: back to the broker's; queues only grow).",
                   _page(name) + "/alter", "Change it", _fields(form), _page(name))
    await gateway_of(request).call_json(session_of(request), Op.TOPIC_ALTER,
                                        {"settings": settings})
    raise web.HTTPSeeOther(_page(name))


@routes.post("/topics/{name}/delete")
async def delete_topic(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    form = await request.post()
    if not confirmed(form):
        return ask(request, f"Delete topic {name}",
                   f"Delete topic {name}: its messages become unreadable and its space is "
                   f"freed by retention. Refused while consumer groups have not read all of "
                   f"it, unless you tick the box.", _page(name) + "/delete", "Delete it",
                   {}, _page(name),
                   choices=[("force", "delete it even if consumer groups have not read "
                                      "all of it")])
    try:
        await gateway_of(request).call_json(
            session_of(request), Op.TOPIC_DELETE,
            {"topic": name, "force": form.get("force") == "yes"})
    except TopicHasLag as exc:
        return render(request, "error.html", status=409, kind="Not deleted",
                      error=f"topic {name} still has messages consumer groups have not "
                            f"read ({exc.lag}): let them catch up, or delete it again and "
                            f"tick the box to delete it anyway")
    return render(request, "done.html", title=f"Topic {name} deleted",
                  said=f"Topic {name} is deleted.", changes=None, back="/topics",
                  back_label="Topics")
