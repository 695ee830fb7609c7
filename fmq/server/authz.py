"""Authorisation: the one table saying what each operation needs (an operation on a
resource named by the request), and the one check the session runs on every request
before its handler starts (docs/security.md has the same table for people).

Nothing is checked while the server has no users. Once it has users, a request of a
session that has not logged in is refused unless it is one of the handshake's
(:data:`fmq.server.authn.OPEN_OPS`); a logged-in user's request runs only if, for every
resource it touches, a rule allows the operation and none denies it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from fmq.errors import AccessDenied, DeniedByRule, FMQError
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.security.acl import decide
from fmq.server.context import RequestSession, ServerContext

logger = logging.getLogger("fmq.server")

Need = tuple[Operation, ResourceType, str]
Needs = Callable[[ServerContext, dict], Iterable[Need]]

P, C, D = Operation.PRODUCE, Operation.CONSUME, Operation.DESCRIBE
TOPIC, GROUP, PGROUP = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.PRODUCER_GROUP


def _on_topic(operation: Operation) -> Needs:
    return lambda ctx, req: [(operation, TOPIC, req["topic"])]


def _on_group(operation: Operation) -> Needs:
    return lambda ctx, req: [(operation, GROUP, req["group"])]


def _member(ctx: ServerContext, req: dict) -> list[Need]:
    return [(C, GROUP, req["group"]), *((C, TOPIC, t) for t in set(req["topics"]))]


def _on_cluster(operation: Operation) -> Needs:
    return lambda ctx, req: [(operation, ResourceType.CLUSTER, "cluster")]


def _route(ctx: ServerContext, req: dict) -> list[Need]:
    # "" asks for every route and group: a view of the whole cluster.
    if not req["topic"]:
        return [(D, ResourceType.CLUSTER, "cluster")]
    return [(D, TOPIC, req["topic"])]


def _route_change(ctx: ServerContext, req: dict) -> list[Need]:
    # The topic is inside the JSON; a request that names none can only be judged by an
    # administrator of the cluster (the handler then says what is wrong with it).
    try:
        topic = json.loads(req["json"]).get("topic")
    except (ValueError, AttributeError):
        topic = None
    if not isinstance(topic, str) or not topic:
        return [(Operation.ADMIN, ResourceType.CLUSTER, "cluster")]
    return [(Operation.ALTER, TOPIC, topic)]


def _prepare(ctx: ServerContext, req: dict) -> list[Need]:
    return [(Operation.TRANSACTION, PGROUP, req["producer_group"]),
            *((P, TOPIC, t) for t in {m.topic for m in req["messages"]})]


def _transaction(ctx: ServerContext, req: dict) -> list[Need]:
    """The producer group the request names. A transaction is its (group, id), so the
    operation can only ever touch a transaction of that group, whenever it runs and
    whatever other groups do with the id: a check that cannot go stale between admission
    and the operation (one made on the transaction open at admission could)."""
    return [(Operation.TRANSACTION, PGROUP, req["producer_group"])]


def _groups(ctx: ServerContext, req: dict) -> list[Need]:
    if req["group"] is None:
        return [(D, ResourceType.CLUSTER, "cluster")]
    return [(D, GROUP, req["group"])]


#: What every operation needs; None = no rule (the handshake and PING, open to every session;
#: TOPIC_LIST, which still needs a log-in and filters its answer).
ACCESS: dict[int, Needs | None] = {
    Op.PING: None, Op.HELLO: None, Op.AUTH_START: None, Op.AUTH_FINISH: None,
    Op.SEND: lambda ctx, req: [(P, TOPIC, req["message"].topic)],
    Op.SEND_BATCH: lambda ctx, req: [(P, TOPIC, t) for t in {m.topic for m in req["messages"]}],
    Op.PREPARE: _prepare,
    Op.COMMIT: _transaction,
    Op.ROLLBACK: _transaction,
    Op.ANSWER_UNCERTAIN: _transaction,
    Op.POLL_UNCERTAIN: lambda ctx, req: [(Operation.TRANSACTION, PGROUP,
                                          req["producer_group"])],
    Op.PULL: _on_topic(C),
    Op.QUERY_KEY: _on_topic(C),
    Op.OFFSET_FOR_TIME: _on_topic(D),
    Op.QUEUE_RANGE: _on_topic(D),
    Op.COMMIT_OFFSET: _on_group(Operation.COMMIT_OFFSETS),
    Op.FETCH_OFFSET: _on_group(C),
    Op.GROUP_JOIN: _member,
    Op.GROUP_HEARTBEAT: _member,
    Op.GROUP_SYNC: _member,
    Op.GROUP_LEAVE: _on_group(C),
    Op.TOPICS: _on_cluster(D),
    Op.GROUPS: _groups,
    Op.STATS: _on_cluster(Operation.ADMIN),
    Op.LIST_TX: _on_cluster(Operation.ADMIN),
    Op.RESOLVE_TX: _on_cluster(Operation.ADMIN),
    Op.RESET_OFFSETS: _on_cluster(Operation.ADMIN),
    Op.USER_PUT: _on_cluster(Operation.ADMIN),
    Op.USER_REMOVE: _on_cluster(Operation.ADMIN),
    Op.USER_LIST: _on_cluster(Operation.ADMIN),
    Op.ACL_ADD: _on_cluster(Operation.ADMIN),
    Op.ACL_REMOVE: _on_cluster(Operation.ADMIN),
    Op.ACL_LIST: _on_cluster(Operation.ADMIN),
    Op.SEND_AT: lambda ctx, req: [(P, TOPIC, req["message"].topic)],
    Op.PULL_TAGGED: _on_topic(C),
    Op.NACK: lambda ctx, req: [(C, GROUP, req["group"]), (C, TOPIC, req["topic"])],
    Op.DLQ_REDRIVE: _on_cluster(Operation.ADMIN),
    # A follower copies the whole log; followers do not log in yet (docs/security.md).
    Op.REPL_FETCH: _on_cluster(Operation.ADMIN),
    Op.REPL_STATUS: _on_cluster(D),
    Op.EPOCH_END: _on_cluster(Operation.ADMIN),
    Op.PROMOTE: _on_cluster(Operation.ADMIN),
    Op.TOPIC_CREATE: lambda ctx, req: [(Operation.ALTER, TOPIC, req["settings"]["name"])],
    Op.TOPIC_ALTER: lambda ctx, req: [(Operation.ALTER, TOPIC, req["settings"]["name"])],
    Op.TOPIC_DELETE: _on_topic(Operation.ALTER),
    Op.TOPIC_DESCRIBE: _on_topic(D),
    # Any logged-in user: the answer holds only the topics the user may describe.
    Op.TOPIC_LIST: None,
    Op.ROUTE: _route,
    Op.ROUTE_CHANGE: _route_change,
}


def resource_text(rtype: ResourceType, name: str) -> str:
    return "the cluster" if rtype == ResourceType.CLUSTER else f"{rtype.value} {name!r}"


def refusal(ctx: ServerContext, session: RequestSession, op: int, req: dict
            ) -> FMQError | None:
    """Why ``req`` may not run, or None (asked only while the server has users). A denial
    is counted and logged (operation, resource, user: never a secret)."""
    principal = session.principal
    if principal is None:
        return ctx.authenticator.refusal(session, op)
    needs = ACCESS[op]
    if needs is None:
        return None
    for operation, rtype, name in needs(ctx, req):
        denied = denial(ctx, session, operation, rtype, name, Op(op).name)
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
