"""``/``: the node at a glance (``fmq stats``): build, uptime, log, disk, transactions.

The figures are the sampler's last STATS (at most two sample intervals old), not a STATS per
page load: reloading the page as fast as it answers costs the send path nothing more."""

from __future__ import annotations

from aiohttp import web

from fmq.console.rendering import gateway_of, render, sampler_of, session_of
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()


@routes.get("/")
async def overview(request: web.Request) -> web.Response:
    gateway, session = gateway_of(request), session_of(request)
    if not gateway.may(session, Operation.ADMIN, ResourceType.CLUSTER, "cluster"):
        # The node's figures are the administrators' (STATS); the others start here too.
        return render(request, "overview.html", stats=None, server=None, sampled=None)
    sample = await sampler_of(request).recent()
    return render(request, "overview.html", stats=sample.stats, server=sample.stats["server"],
                  sampled=sample.at_ms)
