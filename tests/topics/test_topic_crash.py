"""A topic delete leaves no half-deleted state after a kill -9: killed at each I/O step of
the delete (the crash harness) or a real server killed right after it, the topic is then
either fully there or fully deleted, and the index equals one ``fmq index rebuild`` makes
from the log."""

from __future__ import annotations

import threading
import time

import pytest

import fmq
from fmq.admin.rebuild_index import rebuild_index
from fmq.client import Client, Producer
from fmq.errors import FMQError, UnknownTopic
from tests.crashkit import run_child
from tests.server.conftest import FAST
from tests.workloads.topic_delete_crash import MESSAGES

pytestmark = pytest.mark.timeout(300)

CONFIG = {"segment_size": 1 << 20, "max_message_size": 64 * 1024,
          "checkpoint_interval_ms": 0, "retention_interval_ms": 0}


def topic_state(path: str, messages: int) -> str:
    """"present" (every message readable, sends taken) or "deleted" (none readable, sends
    refused), after checking that nothing in between is the case; and that the index
    equals a rebuild from the log."""
    cfg = fmq.BrokerConfig(**CONFIG)
    with fmq.Broker.open(path, cfg) as b:
        listed = [t["name"] for t in b.topics.list()]
        readable = sum(len(b.reads.pull("orders", q, 0,
                                        1000)) for q in range(b.topics.queue_count("orders")))
        keyed = len(b.reads.messages_by_key("orders", "k1"))
        online = b._index.dump()
    rebuild_index(path, cfg)
    with fmq.Broker.open(path, cfg) as b:
        assert b._index.dump() == online, "the index differs from a rebuild from the log"
    if listed == ["orders"]:
        assert (readable, keyed) == (messages, 1)
        return "present"
    assert listed == [] and (readable, keyed) == (0, 0), (listed, readable, keyed)
    with fmq.Broker.open(path, cfg) as b, pytest.raises(UnknownTopic):
        b.send(fmq.Message("orders", b"late"))
    return "deleted"


#: Where the harness kills the delete, and what the topic must be afterwards: the TOPIC
#: record never written or torn -> still there; in the page cache or durable -> deleted.
STEPS = [
    ({"op": "pwrite", "mode": "before"}, "present"),
    ({"op": "pwrite", "records": 0, "extra": 40}, "present"),
    ({"op": "pwrite", "mode": "after"}, "deleted"),
    ({"op": "fdatasync", "mode": "before"}, "deleted"),
    ({"op": "fdatasync", "mode": "after"}, "deleted"),
]


@pytest.mark.parametrize(("arm", "expected"), STEPS, ids=[
    "before-write", "torn-record", "written-not-synced", "before-fsync", "after-fsync"])
def test_a_delete_killed_at_each_step_is_all_or_nothing(tmp_path, arm, expected):
    path = str(tmp_path / "data")
    result = run_child("topic_delete_crash", path, str(tmp_path / "acks"),
                       config=CONFIG, arm=arm)
    assert result.killed, result.stderr
    acks = [a["op"] for a in result.acks]
    assert acks == ["filled"]
    assert topic_state(path, MESSAGES) == expected


def test_a_server_killed_right_after_a_delete_restarts_consistent(start_server):
    states = []
    for delay in (0.0, 0.002, 0.02, None):  # None: after the delete was answered
        srv = start_server(FAST, name=f"data-{delay}")
        with Client(srv.address) as admin, Producer(srv.address) as p:
            admin.create_topic("orders", queues=2)
            p.send_batch([fmq.Message("orders", b"m%d" % i, key=f"k{i}")
                          for i in range(MESSAGES)])
            answered = threading.Event()

            def delete(admin=admin, answered=answered) -> None:
                try:
                    admin.delete_topic("orders", force=True)
                    answered.set()
                except FMQError:
                    pass  # the kill cut the answer

            worker = threading.Thread(target=delete)
            worker.start()
            if delay is None:
                assert answered.wait(30)
            else:
                time.sleep(delay)
            srv.kill()
            worker.join(30)
        state = topic_state(srv.data_dir, MESSAGES)
        if answered.is_set():
            assert state == "deleted"
        states.append(state)
        srv.start()  # and the server itself opens what the tools saw
        with Client(srv.address) as c:
            assert [t["name"] for t in c.list_topics()] == (["orders"] if state == "present"
                                                            else [])
        srv.kill()
    assert states[-1] == "deleted"
