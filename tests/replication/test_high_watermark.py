"""The high watermark: in ``sync`` mode consumers read only what ``min_insync`` followers
hold, so a fail-over never takes back a message a consumer saw, and a consumer group
never skips the acknowledged messages a new primary stores at the same queue offsets.

Real ``fmq server`` processes, SIGKILL, and (for the fail-over) a real etcd.
"""

from __future__ import annotations

import os
import time

import pytest

from fmq.client import Client, Consumer, Producer
from fmq.errors import NotEnoughReplicas, OffsetNotReplicated, ProtocolError
from fmq.protocol import Op, decode_response, encode_error, parse_frame
from tests.etcdkit import ETCD
from tests.frame_proxy import FrameProxy

from .cluster import SMALL, status, wait_caught_up, wait_in_sync
from .failover_kit import GROUP_CONFIG, TOPIC, FailoverGroup

needs_etcd = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


def consume_until(consumer: Consumer, want: set[bytes], seen: list[bytes],
                  timeout: float) -> None:
    """Poll (committing after each batch, as an application does) until every body of
    ``want`` was seen or ``timeout`` passes; everything polled is appended to ``seen``."""
    deadline = time.monotonic() + timeout
    while not want <= set(seen) and time.monotonic() < deadline:
        batch = consumer.poll(0.5)
        seen += [bytes(m.body) for m in batch]
        if batch:
            try:
                consumer.commit()
            except (NotEnoughReplicas, OffsetNotReplicated, ConnectionError):
                pass  # the group's progress is not saved: it reads them again


def refused_sends(address: str, bodies: list[bytes]) -> None:
    """Send each body to queue 0 of ``address`` once; each is answered NotEnoughReplicas
    (and stays in that primary's log)."""
    with Producer(address, idempotent=False, retries=0, request_timeout=20,
                  linger_ms=0) as producer:
        for body in bodies:
            with pytest.raises(NotEnoughReplicas):
                producer.send(TOPIC, body, queue_id=0)


def bodies(server) -> tuple[list[bytes], int]:
    """Queue 0 as ``server``'s consumers see it: its bodies and its next offset."""
    with Client(server.address, retries=0, request_timeout=10) as c:
        ans = c.call(Op.PULL, {"topic": TOPIC, "queue_id": 0, "offset": 0,
                               "max_messages": 100, "wait_ms": 0})
        rng = c.call(Op.QUEUE_RANGE, {"topic": TOPIC, "queue_id": 0})
    return [bytes(m["body"]) for m in ans["messages"]], rng["next_offset"]


@needs_etcd
def test_a_consumer_never_reads_past_the_followers_and_skips_nothing_after_failover(
        tmp_path):
    group = FailoverGroup(str(tmp_path)).start()
    try:
        primary = group.wait_whole()
        followers = group.others(primary)
        first = [f"acked-{i}".encode() for i in range(20)]
        with Producer(group.servers, linger_ms=0) as producer:
            for body in first:
                producer.send(TOPIC, body, queue_id=0)
        seen: list[bytes] = []
        with Consumer(group.servers, "billing", [TOPIC], retries=False, request_timeout=10,
                      backoff_max=0.5) as consumer:
            consume_until(consumer, set(first), seen, 30)
            assert set(first) <= set(seen)
            for follower in followers:
                follower.kill()
            lost = [f"refused-{i}".encode() for i in range(5)]
            refused_sends(primary.address, lost)  # queue offsets 20-24 on this primary
            consume_until(consumer, set(lost), seen, 3)
            read_unreplicated = sorted(set(lost) & set(seen))
            with Client(primary.address, retries=0, request_timeout=20) as c:
                try:
                    c.call(Op.COMMIT_OFFSET, {"group": "billing", "topic": TOPIC,
                                              "queue_id": 0, "next_offset": 25})
                    commit_past = "accepted"
                except (OffsetNotReplicated, NotEnoughReplicas) as exc:
                    commit_past = type(exc).__name__
                rng = c.call(Op.QUEUE_RANGE, {"topic": TOPIC, "queue_id": 0})
            # The primary dies; the followers come back and one of them takes over: the
            # refused messages are gone, and acknowledged ones take queue offsets 20-24.
            primary.kill()
            for follower in followers:
                follower.start()
            group.wait_primary(among=followers)
            second = [f"after-{i}".encode() for i in range(5)]
            with Producer(group.servers, linger_ms=0, request_timeout=10,
                          retries=8) as producer:
                offsets = [producer.send(TOPIC, body, queue_id=0).queue_offset
                           for body in second]
            assert offsets == [20, 21, 22, 23, 24]
            consume_until(consumer, set(second), seen, 30)
        problems = []
        skipped = sorted(set(first + second) - set(seen))
        if skipped:
            problems.append(f"the group skipped acknowledged messages: {skipped}")
        if read_unreplicated:
            problems.append(f"read before any follower held them: {read_unreplicated}")
        if commit_past != "OffsetNotReplicated":
            problems.append(f"a commit past them was {commit_past}")
        if rng["next_offset"] != 20:
            problems.append(f"the primary's queue range showed {rng}")
        assert not problems, "; ".join(problems)
    finally:
        group.kill()


