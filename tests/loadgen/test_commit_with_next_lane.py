"""The load generator's transactions with each COMMIT written with the next PREPARE
(``TxPlan(commit_with_next=True)``), one lane against a real server on 127.0.0.1: what each
write carried, and that the transactions counted are exactly those the broker committed."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from fmq.client import Client
from fmq.loadgen.driver import Lane, LaneTotals
from fmq.loadgen.login import open_protocol
from fmq.loadgen.plans import TxPlan
from fmq.protocol import Op
from tests.server.harness import messages_stored

_HEAD = struct.Struct(">IBBHQ")  # length, version, opcode, flags, request id


def opcodes(data: bytes) -> tuple[int, ...]:
    out, at = [], 0
    while at < len(data):
        length, _version, opcode, _flags, _rid = _HEAD.unpack_from(data, at)
        out.append(opcode)
        at += 4 + length
    return tuple(out)


class RecordedTransport:
    """The lane's transport, recording the opcodes each write carried."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.writes: list[tuple[int, ...]] = []

    def write(self, data: bytes) -> None:
        self.writes.append(opcodes(data))
        self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._transport.close()


def run_lane(address: str, topic: str, window: int, seconds: float
             ) -> tuple[LaneTotals, RecordedTransport]:
    host, port = address.split(":")

    async def run() -> tuple[LaneTotals, RecordedTransport]:
        totals = LaneTotals()
        lane = Lane(TxPlan(topic, 100, "lane-tx", commit_with_next=True), totals, window)
        await open_protocol(host, int(port), lane, None, None)
        recorded = lane._transport = RecordedTransport(lane._transport)
        lane.begin(time.perf_counter_ns() + int(seconds * 1e9))
        await asyncio.wait_for(lane.done, 60)
        assert lane.in_flight == 0
        lane.close()
        return totals, recorded

    return asyncio.run(run())


@pytest.mark.parametrize("window", [1, 3])
def test_each_commit_rides_with_the_next_prepare_and_counts_once_answered(server, window):
    topic = f"lane-{window}"
    totals, recorded = run_lane(server.address, topic, window, 2.0)
    writes = recorded.writes
    # Enough for a middle past the window's first PREPAREs and its last COMMITs (a count,
    # not a rate: a loaded machine ran 12 transactions in one second).
    assert totals.operations > 3 * window and not totals.errors
    # The window's first PREPAREs alone, then a COMMIT before every later PREPARE, and
    # the COMMITs the deadline left without a next PREPARE written without one.
    assert writes[:window] == [(Op.PREPARE,)] * window
    middle = writes[window:len(writes) - window]
    assert middle and set(middle) == {(Op.COMMIT, Op.PREPARE)}
    for tail in writes[-window:]:  # COMMITs answered in one read are written together
        assert tail == (Op.COMMIT, Op.PREPARE) or set(tail) == {Op.COMMIT}
    commits = sum(w.count(Op.COMMIT) for w in writes)
    prepares = sum(w.count(Op.PREPARE) for w in writes)
    assert commits == prepares == totals.operations == totals.messages
    assert messages_stored(server.address, topic) == totals.messages
    with Client(server.address) as c:  # every transaction prepared was committed
        assert c.call(Op.LIST_TX, {})["transactions"] == []
