"""DescribeCluster (key 60): the brokers Metadata names, and the controller
(:mod:`.controller`), as Kafka's AdminClient asks them (``describe_cluster``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.server.kafka.apis import LOGGED_IN, kafka_api
from fmq.server.kafka.controller import controller_id
from fmq.server.kafka.metadata import CLUSTER_ID, NO_OPERATIONS, brokers
from fmq.server.kafka.session import KafkaSession

#: DescribeCluster's endpoint_type for brokers (1); controllers (2) are not FMQ's.
BROKERS = 1


# Any logged-in user: the brokers it names are those Metadata names to her.
@kafka_api(60, "DescribeCluster", 0, 1, access=LOGGED_IN)
async def describe_cluster(session: KafkaSession, request: Any, version: int) -> dict:
    answer = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
              "endpoint_type": BROKERS, "cluster_id": CLUSTER_ID, "controller_id": controller_id(session),
              "brokers": [], "cluster_authorized_operations": NO_OPERATIONS}
    if getattr(request, "endpoint_type", BROKERS) != BROKERS:
        answer["error_code"] = ErrorCode.unsupported_endpoint_type
        answer["error_message"] = "FMQ's brokers are the only endpoints it describes"
        return answer
    answer["brokers"] = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                          "rack": None} for b in brokers(session)]
    return answer
