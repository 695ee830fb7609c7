"""What the Kafka door counts for STATS (``kafka``) and the metrics (docs/operations.md):
its open connections and the requests it answered, by API name (an API key it does not
serve counts as ``unsupported``). Event-loop thread only, like the server's own counters."""

from __future__ import annotations

from collections import Counter
from typing import Any

#: The name an API key outside the table is counted under.
UNSUPPORTED = "unsupported"


class KafkaCounters:
    def __init__(self) -> None:
        self.connections = 0
        self.requests: Counter[str] = Counter()

    def request(self, api_name: str) -> None:
        self.requests[api_name] += 1

    def describe(self) -> dict[str, Any]:
        return {"connections": self.connections, "requests_by_api": dict(self.requests)}
