"""A cluster primary's first write to a topic it has never seen: read etcd before the broker
makes the topic (docs/cluster.md, *Hosted once made*).

A client reads a topic's route (ROUTE, which may create it in etcd on another node) and
sends at once to each group's primary; a primary whose copy of the routes has not caught
up yet would take the topic for one without a route and make it with ``queues_per_topic``
queues instead of its route entry's. So the first write naming a topic that no route in
the copy names and the broker does not have waits for one read of the cluster's routes
(in a worker thread), and, when a route appeared, for the entry made a local topic; then
it runs, and so does every request for that topic that came meanwhile, in the order they
came. A topic still without a route after the read (one made before the cluster, or while
etcd does not answer) keeps a single broker's rules and is not read for again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fmq.errors import CoordinatorUnavailable, ServerBusy
from fmq.message import is_internal_topic
from fmq.server.cluster.hosting import not_hosted
from fmq.server.context import ServerContext
from fmq.server.ops.batcher import copy_outcome
from fmq.server.ops.operation import Hosted

logger = logging.getLogger("fmq.server")

#: Reads of the routes tried: a second one opens a new connection when the first waited
#: on a pooled one that hangs (as a watch stream can).
READS = 2
#: Starts a request's handler; returns what the request's task awaits.
Run = Callable[[], Awaitable[Any]]


class FirstSight:
    """Holds back the first writes of topics this primary has not seen until the cluster's
    routes were read once; ``membership``: the node's
    :class:`~fmq.server.cluster.route_membership.RouteMembership`."""

    def __init__(self, membership: Any) -> None:
        self.membership = membership
        #: Topics looked up already (with a route, made; or without one, a broker's own).
        self._seen: set[str] = set()
        #: Topic being looked up -> the requests waiting for it, in arrival order.
        self._waiting: dict[str, list[tuple[Run, asyncio.Future]]] = {}

    def unseen(self, ctx: ServerContext, hosted: Hosted | None, req: dict,
               made: dict[str, int]) -> str | None:
        """The first topic a write names (``hosted``: its operation's declaration) that
        needs a look first, or None."""
        if hosted is None or not hosted.write:
            return None
        routes = self.membership.snapshot.routes
        for topic, _queue in hosted.named(req):
            if topic in self._waiting:
                return topic
            if topic in made or topic in routes or topic in self._seen \
                    or is_internal_topic(topic):
                continue
            if ctx.broker.topics.get(topic) is not None:  # the broker's own, made before
                self._seen.add(topic)
                continue
            return topic
        return None

    def hold(self, ctx: ServerContext, topic: str, run: Run) -> asyncio.Future:
        """The future of a request that waits for ``topic``'s look (started if none is)."""
        fut = asyncio.get_running_loop().create_future()
        queue = self._waiting.get(topic)
        if queue is None:
            queue = self._waiting[topic] = []
            task = asyncio.ensure_future(self._look(ctx, topic))
            ctx.all_tasks.add(task)
        queue.append((run, fut))
        return fut

    async def _look(self, ctx: ServerContext, topic: str) -> None:
        membership = self.membership
        try:
            for attempt in range(READS):
                try:
                    await ctx.read(membership.follower.sync_once)
                    break
                except CoordinatorUnavailable as exc:
                    if attempt == READS - 1:
                        logger.warning("could not read the routes before the first write "
                                       "to %s (%s): it keeps a single broker's rules",
                                       topic, exc)
            if topic in membership.snapshot.routes:
                await ctx.write(membership.make_topics_now, ctx.broker,
                                membership.made_here(ctx))
        except asyncio.CancelledError:  # a shutdown: the waiting requests end with it
            self._release(topic, ServerBusy("the server is shutting down; retry against "
                                            "the restarted server"))
            raise
        except Exception as exc:  # noqa: BLE001 - each waiting request answers it
            self._release(topic, exc)
            return
        self._seen.add(topic)
        self._release(topic, None)

    def _release(self, topic: str, failed: BaseException | None) -> None:
        """Run the waiting requests in arrival order (or fail them all with ``failed``);
        the snapshot may now give the topic a route: each is checked again."""
        for run, fut in self._waiting.pop(topic, []):
            if fut.done():
                continue
            if failed is not None:
                fut.set_exception(failed)
                continue
            try:
                started = asyncio.ensure_future(run())
            except Exception as exc:  # noqa: BLE001 - refused before it started
                fut.set_exception(exc)
                continue
            started.add_done_callback(functools.partial(copy_outcome, fut))


def check_again(membership: Any, ctx: ServerContext, hosted: Hosted | None, req: dict) -> None:
    """Raise NotHosted when, with the routes just read, this group does not host what the
    request names (a route created elsewhere that gives the topic to other groups)."""
    refused = not_hosted(membership.snapshot, membership.broker_group, hosted, req,
                         membership.made_here(ctx))
    if refused is not None:
        raise refused
