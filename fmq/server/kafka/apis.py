"""The table of implemented Kafka APIs: each handler registered beside the versions it serves.

ApiVersions advertises exactly this table, and the dispatcher serves nothing else. A handler
gets the connection's :class:`~fmq.server.kafka.session.KafkaSession`, the decoded request
entity and its version, and returns the answer's values as nested dicts (built into the
version's response entity by :func:`fmq.server.kafka.entities.build`), or None when the
request takes no answer (a Produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[[Any, Any, int], Awaitable[dict | None]]


@dataclass(frozen=True)
class KafkaApi:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


API_TABLE: dict[int, KafkaApi] = {}


def kafka_api(key: int, name: str, min_version: int, max_version: int
              ) -> Callable[[Handler], Handler]:
    """Register the decorated handler as API ``key`` for versions min..max."""
    def register(fn: Handler) -> Handler:
        if key in API_TABLE:
            raise RuntimeError(f"Kafka API {key} ({name}) is registered twice")
        API_TABLE[key] = KafkaApi(key, name, min_version, max_version, fn)
        return fn
    return register


def supported_apis() -> list[dict]:
    """The table as ApiVersions answers it, by key."""
    return [{"api_key": api.key, "min_version": api.min_version,
             "max_version": api.max_version} for _, api in sorted(API_TABLE.items())]
