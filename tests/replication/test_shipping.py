"""Log shipping between real server processes: byte-identical copies, the same index,
catching up after a kill and from an empty follower, and a follower refusing writes."""

from __future__ import annotations

import threading
import time

import pytest

from fmq import Broker
from fmq.client import Producer, TransactionProducer
from fmq.config import BrokerConfig
from fmq.errors import NotPrimary
from fmq.message import Message
from fmq.protocol import Op
from tests.faults.invariants import check_index_matches_rebuild

from .cluster import SMALL, assert_identical_up_to, pull_all, status, wait_caught_up

QUEUES = 4


def produce(address: str, producers: int, per_producer: int, tag: str) -> None:
    """``producers`` threads sending, every fourth round a committed and a rolled-back
    transaction too."""
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            with Producer(address) as p, TransactionProducer(address, f"g{n}", None, feedback=False) as tp:
                for i in range(per_producer):
                    p.send("t", f"{tag}-{n}-{i}".encode() * 100, key=f"k{i % 7}")
                    if i % 4 == 0:
                        tx = tp.prepare([Message("t", f"{tag}-tx-{n}-{i}".encode())])
                        tp.commit(tx)
                        tx = tp.prepare([Message("t", b"never")])
                        tp.rollback(tx)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]


def test_follower_copies_byte_identical_log_and_index(node):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    produce(primary.address, 16, 40, "a")
    end = wait_caught_up(follower, primary)
    assert end > 3 * SMALL["segment_size"]  # several segments, so FILLERs were shipped
    assert_identical_up_to(primary, follower, end)
    # The follower indexed what it copied: every pull answers as on the primary.
    assert pull_all(follower, "t", QUEUES) == pull_all(primary, "t", QUEUES)
    st = status(primary)
    assert st["role"] == "primary" and st["in_sync"] == [f"127.0.0.1:{follower.port}"]
    assert status(follower)["role"] == "follower"


def test_follower_refuses_writes_naming_the_primary(node):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    # node="any": talk to the follower itself (a producer would go on to the primary)
    with Producer(follower.address, retries=0, node="any") as p, \
            pytest.raises(NotPrimary) as info:
        p.send("t", b"x")
    assert info.value.primary == primary.address and info.value.retriable


def test_timers_and_offsets_reach_the_follower_from_the_primary_only(node):
    """Scheduled messages are delivered by the primary's timer service and consumer offsets
    are OFFSET records: the follower copies both, writes neither, refuses both."""
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    with Producer(primary.address, retries=0) as p:
        for i in range(5):
            p.send("later", f"due-{i}".encode(), queue_id=0, delay=0.2 + 0.05 * i)
        p.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "later", "queue_id": 0,
                                  "next_offset": 0})
    deadline = time.monotonic() + 30
    while len(pull_all(primary, "later", 1)[0]) < 5:  # the primary delivered every timer
        assert time.monotonic() < deadline, "the timers were not delivered"
        time.sleep(0.05)
    end = wait_caught_up(follower, primary)
    assert_identical_up_to(primary, follower, end)
    assert pull_all(follower, "later", 1) == pull_all(primary, "later", 1)
    # node="any": talk to the follower itself; after a NotPrimary a client moves on to the
    # primary, so each refusal gets a client of its own.
    with Producer(follower.address, retries=0, node="any") as f:
        assert f.call(Op.FETCH_OFFSET, {"group": "cg", "topic": "later",
                                        "queue_id": 0})["offset"] == 0
        with pytest.raises(NotPrimary):
            f.send("later", b"x", delay=1)
    with Producer(follower.address, retries=0, node="any") as f, pytest.raises(NotPrimary):
        f.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "later", "queue_id": 0,
                                  "next_offset": 1})
    assert status(follower)["durable_end"] == end  # the follower wrote nothing of its own


def test_killed_follower_catches_up_and_empty_follower_starts_from_zero(node, tmp_path):
    primary = node("primary", SMALL)
    produce(primary.address, 4, 60, "before")  # data before any follower exists
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_caught_up(follower, primary)
    stop = threading.Event()

    def kill_follower_midway() -> None:
        stop.wait(0.3)
        follower.kill()

    killer = threading.Thread(target=kill_follower_midway)
    killer.start()
    produce(primary.address, 8, 40, "during")
    killer.join()
    follower.start()  # recovery cuts any torn tail; the copy resumes from its durable end
    produce(primary.address, 4, 20, "after")
    end = wait_caught_up(follower, primary)
    assert_identical_up_to(primary, follower, end)
    assert pull_all(follower, "t", QUEUES) == pull_all(primary, "t", QUEUES)
    # Stopped, both hold the same index and open transactions, and the follower's index
    # is the one a rebuild from its log gives (the fault suite's I6).
    assert primary.stop() == 0 and follower.stop() == 0
    config = BrokerConfig(**{k: v for k, v in SMALL.items()})
    with Broker.open(primary.data_dir, config) as b:
        index, open_txs = b._index.dump(), sorted(b._tx.open)
    copy = Broker.open(follower.data_dir, config.replace(follow=primary.address))
    assert sorted(copy._tx.open) == open_txs
    assert check_index_matches_rebuild(copy, follower.data_dir, config, str(tmp_path)) == index


def test_follower_reconnects_after_the_primary_restarts(node):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    produce(primary.address, 4, 10, "first")
    wait_caught_up(follower, primary)
    primary.kill()  # SIGKILL: its recovery keeps everything the follower already has
    primary.start()
    produce(primary.address, 4, 10, "second")
    assert primary.stop() == 0
    primary.start()
    produce(primary.address, 4, 10, "third")
    end = wait_caught_up(follower, primary)
    assert_identical_up_to(primary, follower, end)
    assert pull_all(follower, "t", QUEUES) == pull_all(primary, "t", QUEUES)
    assert "retrying" in follower.log()
