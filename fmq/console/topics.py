"""``/topics`` and ``/topics/<name>``: what ``fmq topics`` and ``fmq topic describe`` say.

The list holds only the topics the user may describe (TOPIC_LIST filters by the rules), with
each one's figures from the inventory, so a topic she may not see appears nowhere."""

from __future__ import annotations

from aiohttp import web

from fmq.console.groups import all_groups
from fmq.console.rendering import gateway_of, render, session_of
from fmq.protocol import Op

routes = web.RouteTableDef()


@routes.get("/topics")
async def topic_list(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    visible = (await gateway.call_json(session, Op.TOPIC_LIST, {}))["topics"]
    inventory = await gateway.read(session, None, "console topics",
                                   gateway.ctx.broker.inventory.topics)
    figures = {t["topic"]: t for t in inventory}
    rows = [{**t, **figures.get(t["name"], {"messages": 0, "bytes": 0,
                                            "first_store_time": None,
                                            "last_store_time": None})}
            for t in sorted(visible, key=lambda t: t["name"])]
    return render(request, "topics.html", topics=rows)


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
    return render(request, "topic.html", topic=topic, groups=groups)

