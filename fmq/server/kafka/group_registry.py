"""Which Kafka group coordinator serves which server: one per server context, made at the
first group request."""

from __future__ import annotations

import weakref

from fmq.server.context import ServerContext
from fmq.server.kafka.group_coordinator import KafkaGroupCoordinator
from fmq.server.ops.group_protocol_gate import gate_of

_COORDINATORS: weakref.WeakKeyDictionary[ServerContext, KafkaGroupCoordinator] = (
    weakref.WeakKeyDictionary())


def coordinator_of(ctx: ServerContext) -> KafkaGroupCoordinator:
    """The Kafka group coordinator of the server whose context is ``ctx``, made at the first
    group request; it tells the FMQ group registry about itself then, so that an FMQ
    consumer joining a group with live Kafka members is refused (the one-store rule,
    docs/kafka.md)."""
    found = _COORDINATORS.get(ctx)
    if found is None:
        found = _COORDINATORS[ctx] = KafkaGroupCoordinator(ctx.loop, gate_of(ctx).members)
        ctx.groups.foreign_members = found.live_members
    return found
