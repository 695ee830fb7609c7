"""A node's part in its cluster's routes (docs/cluster.md): its broker group registered in
etcd, the cluster's routes followed into ``DATA_DIR/routes.json``, and, on the group's
primary, each route entry of this group made the group's local topic.

One :class:`RouteMembership` per server process, across its role changes (as the election):
:func:`fmq.server.lifecycle.run_server` builds it, and each serving round attaches its
:class:`~fmq.server.context.ServerContext`. Neither registering nor following stops the
server from starting while etcd does not answer: it serves the routes its copy holds and
catches up when etcd is back.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from fmq.coordination.route_follower import RouteFollower
from fmq.coordination.routes import ClusterRoutes, RouteSnapshot
from fmq.engine.broker import Broker
from fmq.errors import CoordinatorUnavailable, NotEnoughReplicas, TopicExists
from fmq.server.cluster.first_sight import FirstSight
from fmq.server.config import ServerConfig
from fmq.server.context import ServerContext

logger = logging.getLogger("fmq.server")

#: Seconds between two tries to register the group while etcd does not answer.
REGISTER_RETRY_S = 1.0


def make_local_topics(broker: Broker, broker_group: str, snapshot: RouteSnapshot,
                      made: dict[str, int] | None = None) -> list[str]:
    """Make every route entry of ``broker_group`` a local topic with the entry's queue count
    (created, or grown: queues only grow); the topics changed. A TOPIC record carries the
    count to the group's followers, its recovery and both rebuilds, without etcd.
    ``made`` gets each entry's topic and its queues now, once they exist."""
    changed = []
    for topic, route in sorted(snapshot.routes.items()):
        entry = route.entry(broker_group)
        if entry is None:
            continue
        cfg = broker.topics.get(topic)
        if cfg is None:
            try:
                broker.topics.create(topic, entry.queues)
                changed.append(topic)
                if made is not None:
                    made[topic] = entry.queues
                continue
            except TopicExists:  # made by a send meanwhile
                cfg = broker.topics.get(topic)
        if cfg is None:
            continue
        if cfg.queues < entry.queues:
            broker.topics.alter(topic, entry.queues)
            changed.append(topic)
        if made is not None:
            made[topic] = max(cfg.queues, entry.queues)
    return changed


def held_local_topics(broker: Broker, broker_group: str, snapshot: RouteSnapshot
                      ) -> dict[str, int]:
    """The route entries of ``broker_group`` that ``broker`` holds as topics already, with
    the queues each has now (an entry grown since has more: the pass makes them)."""
    held = {}
    for topic, route in snapshot.routes.items():
        cfg = broker.topics.get(topic) if route.entry(broker_group) is not None else None
        if cfg is not None:
            held[topic] = cfg.queues
    return held


