"""During an outage the sends queued with ``send_async`` do not each try to read their
topic's route: after one read failed, the topic's route is not asked for again for
``backoff_max`` seconds (``RouteTable.unreadable_for``), in the threaded and the asyncio
producer alike. The "server" here accepts every connection and closes it at once, and
counts them."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from fmq.client import Producer
from fmq.client.aio import AsyncProducer
from fmq.client.cluster.route_table import RouteTable

SENDS = 30


class ClosingListener:
    """A TCP listener on 127.0.0.1 that closes every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener():
    server = ClosingListener()
    yield server
    server.close()


def test_the_threaded_producer_asks_an_unreadable_route_once_per_back_off(listener):
    with Producer(listener.address, retries=0, backoff_max=30, delivery_timeout=1,
                  connect_timeout=1) as p:
        for _ in range(SENDS):
            p.send_async("t", b"x")
        connections = listener.accepted
    assert connections < SENDS // 2, connections


def test_the_asyncio_producer_asks_an_unreadable_route_once_per_back_off(listener):
    async def run() -> int:
        p = AsyncProducer(listener.address, retries=0, backoff_max=30, delivery_timeout=1,
                          connect_timeout=1)
        futures = []
        try:
            for _ in range(SENDS):
                futures.append(await p.send_async("t", b"x"))
            return listener.accepted
        finally:
            try:
                await p.close(timeout=5)
            except Exception:  # noqa: BLE001 - the sends fail: nothing listens for real
                pass
            await asyncio.gather(*futures, return_exceptions=True)

    connections = asyncio.run(run())
    assert connections < SENDS // 2, connections


def test_the_table_remembers_an_unreadable_route_for_the_back_off():
    now = [100.0]
    table = RouteTable(clock=lambda: now[0])
    assert not table.unreadable_for("t", 2)
    table.read_failed("t")
    assert table.unreadable_for("t", 2)
    now[0] += 2.5
    assert not table.unreadable_for("t", 2)
    table.read_failed("t")
    table.read_worked("t")
    assert not table.unreadable_for("t", 2)
