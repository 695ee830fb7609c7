"""DescribeConfigs (key 32) and IncrementalAlterConfigs (key 44) on FMQ's topic settings
(:mod:`.topic_configs` says which Kafka configs they are).

A topic's settable configs are answered with the value in force: the topic's own
(DYNAMIC_TOPIC_CONFIG) or the broker's (STATIC_BROKER_CONFIG); an alter goes through
``Topics.alter`` as ``fmq topic alter`` does (SET: the topic's own value, DELETE: back to
the broker's), all of one resource's changes in one TOPIC record or none. A broker's
configs are its configuration file's, read-only here.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.engine.topics import DEFAULT
from fmq.errors import FMQError, UnknownTopic
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.security.acl import CLUSTER_NAME
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.controller import controller_refusal
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.topic_configs import (
    DEFAULT_CONFIG,
    TYPE_BOOLEAN,
    TYPE_INT,
    TYPE_LONG,
    ConfigRefused,
    described,
    parse_setting,
)
from fmq.topic_config import check_topic_settings

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1


@kafka_api(32, "DescribeConfigs", 1, 4, access=on_topics(Operation.DESCRIBE))
async def describe_configs(session: KafkaSession, request: Any, version: int) -> dict:
    results = []
    for resource in request.resources:
        result = {"error_code": ErrorCode.none, "error_message": None,
                  "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name, "configs": []}
        keys = resource.configuration_keys
        docs = bool(getattr(request, "include_documentation", False))
        denied = (access.refusal(session, resource.resource_name)
                  if resource.resource_type == TOPIC else None)
        if denied is not None:
            result["error_code"] = denied
            result["error_message"] = "this user may not describe the topic"
        elif resource.resource_type == TOPIC:
            cfg = await session.ctx.read(_topic, session.ctx.broker, resource.resource_name)
            if cfg is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"topic {resource.resource_name!r} does not exist"
            else:
                result["configs"] = described(cfg, session.ctx.broker.config, keys, docs)
        elif resource.resource_type == BROKER and not access.permits(
                session, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            result["error_code"] = ErrorCode.cluster_authorization_failed
            result["error_message"] = "this user may not describe the cluster"
        elif resource.resource_type == BROKER:
            result["configs"] = _broker_configs(session, keys)
        else:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = "FMQ describes the configs of topics and brokers only"
        results.append(result)
    return {"throttle_time": 0, "results": results}


def _topic(broker: Broker, name: str) -> Any:
    try:
        check_topic_settings(name, None, None, None, None)
    except FMQError:
        return None
    return broker.topics.get(name)


def _broker_configs(session: KafkaSession, keys: tuple[str, ...] | None) -> list[dict]:
    config = session.ctx.broker.config
    table = [("log.retention.ms", str(config.retention_ms or -1), TYPE_LONG),
             ("log.retention.bytes", str(config.retention_bytes or -1), TYPE_LONG),
             ("message.max.bytes", str(config.max_message_size), TYPE_INT),
             ("num.partitions", str(config.queues_per_topic), TYPE_INT),
             ("auto.create.topics.enable", str(config.auto_create_topics).lower(),
              TYPE_BOOLEAN)]
    return [{"name": name, "value": value, "read_only": True,
             "config_source": DEFAULT_CONFIG, "is_default": False, "is_sensitive": False,
             "synonyms": [], "config_type": kind, "documentation": None}
            for name, value, kind in table if keys is None or name in keys]


@kafka_api(44, "IncrementalAlterConfigs", 0, 1, access=on_topics(Operation.ALTER))
async def incremental_alter_configs(session: KafkaSession, request: Any, version: int
                                    ) -> dict:
    responses = []
    for resource in request.resources:
        code, message = await _alter(session, resource, request.validate_only)
        responses.append({"error_code": code, "error_message": message,
                          "resource_type": resource.resource_type,
                          "resource_name": resource.resource_name})
    return {"throttle_time": 0, "responses": responses}


async def _alter(session: KafkaSession, resource: Any, validate_only: bool
                 ) -> tuple[ErrorCode, str | None]:
    if resource.resource_type != TOPIC:
        return (ErrorCode.invalid_request, "FMQ alters topic configs only; a broker's "
                "settings are its configuration file's")
    denied = access.refusal(session, resource.resource_name)
    if denied is not None:
        return denied, "this user may not alter the topic (FMQ's alter)"
    changes: dict[str, int] = {}
    try:
        for config in resource.configs:
            if config.config_operation == SET:
                field, value = parse_setting(config.name, config.value)
            elif config.config_operation == DELETE:
                field, value = parse_setting(config.name, "1")[0], DEFAULT
            else:
                raise ConfigRefused(f"config {config.name}: only SET and DELETE apply to "
                                    f"FMQ's settings (they are numbers, not lists)")
            if field in changes:
                raise ConfigRefused(f"config {config.name} is given twice")
            changes[field] = value
    except ConfigRefused as exc:
        return ErrorCode.invalid_config, str(exc)
    refused = controller_refusal(session, Op.TOPIC_ALTER)
    if refused is not None:
        return refused
    ctx = session.ctx
    try:
        if validate_only:
            await ctx.read(_validate, ctx.broker, resource.resource_name, changes)
        elif changes:
            await ctx.write(partial(ctx.broker.topics.alter, resource.resource_name,
                                    **changes))
    except FMQError as exc:
        code = error_code(exc)
        if code == ErrorCode.invalid_record:  # InvalidArgument: a value out of range
            code = ErrorCode.invalid_config
        return code, str(exc)
    return ErrorCode.none, None


def _validate(broker: Broker, name: str, changes: dict[str, int]) -> None:
    """The checks of an alter that changes nothing (the broker's upper limits are checked
    by the alter itself)."""
    if _topic(broker, name) is None:
        raise UnknownTopic(name)
    given = {k: (None if v == DEFAULT else v) for k, v in changes.items()}
    check_topic_settings(name, None, given.get("retention_ms"), given.get("retention_bytes"),
                         given.get("max_message_size"))
