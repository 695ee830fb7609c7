"""FindCoordinator (key 10) and the classic group membership APIs: JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), on
:class:`~fmq.server.kafka.group_coordinator.KafkaGroupCoordinator`.

A consumer group's coordinator is the primary of the broker group its id hashes to (the
same answer on every node, :mod:`.group_placement`); any other node answers its requests
NOT_COORDINATOR. A transactional id's coordinator is the primary of the asked node's group.
Versions: those librdkafka 2.x, kafka-python and aiokafka send; JoinGroup from version 4
asks a new member to join again with the id it is given (MEMBER_ID_REQUIRED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.errors import InvalidArgument
from fmq.message import check_name
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import LOGGED_IN, kafka_api, on_groups
from fmq.server.kafka.entities import ms
from fmq.server.kafka.group_coordinator import KafkaGroupError
from fmq.server.kafka.group_placement import (
    check_coordinator,
    group_coordinator_address,
    transaction_coordinator_address,
)
from fmq.server.kafka.group_registry import coordinator_of
from fmq.server.kafka.session import KafkaSession

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1  # a transactional id: its coordinator is this group's primary


# Any logged-in user: where a group is coordinated tells nothing of it, and a consumer with
# consume on its group but no describe (FMQ does not derive one from the other for groups)
# must still find it.
@kafka_api(10, "FindCoordinator", 0, 4, access=LOGGED_IN)
async def find_coordinator(session: KafkaSession, request: Any, version: int) -> dict:
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if version >= 4:
        coordinators = [_coordinator(session, key, key_type) for key in request.coordinator_keys]
        return {"throttle_time": 0, "coordinators": coordinators}
    answer = _coordinator(session, request.key, key_type)
    return {"throttle_time": 0, **answer}


def _coordinator(session: KafkaSession, key: str, key_type: int) -> dict:
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return {"key": key, "error_code": ErrorCode.invalid_request, "node_id": -1,
                "host": "", "port": -1,
                "error_message": f"unknown coordinator key type {key_type}"}
    found = (group_coordinator_address(session, key) if key_type == GROUP_KEY_TYPE
             else transaction_coordinator_address(session))
    if found is None:
        return {"key": key, "error_code": ErrorCode.coordinator_not_available, "node_id": -1,
                "host": "", "port": -1,
                "error_message": "the coordinator's broker group is electing its primary, or "
                                 "this node has not read the cluster's brokers yet; ask again"}
    return {"key": key, "error_code": ErrorCode.none, "error_message": None,
            "node_id": found.node_id, "host": found.host, "port": found.port}


def _group_id(session: KafkaSession, group_id: str) -> str:
    """A Kafka group id that can name an FMQ consumer group (its offsets are FMQ's) and
    that this connection's user may use as the API being answered declares."""
    _check_access(session, group_id)
    try:
        check_name(group_id, "group", allow_none=False)
    except InvalidArgument:
        raise KafkaGroupError(ErrorCode.invalid_group_id) from None
    return group_id


def _check_access(session: KafkaSession, group_id: str) -> None:
    """This node coordinates ``group_id`` (NOT_COORDINATOR elsewhere) and the user may use
    it as the API being answered declares."""
    check_coordinator(session, group_id)
    denied = access.refusal(session, group_id)
    if denied is not None:
        raise KafkaGroupError(denied)


@kafka_api(11, "JoinGroup", 0, 9, access=on_groups(Operation.CONSUME))
async def join_group(session: KafkaSession, request: Any, version: int) -> dict:
    session_timeout = ms(request.session_timeout)
    rebalance_timeout = ms(getattr(request, "rebalance_timeout", session_timeout))
    protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
    try:
        answer = await coordinator_of(session.ctx).join(
            _group_id(session, request.group_id), request.member_id,
            getattr(request, "group_instance_id", None), "", session.peer, session_timeout,
            rebalance_timeout, request.protocol_type, protocols,
            require_known_id=version >= 4)
    except KafkaGroupError as exc:
        answer = {"error_code": exc.code, "generation_id": -1, "protocol_type": None,
                  "protocol_name": None, "leader": "", "skip_assignment": False,
                  "member_id": request.member_id, "members": []}
    if version < 7 and answer["protocol_name"] is None:
        answer["protocol_name"] = ""  # a plain string before version 7
    return {"throttle_time": 0, **answer}


@kafka_api(14, "SyncGroup", 0, 5, access=on_groups(Operation.CONSUME))
async def sync_group(session: KafkaSession, request: Any, version: int) -> dict:
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    try:
        _check_access(session, request.group_id)
        code, assignment = await coordinator_of(session.ctx).sync(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id, getattr(request, "protocol_type", None),
            getattr(request, "protocol_name", None), assignments)
    except KafkaGroupError as exc:
        code, assignment = exc.code, b""
    group = coordinator_of(session.ctx).groups.get(request.group_id)
    ok = code == ErrorCode.none and group is not None
    return {"throttle_time": 0, "error_code": code,
            "protocol_type": group.protocol_type if ok else None,
            "protocol_name": group.protocol_name if ok else None, "assignment": assignment}


@kafka_api(12, "Heartbeat", 0, 4, access=on_groups(Operation.CONSUME))
async def heartbeat(session: KafkaSession, request: Any, version: int) -> dict:
    try:
        _check_access(session, request.group_id)
        code = coordinator_of(session.ctx).heartbeat(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id)
    except KafkaGroupError as exc:
        code = exc.code
    return {"throttle_time": 0, "error_code": code}


@kafka_api(13, "LeaveGroup", 0, 5, access=on_groups(Operation.CONSUME))
async def leave_group(session: KafkaSession, request: Any, version: int) -> dict:
    coordinator = coordinator_of(session.ctx)
    try:
        _check_access(session, request.group_id)
    except KafkaGroupError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "members": []}
    if version < 3:
        code = coordinator.leave(request.group_id, request.member_id, None)
        return {"throttle_time": 0, "error_code": code}
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "error_code": coordinator.leave(request.group_id, m.member_id,
                                                m.group_instance_id)}
               for m in request.members]
    # Kafka answers an unknown group at the top; each member's own outcome below.
    top = (ErrorCode.unknown_member_id if request.group_id not in coordinator.groups
           and all(m["error_code"] for m in members) else ErrorCode.none)
    return {"throttle_time": 0, "error_code": top, "members": members}
