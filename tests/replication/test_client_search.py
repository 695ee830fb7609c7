"""How a search for the primary ends when it finds none (real servers on 127.0.0.1), the
same for the threaded and the asyncio client, which share :class:`fmq.client.discovery.
Finder`'s decisions: PrimaryNotFound, naming what the nodes said, when nodes answer but
none is the primary; ConnectionLost when no node answers at all."""

from __future__ import annotations

import asyncio

import pytest

from fmq.client import Producer
from fmq.client.aio import AsyncProducer
from fmq.errors import ConnectionLost, FMQError, PrimaryNotFound
from tests.server.harness import free_port

from .cluster import SMALL

#: Gives up after a few rounds, each request once.
QUICK = {"request_timeout": 0.5, "retries": 0, "backoff_initial": 0.02, "backoff_max": 0.1}


def send_threaded(servers: str) -> FMQError:
    with Producer(servers, **QUICK) as p, pytest.raises(FMQError) as raised:
        p.send("t", b"x", queue_id=0)
    return raised.value


def send_asyncio(servers: str) -> FMQError:
    async def run() -> FMQError:
        async with AsyncProducer(servers, **QUICK) as p:
            with pytest.raises(FMQError) as raised:
                await p.send("t", b"x", queue_id=0)
            return raised.value

    return asyncio.run(run())


@pytest.mark.parametrize("send", [send_threaded, send_asyncio])
def test_only_a_follower_of_a_dead_primary_answers_primary_not_found(node, send):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    primary.kill()
    dead = f"127.0.0.1:{free_port()}"
    err = send(f"{dead},{follower.address}")
    assert isinstance(err, PrimaryNotFound) and err.retriable
    # What the follower said, and why its primary was no use.
    assert f"{follower.address} is a follower of {primary.address}" in str(err)
    assert f"cannot connect to FMQ server {primary.address}" in str(err)
    assert f"no primary among {dead}, {follower.address} (" in str(err)


@pytest.mark.parametrize("send", [send_threaded, send_asyncio])
def test_no_server_answers_connection_lost(send):
    dead = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    err = send(",".join(dead))
    assert isinstance(err, ConnectionLost) and not isinstance(err, PrimaryNotFound)
    assert all(address in str(err) for address in dead)
