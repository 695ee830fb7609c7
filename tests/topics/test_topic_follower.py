"""Followers get topic settings by log shipping: their index derives the TOPIC records
(a delete's floors included) and they answer describe and list as the primary does."""

from __future__ import annotations

import pytest

import fmq
from fmq.client import Client, Producer
from fmq.errors import NotPrimary
from tests.replication.cluster import SMALL, wait_caught_up
from tests.replication.conftest import node  # noqa: F401
from tests.server.harness import wait_until

pytestmark = pytest.mark.timeout(300)


def test_a_follower_derives_the_topic_table_from_the_shipped_log(node):  # noqa: F811
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    with Client(primary.address) as admin, Producer(primary.address) as p:
        admin.create_topic("orders", queues=6, retention_ms=86_400_000, max_message_size=512)
        admin.create_topic("doomed", queues=1)
        p.send_batch([fmq.Message("doomed", b"m%d" % i) for i in range(5)])
        admin.delete_topic("doomed")
        p.send("orders", b"x", key="k")
        admin.alter_topic("orders", queues=8)  # answered once indexed: the send is too
        on_primary = (admin.list_topics(), admin.describe_topic("orders"))
    wait_caught_up(follower, primary)
    with Client(follower.address, node="any") as reader:
        seen = []

        def same() -> bool:
            seen[:] = [(reader.list_topics(), reader.describe_topic("orders"))]
            return seen[0] == on_primary

        try:
            wait_until(same, what="the follower's topic table")
        except AssertionError:
            raise AssertionError(f"{seen} != {on_primary}") from None
        with pytest.raises(NotPrimary):
            reader.create_topic("elsewhere")
        rng = reader.call(fmq.protocol.Op.QUEUE_RANGE, {"topic": "doomed", "queue_id": 0})
        assert (rng["min_offset"], rng["next_offset"]) == (5, 5)  # nothing readable
