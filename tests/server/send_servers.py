"""The in-process server the SEND, SEND_BATCH and transaction tests share, whose broker
refuses near every check's edge (its ``max_message_size``, a topic of a smaller one of its
own, a deleted topic, at most two messages a SEND_BATCH), and what such a broker stored,
to compare two runs' messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fmq import Broker, BrokerConfig
from fmq.server.server import Server
from tests.server.in_process_servers import InProcessServer

T = TypeVar("T")

MAX_SIZE = 2048  # the broker's max_message_size
SMALL_TOPIC = "small"  # a topic whose own max_message_size is 100
GONE_TOPIC = "gone"  # a deleted topic


def sends_server(data_dir: str, **broker_config: object) -> InProcessServer:
    """A running server (asyncio's loop) over a new broker in ``data_dir`` with the limits
    above; ``broker_config``: more of the broker's settings."""
    broker = Broker.open(data_dir, BrokerConfig(max_message_size=MAX_SIZE, **broker_config))
    broker.topics.create(SMALL_TOPIC, max_message_size=100)
    broker.topics.create(GONE_TOPIC)
    broker.topics.delete(GONE_TOPIC)
    return InProcessServer(broker, max_batch_messages=2)


def stored_messages(data_dir: str) -> list[tuple]:
    """Every message the broker in ``data_dir`` (stopped) stored in the topics the tests
    send to, queue by queue: (topic, queue id, queue offset, log offset, body, key, tags,
    properties)."""
    with Broker.open(data_dir, BrokerConfig(max_message_size=MAX_SIZE)) as broker:
        broker.wait_indexed(30)
        stored = []
        for topic in ("t", "orders.eu", SMALL_TOPIC, "a" * 127):
            for queue in range(4):
                for m in broker.reads.pull(topic, queue, 0, 10_000):
                    stored.append((m.topic, m.queue_id, m.queue_offset, m.offset, m.body,
                                   m.key, m.tags, m.properties))
        return stored


def answers_and_stored(data_dir: str, drive: Callable[[Server], T],
                       **broker_config: object) -> tuple[T, list[tuple]]:
    """What ``drive`` got from a fresh :func:`sends_server` in ``data_dir`` (given its
    ``Server``), and the messages it stored (read once it stopped)."""
    with sends_server(data_dir, **broker_config) as srv:
        answers = drive(srv.server)
    return answers, stored_messages(data_dir)
