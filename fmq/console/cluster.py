"""``/cluster``: this node and the ones it knows (its replicated group's primary and
followers with their lag and epoch, the cluster's broker groups and their primaries), disk
used and free, the build path, and send and consume rates over the last minutes as charts.
Everything comes from the sampler's last STATS (and the cluster's routes as this node
follows them), so it is for those who may describe the cluster."""

from __future__ import annotations

from aiohttp import web

from fmq.console.charts import Series, line_chart
from fmq.console.rendering import gateway_of, render, sampler_of, session_of
from fmq.console.sampler import KEEP_SECONDS, Sampler
from fmq.security import Operation, ResourceType

routes = web.RouteTableDef()


def traffic_charts(sampler: Sampler, topics: list[str] | None = None) -> list:
    """Messages and bytes, in and out, of ``topics`` (None: every topic), a second."""
    def summed(counter: str):
        if topics is not None:
            return sampler.topic_rates(topics, counter)
        return sampler.rates(lambda s: sum(t.get(counter, 0) for t in s.traffic.values()))
    span = KEEP_SECONDS * 1000
    return [line_chart("messages-chart", "Messages a second",
                       [Series("sent", summed("messages_in")),
                        Series("consumed", summed("messages_out"))], span),
            line_chart("bytes-chart", "Body bytes a second",
                       [Series("sent", summed("bytes_in")),
                        Series("consumed", summed("bytes_out"))], span)]


def _broker_groups(gateway) -> tuple[str | None, list]:
    """This node's broker group and every group of its cluster (none outside one)."""
    membership = gateway.ctx.routes
    if membership is None:
        return None, []
    snapshot = membership.snapshot
    topics = {name: sorted(e.group for e in route.entries)
              for name, route in snapshot.routes.items()} if snapshot else {}
    groups = [{"name": g.name, "primary": g.primary, "epoch": g.epoch,
               "open_for_writes": g.open_for_writes,
               "topics": sorted(t for t, names in topics.items() if g.name in names)}
              for g in (snapshot.groups.values() if snapshot else ())]
    return membership.broker_group, groups


@routes.get("/cluster")
async def cluster(request: web.Request) -> web.Response:
    gateway, session, sampler = gateway_of(request), session_of(request), sampler_of(request)
    if not gateway.may(session, Operation.DESCRIBE, ResourceType.CLUSTER, "cluster"):
        return render(request, "cluster.html", sample=None, node=None, replication=None,
                      group=None, groups=[], charts=[])
    sample = await sampler.recent()
    group, groups = _broker_groups(gateway)
    return render(request, "cluster.html", sample=sample, node=sample.stats["server"],
                  replication=sample.stats["server"]["replication"], group=group,
                  groups=groups, charts=traffic_charts(sampler))
