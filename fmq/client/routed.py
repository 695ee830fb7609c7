"""A threaded producer's sends over its topics' routes (docs/client.md, "Routing"): read
each topic's route with ROUTE, pick the broker group and queue of every request
(:mod:`fmq.client.routing`), send it on that group's link, and carry on through NotHosted
(read the route again at once, place the messages again) and a group's lost primary (the
group is left out of unkeyed sends for a back-off).

Outside a cluster nothing changes: one ROUTE per topic per ``route_refresh_s``, then every
request goes to the client's one group as before, the server picking the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from fmq.errors import (
    AccessDenied,
    ConnectionLost,
    FMQError,
    NotHosted,
    PrimaryNotFound,
)
from fmq.message import Message, SendResult, check_topic
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire

from .acquire import DEFAULT_GROUP, LinkPool
from .deadline import may_be_stored
from .discovery import address_of
from .idempotence import Sequencer
from .routing import (
    DEFAULT_ROUTE_REFRESH_S,
    Route,
    RouteTable,
    choose_queue,
    knows_no_route,
    old_server_route,
    parse_route,
    place_batch,
    place_in_group,
)

logger = logging.getLogger("fmq.client")

#: What a request is built from once its messages are placed: their wire form.
Build = Callable[[list[dict[str, Any]]], dict[str, Any]]


def group_link(group: str) -> str:
    """The link of a routed broker group (apart from the client's own, whatever the
    group's name: "/" is in no group name)."""
    return f"group/{group}"


def link_group(link: str) -> str:
    """The broker group of a link :func:`group_link` named ("" for the client's own)."""
    return link.partition("/")[2] if link != DEFAULT_GROUP else ""


class Placed:
    """One request ready to go: the link to send it on, its fields, and the group named in
    its results ("" when the server did not say)."""

    __slots__ = ("fields", "group", "link", "topics")

    def __init__(self, link: str, fields: dict[str, Any], group: str,
                 topics: list[str]) -> None:
        self.link = link
        self.fields = fields
        self.group = group
        self.topics = topics

    @property
    def single(self) -> bool:
        """Sent to the client's one group (a topic outside a cluster)."""
        return self.link == DEFAULT_GROUP


class Router:
    """What both producers (threaded and asyncio) keep for routing: the route table, the
    sequence numbers per broker group, and the choice of each request's group and queues.
    The producer reads routes itself (:meth:`take` gets ROUTE's answer or failure)."""

    def __init__(self, links: LinkPool, idempotent: bool, producer_id: str | None,
                 route_refresh_s: float = DEFAULT_ROUTE_REFRESH_S) -> None:
        self.links = links
        self.table = RouteTable(route_refresh_s)
        #: Numbers the messages of a single-group route, as before routing existed.
        self.sequencer_single = Sequencer(idempotent, producer_id)
        #: In a cluster, each group numbers its own messages (one dense sequence per group
        #: for its dedup window) under the one producer id.
        self._group_sequencers: dict[str, Sequencer] = {}
        self._lock = threading.Lock()
        self._access_unrouted = False  # a ROUTE was refused: sends go unrouted
        self._access_warned = False

    def sequencer(self, group: str | None) -> Sequencer:
        """The numbering of ``group``'s messages (None: a single-group route's)."""
        if group is None:
            return self.sequencer_single
        with self._lock:
            seq = self._group_sequencers.get(group)
            if seq is None:
                seq = self._group_sequencers[group] = Sequencer(
                    self.sequencer_single.enabled, self.sequencer_single.producer_id)
            return seq

    def take(self, topic: str, answer: dict[str, Any] | FMQError) -> Route:
        """ROUTE's ``answer`` for ``topic`` (or the error it failed with) into the table;
        the groups it names get their links."""
        if isinstance(answer, AccessDenied):
            # ROUTE needs describe on the topic; a user allowed only to write keeps
            # today's path (the server it reaches picks the queue).
            # Said once a send went that way (results): a user who may not produce
            # either is refused the send, and a warning about routing would mislead.
            self._access_unrouted = True
            route = old_server_route(topic)
        elif isinstance(answer, FMQError):
            old = self.table.held(topic)
            if knows_no_route(answer):
                route = old_server_route(topic)
            elif old is not None and answer.retriable:  # UnknownTopic & co. are final
                logger.warning("could not read the route of %s (%s); keeping version %d",
                               topic, answer, old.version)
                route = old
            else:
                raise answer
        else:
            route = parse_route(answer["json"])
        route = self.table.store(topic, route)
        if not route.single:
            for name, group in route.groups.items():
                address = address_of(group.primary)
                if address is not None:
                    self.links.seed(group_link(name), address)
        return route

    def place(self, routes: list[Route], messages: Sequence[Message], build: Build,
              stamp: bool, group: str | None = None, confined: bool = False) -> Placed:
        """Choose the group and queues of one request's ``messages`` (``routes``: each
        one's topic's; ``group``: the group they must go to; ``confined``: a transaction's,
        whose keys hash over that group's own queues, in the first message's group unless
        ``group`` is given) and build it, numbered when ``stamp``."""
        topics = [m.topic for m in messages]
        if all(r.single for r in routes):
            seq = self.sequencer(None)
            wire = [message_to_wire(seq.stamp(m) if stamp else m) for m in messages]
            return Placed(DEFAULT_GROUP, build(wire), routes[0].group_name(), topics)
        turn = self.table.turn(topics[0])
        keys = [m.key for m in messages]
        queue_ids = [m.queue_id for m in messages]
        skipped = self.table.skipped()
        if confined:
            if group is None:
                group = choose_queue(routes[0], keys[0], queue_ids[0], None, turn,
                                     skipped).group
            refs = place_in_group(routes, group, keys, queue_ids, turn)
        else:
            refs = place_batch(routes, keys, queue_ids, group, turn, skipped)
        chosen = refs[0].group
        seq = self.sequencer(chosen)
        placed = [replace(m, queue_id=r.queue_id) for m, r in zip(messages, refs, strict=True)]
        wire = [message_to_wire(seq.stamp(m) if stamp else m) for m in placed]
        return Placed(group_link(chosen), build(wire), chosen, topics)

    def learn(self, exc: FMQError, placed: Placed) -> None:
        """What a failure says about the routes: NotHosted, read them again; a group whose
        primary could not be reached, leave it out of unkeyed sends for a while."""
        if isinstance(exc, NotHosted):
            for topic in placed.topics:
                self.table.not_hosted(topic)
        elif not placed.single and isinstance(exc, (ConnectionLost, PrimaryNotFound)):
            self.table.unreachable(placed.group)

    @staticmethod
    def pin(exc: FMQError, placed: Placed, pinned: Placed | None) -> Placed | None:
        """Where the next try of a request that failed with ``exc`` after it was written
        must go (None: anywhere its route says): a refusal by NotHosted stored nothing, so
        a request no earlier try may have stored is placed anew; a failure that may have
        stored it keeps it where it went, with the same numbers, for every later try (a
        NotHosted answered to its resend says nothing of the earlier try's copy)."""
        if isinstance(exc, NotHosted) and not placed.single and pinned is None:
            return None
        if may_be_stored(exc):  # its resend goes there with the same numbers, never elsewhere
            return placed
        return pinned

    def results(self, answers: list[dict[str, Any]], placed: Placed) -> list[SendResult]:
        """The SendResults of a send's answer, naming the group that stored them."""
        if placed.single and self._access_unrouted and not self._access_warned:
            self._access_warned = True
            logger.warning("no access to topic routes (describe): sent to the servers "
                           "given, without routing")
        return [SendResult(r["offset"], r["queue_id"], r["queue_offset"], placed.group)
                for r in answers]


class RoutedSends:
    """The threaded producer's side of routing: reading routes and the send loop. Mixed
    into :class:`~fmq.client.Producer` (it uses the client's ``call``, ``_connection``,
    ``attempts`` and ``links``)."""

    router: Router

    @property
    def routes(self) -> RouteTable:
        return self.router.table

    def sequencer(self, group: str | None) -> Sequencer:
        return self.router.sequencer(group)

    def route(self, topic: str, retries: int | None = None) -> Route:
        """``topic``'s route, read with ROUTE when the table holds none fresh enough
        (``retries``: of that read, the client's by default)."""
        held = self.routes.current(topic)
        if held is not None:
            return held
        check_topic(topic)  # before asking: "" would ask for every route
        try:
            answer: dict[str, Any] | FMQError = self.call(  # type: ignore[attr-defined]
                Op.ROUTE, {"topic": topic}, retries=retries)
        except FMQError as exc:
            answer = exc
        return self.router.take(topic, answer)

    def _place(self, messages: Sequence[Message], build: Build, stamp: bool,
               group: str | None = None, confined: bool = False) -> Placed:
        routes = [self.route(m.topic) for m in messages]
        return self.router.place(routes, messages, build, stamp, group, confined)

    # ------------------------------------------------------------------ the send loop

    def deliver(self, op: Op, messages: Sequence[Message], build: Build, *, stamp: bool = True,
                group: str | None = None, confined: bool = False,
                timeout: float | None = None, attempts: Any = None,
                on_error: Callable[[FMQError, Placed], None] | None = None
                ) -> tuple[dict[str, Any], Placed]:
        """Send ``messages`` in one request (built by ``build`` from their wire form) to
        the group their route gives, retrying retriable errors within the delivery
        deadline; returns (the answer, where it went). NotHosted reads the route again and
        places them anew; a failure after which they may be stored keeps them where they
        went (same group, queue and numbers). ``on_error`` sees each failure first (it may
        raise to end the loop)."""
        timeout = self.request_timeout if timeout is None else timeout  # type: ignore[attr-defined]
        attempts = attempts or self.attempts()  # type: ignore[attr-defined]
        pinned: Placed | None = None
        while True:
            placed = pinned
            try:
                if placed is None:
                    placed = self._place(messages, build, stamp, group, confined)
                    if placed.single:
                        pinned = placed  # one group: numbered once, as before routing
                elif not placed.single:
                    # Kept in its group after a failure that may have stored it: that
                    # group may have a new primary now, which only its route names.
                    for topic in dict.fromkeys(placed.topics):
                        self.route(topic, retries=0)
                conn = self._connection(placed.link)  # type: ignore[attr-defined]
            except FMQError as exc:  # nothing was sent: the next try may go elsewhere
                if placed is not None:
                    self.router.learn(exc, placed)
                self._pause(op, exc, attempts)
                continue
            try:
                return conn.request(op, placed.fields, attempts.cap(timeout)), placed
            except FMQError as exc:
                self.router.learn(exc, placed)
                pinned = self.router.pin(exc, placed, pinned)
                if on_error is not None:
                    on_error(exc, placed)
                self._pause(op, exc, attempts)

    def _pause(self, op: Op, exc: FMQError, attempts: Any) -> None:
        delay = attempts.pause(exc, self._closed)  # type: ignore[attr-defined]
        logger.debug("%s failed (%s); retry %d in %.2fs", op.name, exc, attempts.attempt,
                     delay)
        time.sleep(delay)
