"""JoinGroup (key 11), SyncGroup (14), Heartbeat (12) and LeaveGroup (13) on the
:class:`~fmq.server.kafka.group_coordinator.GroupCoordinator`: Kafka's ``subscribe()``
consumers share a topic's partitions, their leader assigning them."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_groups
from fmq.server.kafka.entities import ms
from fmq.server.kafka.group_coordinator import GroupError
from fmq.server.kafka.session import KafkaSession


@kafka_api(11, "JoinGroup", 0, 7, access=on_groups(Operation.CONSUME))
async def join_group(session: KafkaSession, request: Any, version: int) -> dict:
    session_timeout = ms(request.session_timeout) / 1000
    rebalance_timeout = ms(getattr(request, "rebalance_timeout", request.session_timeout)) / 1000
    try:
        _check(session, request.group_id)
        answer = await session.groups.join(
            request.group_id, request.member_id, "kafka", request.protocol_type,
            [(p.name, p.metadata) for p in request.protocols], session_timeout,
            rebalance_timeout)
    except GroupError as exc:
        answer = {"error_code": exc.code, "generation_id": -1, "protocol_type": None,
                  "protocol_name": "", "leader": "", "member_id": request.member_id,
                  "members": []}
    return {"throttle_time": 0, **answer}


@kafka_api(14, "SyncGroup", 0, 5, access=on_groups(Operation.CONSUME))
async def sync_group(session: KafkaSession, request: Any, version: int) -> dict:
    assignments = {a.member_id: a.assignment for a in request.assignments}
    try:
        _check(session, request.group_id)
        assignment, group = await session.groups.sync(request.group_id, request.generation_id,
                                                      request.member_id, assignments)
    except GroupError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "protocol_type": None,
                "protocol_name": None, "assignment": b""}
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "protocol_type": group.protocol_type, "protocol_name": group.protocol,
            "assignment": assignment}


@kafka_api(12, "Heartbeat", 0, 4, access=on_groups(Operation.CONSUME))
async def heartbeat(session: KafkaSession, request: Any, version: int) -> dict:
    code = ErrorCode.none
    try:
        _check(session, request.group_id)
        session.groups.heartbeat(request.group_id, request.generation_id, request.member_id)
    except GroupError as exc:
        code = exc.code
    return {"throttle_time": 0, "error_code": code}


@kafka_api(13, "LeaveGroup", 0, 4, access=on_groups(Operation.CONSUME))
async def leave_group(session: KafkaSession, request: Any, version: int) -> dict:
    leaving = ([m.member_id for m in request.members] if version >= 3
               else [request.member_id])
    answers = []
    for member_id in leaving:
        code = ErrorCode.none
        try:
            _check(session, request.group_id)
            session.groups.leave(request.group_id, member_id)
        except GroupError as exc:
            code = exc.code
        answers.append({"member_id": member_id, "group_instance_id": None,
                        "error_code": code})
    top = answers[0]["error_code"] if version < 3 and answers else ErrorCode.none
    return {"throttle_time": 0, "error_code": top, "members": answers}


def _check(session: KafkaSession, group: str) -> None:
    """Raise GroupError(GROUP_AUTHORIZATION_FAILED) when the user may not use ``group``."""
    denied = access.refusal(session, group)
    if denied is not None:
        raise GroupError(denied)
