"""Topic administration over the wire: TOPIC_CREATE, TOPIC_ALTER, TOPIC_DESCRIBE,
TOPIC_DELETE and TOPIC_LIST (``fmq topic``). Changes run in the worker threads (they wait
for the group commit, and in ``sync`` acknowledgement mode for the followers); describe and
list in the reader threads. Answers are JSON text, like the other operator requests.

TOPIC_LIST needs only a log-in: it answers the topics the user may describe.
"""

from __future__ import annotations

import json

from fmq.engine.broker import Broker
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.security.acl import allowed
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import (
    LOGGED_IN,
    REFUSES,
    SERVES,
    TOPIC,
    Need,
    needs,
    on_topic,
    operation,
)


def _named_in_settings(ctx: ServerContext, req: dict) -> list[Need]:
    return [(Operation.ALTER, TOPIC, req["settings"]["name"])]


#: Creating or changing a topic: alter on the topic its settings name.
ALTER_NAMED = needs(_named_in_settings)


def _dump(obj: object) -> dict:
    return {"json": json.dumps(obj, sort_keys=True)}


def _given(value: int) -> int | None:
    """A settings field: -1 on the wire is "not given"."""
    return None if value < 0 else value


def _settings(req: dict) -> tuple:
    s = req["settings"]
    return (s["name"], _given(s["queues"]), _given(s["retention_ms"]),
            _given(s["retention_bytes"]), _given(s["max_message_size"]))


def _described(broker: Broker, name: str) -> dict:
    return broker.topics.describe(name)


def route_here(ctx: ServerContext, name: str) -> dict | None:
    """On a node of a cluster, this node's group's part in topic ``name``'s route:
    ``{"group", "in_route"}`` and, while in it, its ``base``, ``queues`` and
    ``permission``; None outside a cluster or for a topic without a route. A group that
    ``remove-group`` took out keeps its local topic (its data stays readable until
    retention), but it is no longer the topic's: lists and descriptions say so."""
    membership = ctx.routes
    if membership is None:
        return None
    route = membership.snapshot.routes.get(name)
    if route is None:
        return None
    entry = route.entry(membership.broker_group)
    if entry is None:
        return {"group": membership.broker_group, "in_route": False}
    return {"group": membership.broker_group, "in_route": True, "base": entry.base,
            "queues": entry.queues, "permission": entry.permission}


def _with_route(ctx: ServerContext, topic: dict) -> dict:
    here = route_here(ctx, topic["name"])
    return topic if here is None else {**topic, "route_here": here}


@operation(Op.TOPIC_CREATE, access=ALTER_NAMED, hosted=None, follower=REFUSES)
async def _create(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    broker = ctx.broker
    cfg = await ctx.write(broker.topics.create, *_settings(req))
    return _dump({"topic": await ctx.read(_described, broker, cfg.name), "created": True})


@operation(Op.TOPIC_ALTER, access=ALTER_NAMED, hosted=None, follower=REFUSES)
async def _alter(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    broker = ctx.broker
    cfg = await ctx.write(broker.topics.alter, *_settings(req))
    return _dump({"topic": await ctx.read(_described, broker, cfg.name), "altered": True})


@operation(Op.TOPIC_DESCRIBE, access=on_topic(Operation.DESCRIBE), hosted=None, follower=SERVES)
async def _describe(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    described = await ctx.read(_described, ctx.broker, req["topic"])
    return _dump({"topic": _with_route(ctx, described)})


@operation(Op.TOPIC_DELETE, access=on_topic(Operation.ALTER), hosted=None, follower=REFUSES)
async def _delete(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    subscribers = [g for g, topics in ctx.groups.subscriptions().items()
                   if req["topic"] in topics]
    cfg = await ctx.write(ctx.broker.topics.delete, req["topic"], req["force"], subscribers)
    return _dump({"topic": cfg.to_wire_dict(), "deleted": True})


@operation(Op.TOPIC_LIST, access=LOGGED_IN, hosted=None, follower=SERVES)
async def _list(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    topics = await ctx.read(ctx.broker.topics.list)
    principal = session.principal
    if principal is not None:  # with users: only what this user may describe
        rules = ctx.authenticator.store.rules
        topics = [t for t in topics if allowed(rules, principal, Operation.DESCRIBE,
                                               ResourceType.TOPIC, t["name"])]
    return _dump({"topics": [_with_route(ctx, t) for t in topics]})
