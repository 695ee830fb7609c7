"""``/topics`` and ``/topics/<name>``: what ``fmq topics`` and ``fmq topic describe`` say.

The list holds only the topics the user may describe (TOPIC_LIST filters by the rules), with
each one's figures kept by :mod:`.topic_sizes` (refreshed at most once per sample interval)
and its send rate from :mod:`.sampler`, so a topic she may not see appears nowhere."""

from __future__ import annotations

from aiohttp import web

from fmq.console.cluster import traffic_charts
from fmq.console.groups import all_groups
from fmq.console.paging import paged
from fmq.console.rendering import (
    gateway_of,
    render,
    sampler_of,
    session_of,
    topic_sizes_of,
)
from fmq.protocol import Op
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()

NO_FIGURES = {"messages": 0, "bytes": 0, "exact": True, "first_store_time": None,
              "last_store_time": None}


@routes.get("/topics")
async def topic_list(request: web.Request) -> web.Response:
    gateway, session, sampler = gateway_of(request), session_of(request), sampler_of(request)
    visible = (await gateway.call_json(session, Op.TOPIC_LIST, {}))["topics"]
    figures = await topic_sizes_of(request).current()
    page = paged(request, sorted(visible, key=lambda t: t["name"]))
    rows = []
    for t in page.rows:
        rates = sampler.topic_rates([t["name"]], "messages_in")
        rows.append({**t, **figures.topics.get(t["name"], NO_FIGURES),
                     "rate": rates[-1].value if rates else None})
    return render(request, "topics.html", topics=rows, counted_at=figures.at, page=page)


@routes.get("/topics/{name}")
async def topic_page(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    name = request.match_info["name"]
    topic = (await gateway.call_json(session, Op.TOPIC_DESCRIBE, {"topic": name}))["topic"]
    groups = []
    for g in await all_groups(gateway, session):
        rows = [r for r in g["offsets"] if r["topic"] == name]
        if rows:
            groups.append({"group": g["group"], "lag": sum(r["lag"] for r in rows),
                           "queues": len(rows)})
    rates = sampler_of(request).topic_rates([name], "messages_in")
    consumed = sampler_of(request).topic_rates([name], "messages_out")
    return render(request, "topic.html", topic=topic, groups=groups,
                  may_alter=gateway.may(session, Operation.ALTER, ResourceType.TOPIC, name),
                  rates=rates, consumed=consumed,
                  charts=traffic_charts(sampler_of(request), [name]))
