"""A batch sent again must still lie inside the server's dedup window: a real server with a
small ``dedup_window_messages`` behind a proxy that swallows the answer to the first
SEND_BATCH (stored, never acknowledged), while later batches keep going out. The batch
that timed out is sent again; the server must be able to judge it (answer it from the
window) rather than refuse it with OutOfOrderSequence."""

from __future__ import annotations

import struct
import threading
from collections import Counter

from fmq.client import Client, Producer
from fmq.protocol import Op
from tests.frame_proxy import FrameProxy

_HEAD = struct.Struct(">IBBHQ")  # length, version, opcode, flags, request id
WINDOW = 50


class FirstBatchAnswerDrop(FrameProxy):
    def __init__(self, upstream: str) -> None:
        self.dropped = threading.Event()
        super().__init__(upstream)

    def answer(self, frame: bytes) -> bytes | None:
        if _HEAD.unpack_from(frame)[2] == Op.SEND_BATCH and not self.dropped.is_set():
            self.dropped.set()
            return None  # stored on the server; the client never learns it
        return frame


def stored(address: str, topic: str) -> Counter:
    got: Counter = Counter()
    with Client(address) as c:
        for q in range(4):
            offset = 0
            while True:
                ans = c.call(Op.PULL, {"topic": topic, "queue_id": q, "offset": offset,
                                       "max_messages": 1000, "wait_ms": 0})
                if not ans["messages"]:
                    break
                offset = ans["next_offset"]
                got.update(bytes(m["body"]) for m in ans["messages"])
    return got


def test_a_batch_sent_again_is_judged_by_the_window_not_refused(start_server):
    server = start_server({"dedup_window_messages": WINDOW})
    proxy = FirstBatchAnswerDrop(server.address)
    try:
        with Producer(proxy.address, linger_ms=1, max_batch_messages=10, max_in_flight=16,
                      request_timeout=1.5, dedup_window_messages=WINDOW) as p:
            futures = [p.send_async("t", f"m{i}".encode()) for i in range(400)]
            p.flush(60)
            errors = [f.exception() for f in futures if f.exception() is not None]
        assert proxy.dropped.is_set()
        assert not errors, f"{len(errors)} sends failed, the first: {errors[0]!r}"
        assert stored(server.address, "t") == Counter(f"m{i}".encode() for i in range(400))
    finally:
        proxy.close()
