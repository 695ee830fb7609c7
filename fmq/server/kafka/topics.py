"""CreateTopics (key 19) and DeleteTopics (key 20) on FMQ's topic administration
(:class:`fmq.engine.topics.Topics`, as ``fmq topic`` does).

A topic's partitions are its queues (-1: the broker's ``queues_per_topic``). The replication
factor and replica assignments are not FMQ's to set per topic (replication is the broker
group's), so they are accepted and ignored. Of the topic configs, the three FMQ keeps per
topic (``retention.ms``, ``retention.bytes``, ``max.message.bytes``: :mod:`.topic_configs`)
are the new topic's settings; any other is refused with INVALID_CONFIG rather than ignored.
A delete is refused while a consumer group has not read all of the topic (FMQ's rule):
POLICY_VIOLATION, with the reason.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.errors import FMQError, InvalidArgument, TopicExists
from fmq.message import is_internal_topic
from fmq.protocol import Op
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.controller import controller_refusal
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.topic_configs import ConfigRefused, settings_of
from fmq.topic_config import check_topic_settings


@kafka_api(19, "CreateTopics", 2, 7, access=on_topics(Operation.ALTER))
async def create_topics(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    results = []
    for topic in request.topics:
        result = {"name": topic.name, "topic_id": None, "error_code": ErrorCode.none,
                  "error_message": None, "num_partitions": -1, "replication_factor": -1,
                  "configs": [], "topic_config_error_code": 0}
        queues = None if topic.num_partitions == -1 else topic.num_partitions
        denied = access.refusal(session, topic.name)
        if denied is not None:
            result["error_code"] = denied
            result["error_message"] = "this user may not alter the topic (FMQ's alter)"
            results.append(result)
            continue
        if topic.assignments and queues is None:
            queues = len(topic.assignments)
        try:
            # The name and the count first: past them, a refused value is a config's.
            _check_name(topic.name, queues)
            settings = settings_of([(c.name, c.value) for c in topic.configs or ()])
            refused = controller_refusal(session, Op.TOPIC_CREATE)
            if refused is not None:
                result["error_code"], result["error_message"] = refused
                results.append(result)
                continue
            if request.validate_only:
                await ctx.read(_validate, ctx.broker, topic.name, queues, settings)
                cfg_queues = queues or ctx.broker.config.queues_per_topic
            else:
                cfg = await ctx.write(partial(ctx.broker.topics.create, topic.name, queues,
                                              **settings))
                cfg_queues = cfg.queues
            result["num_partitions"] = cfg_queues
            result["replication_factor"] = 1
        except _BadName as exc:
            result["error_code"] = ErrorCode.invalid_topic_exception
            result["error_message"] = str(exc)
        except ConfigRefused as exc:
            result["error_code"], result["error_message"] = ErrorCode.invalid_config, str(exc)
        except FMQError as exc:
            code = error_code(exc)
            if code == ErrorCode.invalid_record:  # InvalidArgument: past the name, a setting
                code = ErrorCode.invalid_config
            result["error_code"], result["error_message"] = code, str(exc)
        results.append(result)
    return {"throttle_time": 0, "topics": results}


class _BadName(ValueError):
    """A topic name or partition count FMQ refuses (INVALID_TOPIC_EXCEPTION)."""


def _check_name(name: str, queues: int | None) -> None:
    try:
        check_topic_settings(name, queues, None, None, None)
    except InvalidArgument as exc:
        raise _BadName(str(exc)) from None
    if is_internal_topic(name):
        raise _BadName(f"topic {name!r} is one of FMQ's own (names starting with '%'); "
                       f"pick another name")


def _validate(broker: Broker, name: str, queues: int | None, settings: dict[str, int]
              ) -> None:
    check_topic_settings(name, queues, settings.get("retention_ms"),
                         settings.get("retention_bytes"), settings.get("max_message_size"))
    if broker.topics.get(name) is not None:
        raise TopicExists(name)


@kafka_api(20, "DeleteTopics", 1, 6, access=on_topics(Operation.ALTER))
async def delete_topics(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    names = ([t.name for t in request.topics] if version >= 6 else list(request.topic_names))
    results = []
    for name in names:
        result = {"name": name, "topic_id": None, "error_code": ErrorCode.none,
                  "error_message": None}
        denied = None if name is None else access.refusal(session, name)
        if name is None:
            result["error_code"] = ErrorCode.unknown_topic_id
        elif denied is not None:
            result["error_code"] = denied
            result["error_message"] = "this user may not alter the topic (FMQ's alter)"
        else:
            refused = controller_refusal(session, Op.TOPIC_DELETE)
            if refused is not None:
                result["error_code"], result["error_message"] = refused
                results.append(result)
                continue
            try:
                await ctx.write(ctx.broker.topics.delete, name, False)
            except FMQError as exc:
                result["error_code"], result["error_message"] = error_code(exc), str(exc)
        results.append(result)
    return {"throttle_time": 0, "responses": results}
