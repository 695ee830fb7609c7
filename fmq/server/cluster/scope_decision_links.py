"""A broker group asking the cluster's other broker groups for a transaction scope's
decision (docs/transactions.md, *Scopes*; :mod:`fmq.tx.decisions_elsewhere` has the rule).

The engine asks from its own threads (the maintenance thread, a worker running a
ROLLBACK); the question goes over the links a node already keeps to the other groups'
primaries (:mod:`fmq.server.kafka.group_links`: FMQ's protocol, logged in as the node's
``follow_user``, which has ``admin`` on the cluster, what SCOPE_DECISION needs), on the
server's event loop, and the asking thread waits for the answer within the links' own
bounds. A primary that moved or died is found again by the links (they re-read the
cluster), so a group failing over is asked again at the next look, never taken as
holding nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Sequence

from fmq.errors import FMQError, ScopeDecisionUnchecked
from fmq.protocol import Op
from fmq.server.context import ServerContext
from fmq.server.kafka.group_links import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, links_of
from fmq.server.kafka.routed import cluster_broker_groups

logger = logging.getLogger("fmq.server")

#: How long an asking thread waits for one group's answer: the link's connect and request
#: bounds, and a little for the event loop to run it.
ANSWER_WAIT_S = CONNECT_TIMEOUT_S + REQUEST_TIMEOUT_S + 1.0


class LinkedBrokerGroups:
    """:class:`fmq.tx.decisions_elsewhere.OtherBrokerGroups` over the server's links to
    the other broker groups' primaries (made on the event loop, whose thread it records:
    it never waits on that loop from that thread)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.own_group: str = ctx.routes.broker_group
        self._loop_thread = threading.get_ident()

    def _others(self) -> list[str]:
        return [g for g in cluster_broker_groups(self.ctx) if g != self.own_group]

    def _ask(self, broker_group: str, producer_group: str, scope: str) -> dict:
        """SCOPE_DECISION answered by ``broker_group``'s primary; raises FMQError."""
        loop = self.ctx.loop
        if loop is None or threading.get_ident() == self._loop_thread:
            raise ScopeDecisionUnchecked(
                f"broker group {broker_group!r} cannot be asked from here (no event loop "
                f"to ask on); retry")
        request = links_of(self.ctx).request(broker_group, Op.SCOPE_DECISION,
                                              {"producer_group": producer_group,
                                               "scope": scope})
        try:
            future = asyncio.run_coroutine_threadsafe(request, loop)
        except RuntimeError:  # the round's event loop is closed: the server is stopping
            request.close()
            raise ScopeDecisionUnchecked(
                f"broker group {broker_group!r} not asked: this server is stopping; "
                f"retry") from None
        try:
            answer = future.result(ANSWER_WAIT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ScopeDecisionUnchecked(
                f"broker group {broker_group!r} did not answer within "
                f"{ANSWER_WAIT_S:.0f} s; retry") from None
        return json.loads(answer["json"])

    def decision(self, producer_group: str, scope: str) -> tuple[str, bytes] | None:
        unasked: list[str] = []
        for group in self._others():
            try:
                answer = self._ask(group, producer_group, scope)
            except FMQError as exc:
                unasked.append(f"{group}: {exc}")
                continue
            if answer.get("decision") is not None:
                return group, str(answer["decision"]).encode()
        if unasked:
            raise ScopeDecisionUnchecked(
                f"the decision of scope {scope!r} of producer group {producer_group!r} may "
                f"be held by a broker group that could not be asked ({'; '.join(unasked)}); "
                f"retry once it answers")
        return None

    def without_mark(self, producer_group: str, scope: str, groups: Sequence[str]
                     ) -> list[str]:
        missing = []
        for group in groups:
            try:
                closed = bool(self._ask(group, producer_group, scope).get("closed"))
            except FMQError as exc:
                logger.info("scope %r of producer group %r: broker group %s not asked "
                            "whether it holds a mark (%s)", scope, producer_group, group, exc)
                closed = False
            if not closed:
                missing.append(group)
        return missing


def attach_scope_decisions(ctx: ServerContext) -> None:
    """Give the serving round's broker the links to the other broker groups (on the event
    loop, as a serving round starts); nothing outside a cluster."""
    elsewhere = ctx.broker.transactions.decisions_elsewhere
    if ctx.routes is None or elsewhere is None:
        return
    elsewhere.groups = LinkedBrokerGroups(ctx)
