"""The threaded producer's sends over its topics' routes (docs/client.md, "Routing"): read
each topic's route with ROUTE, place every request (:class:`~.router.Router`), send it on
its broker group's link, and carry on through NotHosted (read the route again at once,
place the messages again) and a broker group's lost primary (the group is left out of
unkeyed sends for a back-off).

Outside a cluster nothing changes: one ROUTE per topic per ``route_refresh_s``, then every
request goes on the client's own link as before, the server picking the queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from fmq.errors import FMQError
from fmq.message import Message, check_topic
from fmq.protocol import Op

from ..idempotence import Sequencer
from .route_table import Route, RouteTable
from .router import Build, PlacedRequest, Router

logger = logging.getLogger("fmq.client")


class RoutedSends:
    """The threaded producer's side of routing: reading routes and the send loop. Mixed
    into :class:`~fmq.client.Producer` (it uses the client's ``call``, ``_connection``,
    ``attempts`` and ``links``)."""

    router: Router

    @property
    def routes(self) -> RouteTable:
        return self.router.table

    def sequencer(self, broker_group: str | None) -> Sequencer:
        return self.router.sequencer(broker_group)

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
               broker_group: str | None = None, confined: bool = False) -> PlacedRequest:
        routes = [self.route(m.topic) for m in messages]
        return self.router.place(routes, messages, build, stamp, broker_group, confined)

    # ------------------------------------------------------------------ the send loop

    def deliver(self, op: Op, messages: Sequence[Message], build: Build, *, stamp: bool = True,
                broker_group: str | None = None, confined: bool = False,
                timeout: float | None = None, attempts: Any = None,
                on_error: Callable[[FMQError, PlacedRequest], None] | None = None
                ) -> tuple[dict[str, Any], PlacedRequest]:
        """Send ``messages`` in one request (built by ``build`` from their wire form) to
        the broker group their route gives (``broker_group``: the one they must go to),
        retrying retriable errors within the delivery deadline; returns (the answer, where
        it went). NotHosted reads the route again and places them anew; a failure after
        which they may be stored keeps them where they went (same group, queue and
        numbers). ``on_error`` sees each failure first (it may raise to end the loop)."""
        timeout = self.request_timeout if timeout is None else timeout  # type: ignore[attr-defined]
        attempts = attempts or self.attempts()  # type: ignore[attr-defined]
        pinned: PlacedRequest | None = None
        while True:
            placed = pinned
            try:
                if placed is None:
                    placed = self._place(messages, build, stamp, broker_group, confined)
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
