"""What both producers (threaded and asyncio) keep for routing (docs/client.md, "Routing"):
the :class:`Router`, which takes each topic's route as ROUTE answered it, numbers each
broker group's messages, and places every request (:mod:`.placement`) as a
:class:`PlacedRequest`: the link it goes on, its fields, the broker group its results name.
It also says what a failure teaches about the routes and where a request that may be stored
must be sent again. The sends themselves are the producers' (:mod:`.sends` for the
threaded one, :mod:`fmq.client.aio` for the asyncio one).
"""

from __future__ import annotations

import logging
import threading
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
from fmq.message import Message, SendResult
from fmq.protocol.values import message_to_wire

from ..acquire import OWN_LINK, LinkPool, link_of
from ..deadline import may_be_stored
from ..discovery import address_of
from ..idempotence import Sequencer
from .placement import choose_queue, place_batch, place_in_group
from .route_table import (
    DEFAULT_ROUTE_REFRESH_S,
    Route,
    RouteTable,
    knows_no_route,
    old_server_route,
    parse_route,
)

logger = logging.getLogger("fmq.client")

#: What a request is built from once its messages are placed: their wire form.
Build = Callable[[list[dict[str, Any]]], dict[str, Any]]


class PlacedRequest:
    """One request ready to go: the link to send it on, its fields, the broker group named
    in its results ("" when the server did not say) and the topics of its messages."""

    __slots__ = ("broker_group", "fields", "link", "topics")

    def __init__(self, link: str, fields: dict[str, Any], broker_group: str,
                 topics: list[str]) -> None:
        self.link = link
        self.fields = fields
        self.broker_group = broker_group
        self.topics = topics

    @property
    def single(self) -> bool:
        """Sent on the client's own link (a topic outside a cluster)."""
        return self.link == OWN_LINK


class Router:
    """What both producers (threaded and asyncio) keep for routing: the route table, the
    sequence numbers per broker group, and the choice of each request's group and queues.
    The producer reads routes itself (:meth:`take` gets ROUTE's answer or failure)."""

    def __init__(self, links: LinkPool, idempotent: bool, producer_id: str | None,
                 route_refresh_s: float = DEFAULT_ROUTE_REFRESH_S) -> None:
        self.links = links
        self.table = RouteTable(route_refresh_s)
        #: Numbers the messages of a single route, as before routing existed.
        self.sequencer_single = Sequencer(idempotent, producer_id)
        #: In a cluster, each broker group numbers its own messages (one dense sequence per
        #: group for its dedup window) under the one producer id.
        self._group_sequencers: dict[str, Sequencer] = {}
        self._lock = threading.Lock()
        self._access_unrouted = False  # a ROUTE was refused: sends go unrouted
        self._access_warned = False

    def sequencer(self, broker_group: str | None) -> Sequencer:
        """The numbering of ``broker_group``'s messages (None: a single route's)."""
        if broker_group is None:
            return self.sequencer_single
        with self._lock:
            seq = self._group_sequencers.get(broker_group)
            if seq is None:
                seq = self._group_sequencers[broker_group] = Sequencer(
                    self.sequencer_single.enabled, self.sequencer_single.producer_id)
            return seq

    def take(self, topic: str, answer: dict[str, Any] | FMQError) -> Route:
        """ROUTE's ``answer`` for ``topic`` (or the error it failed with) into the table;
        the broker groups it names get their links."""
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
            for name, broker_group in route.broker_groups.items():
                address = address_of(broker_group.primary)
                if address is not None:
                    self.links.seed(link_of(name), address)
        return route

    def place(self, routes: list[Route], messages: Sequence[Message], build: Build,
              stamp: bool, broker_group: str | None = None, confined: bool = False
              ) -> PlacedRequest:
        """Choose the broker group and queues of one request's ``messages`` (``routes``:
        each one's topic's; ``broker_group``: the group they must go to; ``confined``: a
        transaction's, whose keys hash over that group's own queues, in the first message's
        group unless ``broker_group`` is given) and build it, numbered when ``stamp``."""
        topics = [m.topic for m in messages]
        if all(r.single for r in routes):
            seq = self.sequencer(None)
            wire = [message_to_wire(seq.stamp(m) if stamp else m) for m in messages]
            return PlacedRequest(OWN_LINK, build(wire), routes[0].broker_group_name(), topics)
        turn = self.table.turn(topics[0])
        keys = [m.key for m in messages]
        queue_ids = [m.queue_id for m in messages]
        skipped = self.table.skipped()
        if confined:
            if broker_group is None:
                broker_group = choose_queue(routes[0], keys[0], queue_ids[0], None, turn,
                                            skipped).group
            refs = place_in_group(routes, broker_group, keys, queue_ids, turn)
        else:
            refs = place_batch(routes, keys, queue_ids, broker_group, turn, skipped)
        chosen = refs[0].group
        seq = self.sequencer(chosen)
        placed = [replace(m, queue_id=r.queue_id) for m, r in zip(messages, refs, strict=True)]
        wire = [message_to_wire(seq.stamp(m) if stamp else m) for m in placed]
        return PlacedRequest(link_of(chosen), build(wire), chosen, topics)

    def learn(self, exc: FMQError, placed: PlacedRequest) -> None:
        """What a failure says about the routes: NotHosted, read them again; a broker group
        whose primary could not be reached, leave it out of unkeyed sends for a while."""
        if isinstance(exc, NotHosted):
            for topic in placed.topics:
                self.table.not_hosted(topic)
        elif not placed.single and isinstance(exc, (ConnectionLost, PrimaryNotFound)):
            self.table.unreachable(placed.broker_group)

    @staticmethod
    def pin(exc: FMQError, placed: PlacedRequest, pinned: PlacedRequest | None
            ) -> PlacedRequest | None:
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

    def results(self, answers: list[dict[str, Any]], placed: PlacedRequest
                ) -> list[SendResult]:
        """The SendResults of a send's answer, naming the broker group that stored them."""
        if placed.single and self._access_unrouted and not self._access_warned:
            self._access_warned = True
            logger.warning("no access to topic routes (describe): sent to the servers "
                           "given, without routing")
        return [SendResult(r["offset"], r["queue_id"], r["queue_offset"], placed.broker_group)
                for r in answers]
