"""``/``: the node at a glance (``fmq stats``): build, uptime, log, disk, transactions."""

from __future__ import annotations

from aiohttp import web

from fmq.console.rendering import gateway_of, render, session_of
from fmq.protocol import Op
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()


@routes.get("/")
async def overview(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    if not gateway.may(session, Operation.ADMIN, ResourceType.CLUSTER, "cluster"):
        # The node's figures are the administrators' (STATS); the others start here too.
        return render(request, "overview.html", stats=None, server=None)
    stats = await gateway.call_json(session, Op.STATS, {})
    return render(request, "overview.html", stats=stats, server=stats["server"])
