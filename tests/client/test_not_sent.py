"""A request on a connection that had already broken fails with NotSent (a ConnectionLost
whose request never left the client), and a routing producer may then send it to another
broker group: only a request that may have been stored is kept where it went."""

from __future__ import annotations

import asyncio
import time

import pytest

from fmq.client.acquire import link_of
from fmq.client.aio_connection import AsyncConnection
from fmq.client.cluster.router import PlacedRequest, Router
from fmq.client.connection import Connection
from fmq.errors import ConnectionLost, NotSent
from fmq.protocol import Op


def _wait_closed(conn, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not conn.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert conn.closed, "the client did not notice the server's death"


def test_a_request_on_a_connection_broken_before_it_fails_with_not_sent(start_server):
    srv = start_server()
    host, port = srv.address.split(":")
    conn = Connection((host, int(port)))
    try:
        assert "server_version" in conn.request(Op.PING, {}, 10)
        srv.kill()
        _wait_closed(conn)
        with pytest.raises(NotSent, match="before the request was sent") as caught:
            conn.request(Op.PING, {}, 10)
        assert isinstance(caught.value, ConnectionLost) and caught.value.retriable
    finally:
        conn.close()


def test_the_asyncio_connection_says_not_sent_too(start_server):
    srv = start_server()
    host, port = srv.address.split(":")

    async def run() -> None:
        conn = await AsyncConnection.open((host, int(port)), 5.0)
        try:
            await conn.request(Op.PING, {}, 10)
            srv.kill()
            for _ in range(1000):
                if conn.closed:
                    break
                await asyncio.sleep(0.01)
            with pytest.raises(NotSent):
                await conn.request(Op.PING, {}, 10)
        finally:
            await conn.close()

    asyncio.run(run())


def test_only_a_request_that_may_be_stored_stays_in_its_group():
    there = PlacedRequest(link_of("g1"), {}, "g1", ["t"])
    assert Router.pin(ConnectionLost("lost in flight"), there, None) is there
    assert Router.pin(NotSent("never written"), there, None) is None
