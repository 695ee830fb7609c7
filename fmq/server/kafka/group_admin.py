"""DescribeGroups (key 15), ListGroups (key 16) and DeleteGroups (key 42): the consumer
groups of both protocols, as Kafka's admin clients see them.

* A Kafka group is described as the coordinator holds it (state, protocol, members with
  their metadata and assignment).
* An FMQ SDK group with live members is listed and described as Stable with protocol type
  ``fmq`` (its members, without Kafka metadata), so an admin sees why a Kafka consumer is
  refused from it.
* A group that only has committed offsets is Empty with protocol type "" (Kafka's simple
  consumer group), as Kafka lists a group whose members are gone.
* A group nobody knows is Dead (DescribeGroups before version 6 answers so).

DeleteGroups forgets an Empty Kafka group and refuses one with members (NON_EMPTY_GROUP,
of either protocol). FMQ keeps committed offsets as log records and cannot delete them
yet, so a group that has some is refused with POLICY_VIOLATION (the server logs why);
GROUP_ID_NOT_FOUND for a group nobody knows.

DescribeGroups and DeleteGroups are the group's coordinator's (:mod:`.group_placement`;
NOT_COORDINATOR elsewhere, as Kafka answers, and admin clients ask FindCoordinator
first). In a cluster of several broker groups a group's offsets may be kept by any group
a route names: those are asked too (COORDINATOR_LOAD_IN_PROGRESS while one is away).
ListGroups is answered by every node with what it knows (its coordinator's groups, its
FMQ groups, the groups with offsets in its log).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.errors import InvalidArgument
from fmq.security import Operation, ResourceType
from fmq.server.context import ServerContext
from fmq.server.kafka import access
from fmq.server.kafka.apis import LOGGED_IN, kafka_api, on_groups
from fmq.server.kafka.group_links import links_of
from fmq.server.kafka.group_placement import coordinator_refusal
from fmq.server.kafka.group_registry import coordinator_of
from fmq.server.kafka.group_remote_offsets import committed_anywhere
from fmq.server.kafka.group_state import GroupState
from fmq.server.kafka.routed import routed_groups
from fmq.server.kafka.session import KafkaSession

logger = logging.getLogger("fmq.server.kafka")

#: The protocol type FMQ SDK groups are shown with.
FMQ_PROTOCOL_TYPE = "fmq"
#: "Not asked": authorized_operations when the client did not ask for them.
NO_OPERATIONS = -(2 ** 31)


def _offset_groups(broker: Broker, group: str | None) -> set[str]:
    """Groups with committed offsets (of ``group`` alone when given), in a reader thread."""
    try:
        return {row["group"] for row in broker.inventory.groups(group)}
    except InvalidArgument:
        return set()  # a name FMQ cannot hold has no offsets


async def _committed_somewhere(session: KafkaSession, group: str) -> tuple[ErrorCode, bool]:
    """Whether ``group`` has committed offsets here or in another broker group a route
    names; a code other than none when one of those could not be asked."""
    ctx = session.ctx
    if await ctx.read(_offset_groups, ctx.broker, group):
        return ErrorCode.none, True
    own = session.brokers.group if session.brokers is not None else ""
    others = [g for g in routed_groups(session) if g != own]
    if not others:
        return ErrorCode.none, False
    return await committed_anywhere(links_of(ctx), others, group)


@kafka_api(15, "DescribeGroups", 0, 5, access=on_groups(Operation.DESCRIBE))
async def describe_groups(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    coordinator = coordinator_of(ctx)
    described = []
    for group_id in request.groups:
        answer = {"error_code": ErrorCode.none, "group_id": group_id, "group_state": "Dead",
                  "protocol_type": "", "protocol_data": "", "members": [],
                  "authorized_operations": NO_OPERATIONS}
        denied = access.refusal(session, group_id) or coordinator_refusal(session, group_id)
        if denied is not None:
            described.append({**answer, "error_code": denied})
            continue
        g = coordinator.groups.get(group_id)
        fmq_live = ctx.groups.describe().get(group_id) if g is None else None
        if g is not None:
            answer.update(group_state=g.state.value, protocol_type=g.protocol_type or "",
                          protocol_data=g.protocol_name or "")
            stable = g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
            answer["members"] = [
                {"member_id": m.member_id, "group_instance_id": m.instance_id,
                 "client_id": m.client_id, "client_host": m.client_host,
                 "member_metadata": m.metadata(g.protocol_name or "") if stable else b"",
                 "member_assignment": m.assignment if stable else b""}
                for m in g.members.values()]
        elif fmq_live is not None:
            answer.update(group_state="Stable", protocol_type=FMQ_PROTOCOL_TYPE,
                          protocol_data=FMQ_PROTOCOL_TYPE)
            answer["members"] = [{"member_id": mid, "group_instance_id": None,
                                  "client_id": "", "client_host": "", "member_metadata": b"",
                                  "member_assignment": b""} for mid in fmq_live["members"]]
        else:
            failed, committed = await _committed_somewhere(session, group_id)
            if failed != ErrorCode.none:
                answer["error_code"] = failed
            elif committed:
                answer["group_state"] = "Empty"
        described.append(answer)
    return {"throttle_time": 0, "groups": described}


# Any logged-in user; the answer lists only the groups she may describe, as Metadata lists
# only the topics she may describe.
@kafka_api(16, "ListGroups", 0, 5, access=LOGGED_IN)
async def list_groups(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    listed = await _all_groups(ctx)
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = [{"group_id": name, "protocol_type": ptype, "group_state": state,
               "group_type": "classic"}
              for name, (ptype, state) in sorted(listed.items())
              if access.permits(session, Operation.DESCRIBE, ResourceType.GROUP, name)
              and (not states or state.lower() in states)
              and (not types or "classic" in types)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}


async def _all_groups(ctx: ServerContext) -> dict[str, tuple[str, str]]:
    """Every group of either protocol: name -> (protocol type, state)."""
    listed = {name: ("", "Empty") for name in await ctx.read(_offset_groups, ctx.broker, None)}
    for name in ctx.groups.describe():
        listed[name] = (FMQ_PROTOCOL_TYPE, "Stable")
    for name, g in coordinator_of(ctx).groups.items():
        listed[name] = (g.protocol_type or listed.get(name, ("", ""))[0], g.state.value)
    return listed


@kafka_api(42, "DeleteGroups", 0, 2, access=on_groups(Operation.ADMIN))
async def delete_groups(session: KafkaSession, request: Any, version: int) -> dict:
    results = [{"group_id": group_id, "error_code": await _delete(session, group_id)}
               for group_id in request.groups_names]
    return {"throttle_time": 0, "results": results}


async def _delete(session: KafkaSession, group_id: str) -> ErrorCode:
    """Forget ``group_id`` if it is an Empty Kafka group without offsets: its code."""
    ctx = session.ctx
    coordinator = coordinator_of(ctx)
    g = coordinator.groups.get(group_id)
    denied = access.refusal(session, group_id) or coordinator_refusal(session, group_id)
    if denied is not None:
        return denied
    if ctx.groups.member_count(group_id) or (g is not None and (g.members or g.pending)):
        return ErrorCode.non_empty_group
    failed, committed = await _committed_somewhere(session, group_id)
    if failed != ErrorCode.none:
        return failed
    if committed:
        logger.info("kafka DeleteGroups from %s: group %r has committed offsets, which FMQ "
                    "keeps in the log and cannot delete; refused (POLICY_VIOLATION)",
                    session.peer, group_id)
        return ErrorCode.policy_violation
    if g is None:
        return ErrorCode.group_id_not_found
    coordinator.delete(group_id)
    return ErrorCode.none
