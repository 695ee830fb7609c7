"""ApiVersions (key 18): what this server implements, exactly the API table."""

from __future__ import annotations

from typing import Any

from fmq.server.kafka.apis import BEFORE_LOGIN, kafka_api, supported_apis
from fmq.server.kafka.session import KafkaSession


@kafka_api(18, "ApiVersions", 0, 3, access=BEFORE_LOGIN)
async def api_versions(session: KafkaSession, request: Any, version: int) -> dict:
    return {"error_code": 0, "api_keys": supported_apis(), "throttle_time": 0}
