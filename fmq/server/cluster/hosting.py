"""Which requests a node of a cluster refuses because its broker group does not host the
queue they name in the topic's route (docs/cluster.md, *NotHosted*).

One check, made for every request after it is decoded and before its handler runs, so
nothing is stored or read for a refused one, on the queues its operation declares
(``hosted=``, :mod:`fmq.server.ops.operation`): a write (SEND, SEND_BATCH, SEND_AT,
PREPARE, idempotent sends alike) to a topic whose route has no entry for this group, whose
entry here is read-only (drained), or with an explicit queue id past the entry's queues; a
read of a queue (PULL, PULL_TAGGED, QUEUE_RANGE, OFFSET_FOR_TIME, FETCH_OFFSET,
COMMIT_OFFSET, NACK) this group does not host in the route. A topic without a route (one
made before the cluster, FMQ's own ``%`` topics) keeps a single broker's rules. A node
outside a cluster never gets here (the caller tests one attribute).

On a primary, a queue is hosted only once the broker has made it (``made``: the queues of
each route entry made this group's local topic, starting each serving round from the
topics its log already holds): between a route change reaching the
node's copy (an expand, a new route) and the primary making the entry its local topic, a
request for the entry's queues is refused with NotHosted, which a client retries, where
the broker would answer UnknownQueue (final) or make the topic with ``queues_per_topic``
queues rather than the entry's.
"""

from __future__ import annotations

from collections.abc import Mapping

from fmq.coordination.routes import RouteSnapshot
from fmq.errors import NotHosted
from fmq.protocol.values import BROKER_PICKS_QUEUE
from fmq.server.ops.operation import Hosted


def not_hosted(snapshot: RouteSnapshot, broker_group: str, hosted: Hosted | None,
               req: dict, made: Mapping[str, int] | None = None) -> NotHosted | None:
    """NotHosted for the first queue ``req`` names (as its operation declares: ``hosted``)
    that ``broker_group`` does not host in ``snapshot``'s routes, or None when the request
    may run here. ``made``: on a primary, how many queues of each routed topic it has made
    (a topic absent: none yet)."""
    if hosted is None:
        return None
    write = hosted.write
    routes = snapshot.routes
    for topic, queue_id in hosted.named(req):
        route = routes.get(topic)
        if route is None:
            continue
        entry = route.entry(broker_group)
        if (entry is None or (write and not entry.writable)
                or not (queue_id == BROKER_PICKS_QUEUE and write
                        or 0 <= queue_id < entry.queues)
                or (made is not None and not _made(made, topic, queue_id))):
            return NotHosted(topic, broker_group, queue_id, route.version)
    return None


def _made(made: Mapping[str, int], topic: str, queue_id: int) -> bool:
    if queue_id == BROKER_PICKS_QUEUE:
        return topic in made
    return queue_id < made.get(topic, 0)
