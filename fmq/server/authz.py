"""Authorisation: the one check the session runs on every request before its handler
starts, by the access its operation declares (:class:`fmq.server.ops.operation.Access`,
beside the handler; docs/security.md has the same table for people).

Nothing is checked while the server has no users. Once it has users, a request of a
session that has not logged in is refused unless its operation is declared open before
log-in (the handshake's); a logged-in user's request runs only if, for every resource it
touches, a rule allows the operation and none denies it.
"""

from __future__ import annotations

import logging

from fmq.errors import AccessDenied, DeniedByRule, FMQError
from fmq.security import Operation, ResourceType
from fmq.security.acl import decide
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import FmqOperation

logger = logging.getLogger("fmq.server")

def resource_text(rtype: ResourceType, name: str) -> str:
    return "the cluster" if rtype == ResourceType.CLUSTER else f"{rtype.value} {name!r}"


def refusal(ctx: ServerContext, session: RequestSession, declared: FmqOperation, req: dict
            ) -> FMQError | None:
    """Why ``req`` (a request of operation ``declared``) may not run, or None (asked only
    while the server has users). A denial is counted and logged (operation, resource,
    user: never a secret)."""
    principal = session.principal
    if principal is None:
        return ctx.authenticator.refusal(session, declared)
    needs = declared.access.needs
    if needs is None:
        return None
    for operation, rtype, name in needs(ctx, req):
        denied = denial(ctx, session, operation, rtype, name, declared.op.name)
        if denied is not None:
            return denied
    return None


def denial(ctx: ServerContext, session: RequestSession, operation: Operation,
           rtype: ResourceType, name: str, why: str) -> FMQError | None:
    """Why the session's user may not do ``operation`` on the resource, or None; a denial
    is counted and logged (``why``: the request, or what it stands for)."""
    permitted, deny_rule = decide(ctx.authenticator.store.rules, session.principal,
                                  operation, rtype, name)
    if permitted:
        return None
    ctx.counters.access_denied += 1
    where = resource_text(rtype, name)
    logger.warning("connection %d from %s: %s denied %s on %s (%s)", session.id,
                   session.peer, session.principal, operation.value, where, why)
    if deny_rule is not None:
        return DeniedByRule(operation.value, where, deny_rule.text())
    return AccessDenied(operation.value, where)
