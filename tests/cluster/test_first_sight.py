"""A cluster primary's first writes to a topic it has never seen wait for one read of the
routes (fmq/server/cluster/first_sight.py), and then run in the order they came: pipelined sends on
one connection keep their order in the queue."""

from __future__ import annotations

import os

import pytest

from fmq.client import Client
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.etcdkit import ETCD

from .kit import two_groups

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

PIPELINED = 40


def _pipelined_offsets(address: str, topic: str, queue_id: int) -> list[int]:
    with Client(address, retries=0, request_timeout=20) as c:
        futures = [c.submit(Op.SEND, {"message": message_to_wire(
            Message(topic, str(i).encode(), queue_id=queue_id))}) for i in range(PIPELINED)]
        return [f.result(30)["result"]["queue_offset"] for f in futures]


def test_first_writes_held_for_the_routes_keep_their_order(tmp_path):
    with two_groups(tmp_path) as (_store, nodes, _etcd):
        # No route and no topic: the first writes wait for the read, which finds no
        # route; the topic keeps a single broker's rules.
        assert _pipelined_offsets(nodes["g1"].address, "plain", 0) == list(range(PIPELINED))
