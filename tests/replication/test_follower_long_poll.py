"""A long poll on a follower is woken by copied data: the follower's index applying copied
messages wakes the pulls of their queues, as a send wakes them on the primary."""

from __future__ import annotations

import pytest

from fmq.client import Client, Producer
from fmq.protocol import Op
from tests.server.harness import server_stats, wait_until

from .cluster import SMALL, wait_caught_up

#: Far longer than the copy takes (and under the server's max_wait_ms, 30 s): only a
#: wake-up ends the poll early.
LONG_WAIT_MS = 20_000


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_a_long_poll_on_a_follower_returns_the_message_copied_meanwhile(node, writer):
    primary = node("primary", {**SMALL, "index_writer": writer})
    follower = node("follower", {**SMALL, "follow": primary.address, "index_writer": writer})
    with Producer(primary.address, retries=0) as p:
        p.send("lp", b"before", queue_id=1)
        wait_caught_up(follower, primary)
        before = server_stats(follower.address)
        with Client(follower.address, retries=0, request_timeout=60) as c:
            waiting = c.submit(Op.PULL, {"topic": "lp", "queue_id": 1, "offset": 1,
                                         "max_messages": 10, "wait_ms": LONG_WAIT_MS})
            other = c.submit(Op.PULL, {"topic": "lp", "queue_id": 2, "offset": 0,
                                       "max_messages": 10, "wait_ms": LONG_WAIT_MS})
            wait_until(lambda: server_stats(follower.address)["pulls_waiting"] == 2, 10,
                       "both pulls to wait on the follower")
            p.send("lp", b"copied", queue_id=1)
            got = waiting.result(LONG_WAIT_MS / 1000 - 5)  # before its own deadline
            assert [m["body"] for m in got["messages"]] == [b"copied"]
            after = server_stats(follower.address)
            # The watermark and the index each wake the queue's pulls, and the index may
            # apply the copy after the watermark passed it (with the indexer process one
            # pipe round trip later). Woken first by the watermark, the pull reads on the
            # event loop, which never waits for the index: it finds nothing, and waits
            # again until the index's wake-up (fmq.server.ops.pull_reads).
            most = 2
            woken = after["pull_wakeups"] - before["pull_wakeups"]
            assert 1 <= woken <= most
            assert after["pulls_waiting"] == 1 and not other.done()  # its queue got nothing
            p.send("lp", b"for-2", queue_id=2)
            assert [m["body"] for m in other.result(10)["messages"]] == [b"for-2"]
            assert 1 <= server_stats(follower.address)["pull_wakeups"] - after["pull_wakeups"] \
                <= most
