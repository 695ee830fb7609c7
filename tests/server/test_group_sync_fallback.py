"""A consumer meeting a server without GROUP_SYNC (older than it): the server's answer is
ProtocolError "unknown opcode", and the consumer heart-beats with GROUP_HEARTBEAT from then
on, reading and sharing the group's queues as before (docs/protocol.md)."""

from __future__ import annotations

import struct

from fmq.client import Consumer, Producer
from fmq.errors import ProtocolError
from fmq.protocol import Op
from fmq.protocol.frame import HEADER, encode_error
from tests.frame_proxy import FrameProxy

from .conftest import FAST
from .harness import wait_until

_PREFIXED = struct.Struct(">I" + HEADER.format.lstrip(">"))


class NoSyncProxy(FrameProxy):
    """Answers every GROUP_SYNC as a server that does not know it answers an unknown opcode
    (the real server's words), and forwards everything else."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.refused = 0

    def answer(self, frame: bytes) -> bytes | None:
        _length, _version, opcode, _flags, request_id = _PREFIXED.unpack_from(frame)
        if opcode != Op.GROUP_SYNC:
            return frame
        self.refused += 1
        return encode_error(opcode, request_id, ProtocolError(
            f"unknown opcode {opcode}; this server knows [1, 2, 3]"))


def test_a_consumer_heart_beats_with_group_heartbeat_where_group_sync_is_unknown(
        start_server):
    srv = start_server(FAST)
    proxy = NoSyncProxy(srv.address)
    a = b = None
    try:
        a = Consumer(proxy.address, "old", "oldt")
        got: list = []
        wait_until(lambda: len(a.assignment) == 4, 10, "a to read every queue",
                   tick=lambda: got.extend(a.poll(0.05)))
        b = Consumer(proxy.address, "old", "oldt")
        # a's GROUP_HEARTBEAT releases what it was told to drop: the queues split
        wait_until(lambda: len(a.assignment) == 2 and len(b.assignment) == 2, 15,
                   "the queues to split over a and b",
                   tick=lambda: (got.extend(a.poll(0.05)), got.extend(b.poll(0.05))))
        assert set(a.assignment).isdisjoint(b.assignment)
        assert proxy.refused == 2  # each consumer asked once, then heart-beat
        with Producer(srv.address) as p:
            sent = {p.send("oldt", f"m{i}".encode()).queue_id for i in range(20)}
        wait_until(lambda: len(got) >= 20, 15, "both to read what was sent",
                   tick=lambda: (got.extend(a.poll(0.05)), got.extend(b.poll(0.05))))
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20))
        assert {m.queue_id for m in got} == sent
        assert proxy.refused == 2
    finally:
        for c in (a, b):
            if c is not None:
                c.close()
        proxy.close()
