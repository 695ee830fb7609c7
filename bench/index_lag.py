"""Index lag as a client sees it: how long after a send is acknowledged (durable) the
message becomes consumable. A probe thread sends one small message at a time to a queue of
its own topic and polls QUEUE_RANGE until that queue's next offset passes it; under load its
messages wait behind everyone else's in the log and in the dispatcher."""

from __future__ import annotations

import statistics
import threading
import time

from fmq.client import Client
from fmq.protocol import Op

POLL_S = 0.0005


class IndexLagProbe:
    def __init__(self, address: str, topic: str = "index-lag-probe") -> None:
        self.address = address
        self.topic = topic
        self.samples_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> IndexLagProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        msg = {"topic": self.topic, "body": b"probe", "key": None, "tags": None,
               "properties": {}, "queue_id": 0}
        with Client(self.address, request_timeout=60) as c:
            while not self._stop.is_set():
                qoff = c.call(Op.SEND, {"message": msg})["result"]["queue_offset"]
                acked = time.perf_counter()
                while c.call(Op.QUEUE_RANGE, {"topic": self.topic,
                                              "queue_id": 0})["next_offset"] <= qoff:
                    time.sleep(POLL_S)
                self.samples_ms.append((time.perf_counter() - acked) * 1000)
                time.sleep(0.01)

    def p99_ms(self) -> float | None:
        if len(self.samples_ms) < 2:
            return None
        return statistics.quantiles(self.samples_ms, n=100, method="inclusive")[98]
