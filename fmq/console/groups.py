"""``/groups`` and ``/groups/<name>``: what ``fmq groups`` says (members, queue owners,
committed offsets, lag and the age of the oldest unread message)."""

from __future__ import annotations

from aiohttp import web

from fmq.console.gateway import ConsoleSession, ServerGateway
from fmq.console.paging import paged
from fmq.console.rendering import gateway_of, render, sampler_of, session_of
from fmq.protocol import Op
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()


def _summary(group: dict) -> dict:
    rows = group["offsets"]
    return {**group, "lag": sum(r["lag"] for r in rows),
            "oldest_unread_ms": max((r["lag_ms"] for r in rows), default=0),
            "topics": sorted({r["topic"] for r in rows})}


def visible_part(gateway: ServerGateway, session: ConsoleSession, group: dict) -> dict:
    """``group`` as the user may see it: only the offsets and owned queues of topics she
    may describe (a hidden topic appears nowhere, in names, counts or lag)."""
    def shown(topic: str) -> bool:
        return gateway.may(session, Operation.DESCRIBE, ResourceType.TOPIC, topic)
    return {**group, "offsets": [r for r in group["offsets"] if shown(r["topic"])],
            "members": {member: [q for q in queues if shown(q.rsplit("/", 1)[0])]
                        for member, queues in group["members"].items()}}


async def all_groups(gateway: ServerGateway, session: ConsoleSession) -> list[dict]:
    """Every group the user may describe. GROUPS for the whole cluster is for those who may
    describe the cluster; the others see the committed offsets of their groups (live
    members are known only to the server's loop, which GROUPS reads)."""
    if gateway.may(session, Operation.DESCRIBE, ResourceType.CLUSTER, "cluster"):
        groups = (await gateway.call_json(session, Op.GROUPS, {"group": None}))["groups"]
        return [visible_part(gateway, session, g) for g in groups]
    rows = await gateway.read(session, None, "console GROUPS",
                              gateway.ctx.broker.inventory.groups)
    names = sorted({r["group"] for r in rows
                    if gateway.may(session, Operation.DESCRIBE, ResourceType.GROUP,
                                   r["group"])})
    return [visible_part(gateway, session, {
        "group": name, "generation": 0, "members": {},
        "offsets": [{**r, "owner": None} for r in rows if r["group"] == name]})
        for name in names]


@routes.get("/groups")
async def group_list(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    groups = [g for g in await all_groups(gateway, session)
              if gateway.may(session, Operation.DESCRIBE, ResourceType.GROUP, g["group"])]
    page = paged(request, groups)
    return render(request, "groups.html", groups=[_summary(g) for g in page.rows], page=page)


@routes.get("/groups/{name}")
async def group_page(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    name = request.match_info["name"]
    answer = await gateway.call_json(session, Op.GROUPS, {"group": name})
    found = [_summary(visible_part(gateway, session, g)) for g in answer["groups"]]
    group = found[0] if found else {"group": name, "generation": 0, "members": {},
                                    "offsets": [], "lag": 0, "oldest_unread_ms": 0,
                                    "topics": []}
    offsets = paged(request, group["offsets"])
    dead = await gateway.read(session, None, "console dead letters", _dead_letters,
                              gateway.ctx.broker, name)
    sample = sampler_of(request).latest
    retries = (sample.stats.get("delivery", {}).get("groups", {}).get(name, {})
               .get("retries_pending", 0) if sample is not None else None)
    return render(request, "group.html", group=group, offsets=offsets.rows, page=offsets,
                  known=bool(found), dead_letters=dead, retries=retries,
                  topics=sorted({r["topic"] for r in group["offsets"]}),
                  may_admin=gateway.may(session, Operation.ADMIN, ResourceType.CLUSTER,
                                        "cluster"))


def _dead_letters(broker, group: str) -> int:
    """The group's dead letters not redriven yet (a reader thread)."""
    return sum(end - start for _q, start, end in broker.deliveries.dead_letter_ranges(group))
