"""What a benchmark run asks the server outside the measured load, over one ordinary client
connection: which node of a broker group is the primary (found as the SDK finds it), its
queues per topic, its process CPU time (STATS), the index lag, and the consumable range of
each queue of the topic (for the count check and for consumers)."""

from __future__ import annotations

import json
import time

from fmq.client import Client
from fmq.client.auth import Credentials
from fmq.client.discovery import PRIMARY, show
from fmq.client.tls import TLSOptions
from fmq.protocol import Op

#: How long the count check waits for the index to catch up with the durable log.
INDEX_CATCH_UP_S = 60.0


class ServerProbe:
    def __init__(self, address: str, tls: TLSOptions | None = None,
                 credentials: Credentials | None = None) -> None:
        login = {} if credentials is None else {"user": credentials.user,
                                                "password": credentials.password}
        # Several addresses (a broker group): the load goes to the primary, found with HELLO.
        self._client = Client(address, retries=2, request_timeout=30.0, tls=tls,
                              node=PRIMARY, **login)
        self.queues_per_topic: int = self._client.ping()["queues_per_topic"]
        primary = self._client.finder.primary or self._client.servers[0]
        #: The primary's address ("host:port"), where the load processes connect.
        self.primary: str = show(primary)

    def stats(self) -> dict:
        return json.loads(self._client.call(Op.STATS, {})["json"])

    def process_cpu_s(self) -> float | None:
        """The server process's CPU seconds, when the server reports them."""
        return self.stats().get("process_cpu_s")

    def ranges(self, topic: str) -> list[tuple[int, int, int]]:
        """(queue id, min offset, next offset) of every queue of ``topic``."""
        out = []
        for qid in range(self.queues_per_topic):
            r = self._client.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": qid})
            out.append((qid, r["min_offset"], r["next_offset"]))
        return out

    def stored(self, topic: str) -> int:
        """How many messages the queues of ``topic`` have received (next offsets added)."""
        return sum(nxt for _, _, nxt in self.ranges(topic))

    def wait_indexed(self) -> bool:
        """Wait until everything durable is consumable (index lag 0); False on time-out."""
        deadline = time.monotonic() + INDEX_CATCH_UP_S
        while time.monotonic() < deadline:
            if self.stats().get("index_lag", 0) == 0:
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._client.close()