class RouteMembership:
    """This node's group in ``config.cluster`` and its copy of the cluster's routes."""

    def __init__(self, config: ServerConfig, data_dir: str) -> None:
        self.broker_group = config.group
        self.cluster = config.cluster
        self.store = ClusterRoutes(config.coordinator, config.cluster)
        self.follower = RouteFollower(self.store, data_dir, self._changed,
                                      resync_s=config.route_resync_ms / 1000)
        self._ctx: ServerContext | None = None
        self._lock = threading.Lock()  # one local-topic pass at a time
        #: On the primary, the queues of each route entry it has made its local topic
        #: (the hosting check refuses the rest as not hosted yet); new each serving round.
        self._made: dict[str, int] = {}
        self._making = False  # a local-topic pass is queued or running
        self.first_sight = FirstSight(self)
        self._stop = threading.Event()
        self._started = False
        self._registrar = threading.Thread(target=self._register, name="fmq-route-register",
                                           daemon=True)

    @property
    def snapshot(self) -> RouteSnapshot:
        return self.follower.snapshot

    def start(self) -> RouteMembership:
        """Register and follow (once; later calls do nothing)."""
        if not self._started:
            self._started = True
            self._registrar.start()
            self.follower.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._started:
            self.follower.stop()
        if self._registrar.is_alive():
            self._registrar.join(timeout=2.0)

    def queue_base(self, topic: str) -> int:
        """The global index of ``topic``'s queue 0 in this group: its route entry's base,
        0 for a topic without a route here (consumer groups assign by it)."""
        route = self.follower.snapshot.routes.get(topic)
        entry = route.entry(self.broker_group) if route is not None else None
        return entry.base if entry is not None else 0

    def made_here(self, ctx: ServerContext) -> dict[str, int] | None:
        """The queues this primary has made of each routed topic; None on a follower
        (which refuses writes as NotPrimary and makes no topic)."""
        role = ctx.replication
        if role is None or role.primary is not None:
            return None
        return self._made

    def poke(self, ctx: ServerContext | None = None) -> None:
        """A client knew a route this copy may not have: re-read etcd now; with ``ctx``
        (a primary that refused a queue it has not made), also make the entries local."""
        self.follower.poke()
        if ctx is not None and not self._making:
            self._make_topics(ctx)

    def _register(self) -> None:
        warned = False
        while not self._stop.is_set():
            try:
                self.store.register_group(self.broker_group)
                logger.info("broker group %s is part of cluster %s", self.broker_group,
                            self.cluster)
                return
            except CoordinatorUnavailable as exc:
                if not warned:
                    logger.warning("%s; registering broker group %s once etcd answers",
                                   exc, self.broker_group)
                    warned = True
            self._stop.wait(REGISTER_RETRY_S)

    # ------------------------------------------------------------------ serving rounds

    def attach(self, ctx: ServerContext) -> None:
        """A serving round starts (on its event loop): a primary makes its route entries
        local topics now, from the copy it has, and tells the cluster it leads."""
        self._ctx = ctx
        # This round's own view (a topic may have been deleted meanwhile), starting from
        # the entries the broker's log already holds as topics: their queues are served
        # at once, not refused as not hosted until the pass below has run.
        self._made = held_local_topics(ctx.broker, self.broker_group, self.snapshot)
        self._making = False
        self._make_topics(ctx)
        if ctx.replication is not None and ctx.replication.primary is None:
            threading.Thread(target=self._announce, name="fmq-route-announce",
                             daemon=True).start()

    def _announce(self) -> None:
        """Make every node re-read the cluster (the new primary's address) now, not at its
        next periodic re-read; tried until etcd answers or the node stops."""
        while not self._stop.is_set():
            try:
                self.store.announce_group(self.broker_group)
                return
            except CoordinatorUnavailable:
                self._stop.wait(REGISTER_RETRY_S)

    def detach(self) -> None:
        self._ctx = None

    def _changed(self, snapshot: RouteSnapshot) -> None:
        """The copy changed (in the follower's thread): hand the topics to the event loop."""
        ctx = self._ctx
        if ctx is None or ctx.loop is None:
            return
        try:
            ctx.loop.call_soon_threadsafe(self._make_topics, ctx)
        except RuntimeError:  # the round's event loop is closed: the next round does it
            pass

    def _make_topics(self, ctx: ServerContext) -> None:
        role = ctx.replication
        if ctx is not self._ctx or ctx.stopping or role is None or role.primary is not None:
            return  # only the primary writes: followers copy its TOPIC records
        made = self._made
        try:
            task = asyncio.ensure_future(ctx.write(self.make_topics_now, ctx.broker, made))
        except RuntimeError:  # the round's workers are shut down: the next round does it
            return
        self._making = True
        task.add_done_callback(self._pass_done)
        task.add_done_callback(lambda _t: self._regroup(ctx))

    def _regroup(self, ctx: ServerContext) -> None:
        """On the event loop, once the route entries are local topics: consumer groups
        whose topics' queue base or count changed get a new assignment (a route that
        appeared for a topic moves its base from 0 to the entry's)."""
        if ctx is self._ctx and not ctx.stopping:
            for name in ctx.groups.refresh():
                logger.info("consumer group %s rebalanced: its topics' routes changed", name)

    def make_topics_now(self, broker: Broker, made: dict[str, int] | None = None
                        ) -> list[str]:
        """Make this group's route entries local topics (blocking: a worker thread; only on
        the primary); the topics changed. ``made`` gets what exists now."""
        with self._lock:  # the newest copy, whichever pass runs last
            return make_local_topics(broker, self.broker_group, self.follower.snapshot, made)

    def _pass_done(self, task: asyncio.Future) -> None:
        self._making = False
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, NotEnoughReplicas):
            # A primary elected a moment ago whose followers have not caught up yet: normal
            # in every fail-over, and the first send or change after they did makes them.
            logger.info("routed topics of group %s not made local yet: %s; a send to one "
                        "or the next route change makes them", self.broker_group, exc)
        elif exc is not None:
            # The next change or round tries again; the hosting check does not depend on it.
            logger.warning("could not make the routed topics of group %s local: %s",
                           self.broker_group, exc)
        elif task.result():
            logger.info("routed topics made local in group %s: %s", self.broker_group,
                        ", ".join(task.result()))