def test_follower_reads_stop_at_the_primarys_high_watermark(node):
    """min_insync = 2 with one follower lost: the other follower copies the refused sends,
    but its consumers do not see them until the primary's watermark passes them."""
    sync2 = {**SMALL, "ack_mode": "sync", "min_insync": 2, "max_lag_ms": 1000}
    primary = node("primary", sync2)
    kept = node("kept", {**SMALL, "follow": primary.address})
    lost = node("lost", {**SMALL, "follow": primary.address})
    wait_in_sync(primary, 2)
    with Producer(primary.address, linger_ms=0) as producer:
        for i in range(3):
            producer.send(TOPIC, f"acked-{i}".encode(), queue_id=0)
    lost.kill()
    refused_sends(primary.address, [b"refused-0", b"refused-1"])
    wait_caught_up(kept, primary)  # the follower holds them durably
    time.sleep(1.0)  # several fetch answers later

    acked = [f"acked-{i}".encode() for i in range(3)]
    assert bodies(kept) == (acked, 3)
    assert bodies(primary) == (acked, 3)
    assert status(kept)["visible_end"] <= status(primary)["visible_end"]
    lost.start()  # back: the primary's watermark passes them, and the follower learns it
    wait_in_sync(primary, 2)
    deadline = time.monotonic() + 20
    while bodies(kept)[1] < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bodies(kept) == (acked + [b"refused-0", b"refused-1"], 5)


@needs_etcd
def test_a_new_primary_shows_only_what_its_followers_hold(tmp_path):
    """min_insync = 2: a follower that copied refused sends is elected; as the primary it
    keeps them hidden until two followers hold them (it kept its watermark)."""
    group = FailoverGroup(str(tmp_path), config={**GROUP_CONFIG, "min_insync": 2}).start()
    try:
        primary = group.wait_whole()
        heir, other = group.others(primary)
        acked = [f"acked-{i}".encode() for i in range(3)]
        with Producer(group.servers, linger_ms=0) as producer:
            for body in acked:
                producer.send(TOPIC, body, queue_id=0)
        other.kill()
        refused_sends(primary.address, [b"refused-0", b"refused-1"])
        wait_caught_up(heir, primary)
        primary.kill()
        group.wait_primary(among=[heir])  # one report is enough with min_insync = 2
        time.sleep(1.0)  # the new primary serves, with no follower yet
        shown_alone = bodies(heir)
        other.start()
        primary.start()  # back as a follower of the new primary
        group.wait_whole()
        deadline = time.monotonic() + 20
        while bodies(heir)[1] < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert shown_alone == (acked, 3), "the new primary showed records no follower held"
        assert bodies(heir) == (acked + [b"refused-0", b"refused-1"], 5)
    finally:
        group.kill()


class OlderPrimaryProxy(FrameProxy):
    """Between a follower and its primary: answers a REPL_FETCH that asked for the
    watermark the way a primary of an older release does (ProtocolError: it does not know
    the trailing field)."""

    def __init__(self, upstream: str) -> None:
        self.refused = 0
        super().__init__(upstream)

    def answer(self, frame: bytes) -> bytes | None:
        parsed = parse_frame(frame[4:])
        if (parsed.opcode == Op.REPL_FETCH and not parsed.is_error
                and decode_response(parsed)["visible"] is not None):
            self.refused += 1
            return encode_error(parsed.opcode, parsed.request_id,
                                ProtocolError("12 trailing bytes after the payload"))
        return frame


def test_a_follower_of_an_older_primary_fetches_without_the_watermark(node):
    primary = node("primary", SMALL)
    proxy = OlderPrimaryProxy(primary.address)
    follower = node("follower", {**SMALL, "follow": proxy.address})
    with Producer(primary.address, linger_ms=0) as producer:
        for i in range(3):
            producer.send(TOPIC, f"acked-{i}".encode(), queue_id=0)
    wait_caught_up(follower, primary)
    deadline = time.monotonic() + 10
    while bodies(follower)[1] < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bodies(follower) == ([f"acked-{i}".encode() for i in range(3)], 3)
    assert proxy.refused == 1  # asked once, then never again
    assert "does not send its high watermark" in follower.log()
