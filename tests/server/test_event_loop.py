"""One request must not stall the server for everyone else: limits on list sizes (checked
before decoding), on consumer-group memberships, pull long polls woken only by their own
queue, reads kept off the threads that sends use. A real server on 127.0.0.1 each time;
the assertions are about behaviour (an error, a count, who is still waiting), never speed,
except for one generous bound on a PING."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from fmq.client import Client, Producer
from fmq.errors import FMQError, InvalidArgument, ProtocolError
from fmq.protocol import FrameDecoder, Op, decode_error, decode_response, encode_request

from .conftest import FAST
from .harness import server_stats, wait_until


def message(topic: str, body: bytes = b"", queue_id: int = -1) -> dict:
    return {"topic": topic, "body": body, "key": None, "tags": None, "properties": {},
            "queue_id": queue_id}


class PingProbe:
    """PINGs every 10 ms on its own connection; remembers every latency."""

    def __init__(self, address: str) -> None:
        self.client = Client(address, retries=0, request_timeout=120)
        self.client.ping()
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            self.client.ping()
            self.latencies.append(time.monotonic() - t)
            time.sleep(0.01)

    def finish(self) -> list[float]:
        self.stop.set()
        self.thread.join(150)
        self.client.close()
        return self.latencies


# ---------------------------------------------------------------- GROUP_JOIN topics


def test_group_join_over_the_topic_limit_is_refused_while_others_are_served(start_server):
    srv = start_server(FAST)
    probe = PingProbe(srv.address)
    with Client(srv.address, retries=0, request_timeout=60) as c:
        with pytest.raises(InvalidArgument, match="max_topics_per_member"):
            c.call(Op.GROUP_JOIN, {"group": "g", "member_id": None,
                                   "topics": [f"t{i}" for i in range(30_000)]})
        with pytest.raises(InvalidArgument, match="max_topics_per_member"):
            c.call(Op.GROUP_HEARTBEAT, {"group": "g", "member_id": "m",
                                        "topics": [f"t{i}" for i in range(1001)]})
        c.ping()  # the refusing connection stays usable
        ok = c.call(Op.GROUP_JOIN, {"group": "g", "member_id": None,
                                    "topics": [f"t{i}" for i in range(1000)]})
        assert len(ok["assignment"]) == 4 * 1000
        assert list(server_stats(srv.address)["groups"]["g"]["members"]) == [ok["member_id"]]
    assert probe.finish()


def test_group_join_at_a_large_limit_leaves_pings_answered(start_server):
    """With the limit raised to 20 000 topics, a join of that many (quadratic before: about
    2 s of event loop) completes, and a PING on another connection never waits long."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_topics_per_member=20_000,
                                              group_session_timeout_ms=120_000)))
    topics = [f"t{i}" for i in range(20_000)]
    probe = PingProbe(srv.address)
    with Client(srv.address, retries=0, request_timeout=120) as c:
        first = c.call(Op.GROUP_JOIN, {"group": "g", "member_id": None, "topics": topics})
        second = c.call(Op.GROUP_JOIN, {"group": "g", "member_id": None, "topics": topics})
        beat = c.call(Op.GROUP_HEARTBEAT, {"group": "g", "member_id": first["member_id"],
                                           "topics": topics})  # releases half to second
        second_beat = c.call(Op.GROUP_HEARTBEAT, {"group": "g",
                                                  "member_id": second["member_id"],
                                                  "topics": topics})
    latencies = probe.finish()
    assert len(first["assignment"]) == 4 * 20_000
    assert second["assignment"] == []  # first still held every queue
    assert len(second_beat["assignment"]) + len(beat["assignment"]) == 4 * 20_000  # split
    # Quiet machine: 4.6 s before the fix, 0.16 s after. The bound leaves 15x for a loaded
    # machine (the old quadratic code only gets slower under load too).
    assert max(latencies) < 2.5, f"a PING waited {max(latencies):.2f}s behind the joins"


# ---------------------------------------------------------------- SEND_BATCH items


def stored_count(address: str, topic: str) -> int:
    with Client(address, retries=0) as c:
        return sum(c.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": q})["next_offset"]
                   for q in range(4))


def test_send_batch_over_the_item_limit_is_refused_and_nothing_is_stored(start_server):
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_batch_messages=100)))
    with Client(srv.address, retries=0) as c:
        with pytest.raises(InvalidArgument, match="max_batch_messages"):
            c.call(Op.SEND_BATCH, {"messages": [message("big", b"x")] * 101})
        assert stored_count(srv.address, "big") == 0
        ok = c.call(Op.SEND_BATCH, {"messages": [message("big", b"x")] * 100})
        assert len(ok["results"]) == 100 and stored_count(srv.address, "big") == 100


def test_oversized_lists_are_refused_from_the_count_before_decoding(start_server):
    """The items after the count are garbage (0xFF is not a valid start of a message: the
    topic length 0xFFFF runs past the payload). Decoding them would be a malformed payload
    that closes the connection; the count alone gets a typed error on an open connection."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_batch_messages=100)))
    host, port = srv.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.settimeout(10)
        payload = struct.pack(">I", 1_000_000) + b"\xff" * 1_000_000
        s.sendall(struct.pack(">IBBHQ", 12 + len(payload), 1, Op.SEND_BATCH, 0, 7) + payload)
        s.sendall(encode_request(Op.PING, 8, {}))
        dec = FrameDecoder()
        frames: list = []
        while len(frames) < 2:
            data = s.recv(65536)
            assert data, "the server closed the connection"
            frames.extend(dec.feed(data))
    err, pong = sorted(frames, key=lambda f: f.request_id)
    assert err.is_error and isinstance(decode_error(err), InvalidArgument)
    assert "1000000 messages" in str(decode_error(err))
    assert not pong.is_error and decode_response(pong)["protocol_version"] == 1


def test_a_payload_too_short_for_its_list_count_is_malformed(start_server):
    """A payload no longer than the limit cannot hold more items than the limit (each item
    takes a byte at least), so its count is not pre-decoded: a count claiming more is a
    malformed payload (ProtocolError, the connection closes) and nothing is stored."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_batch_messages=100)))
    host, port = srv.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.settimeout(10)
        payload = struct.pack(">I", 1_000_000) + b"\xff" * 60  # 64 bytes <= 100
        s.sendall(struct.pack(">IBBHQ", 12 + len(payload), 1, Op.SEND_BATCH, 0, 7) + payload)
        dec = FrameDecoder()
        frames: list = []
        while True:
            data = s.recv(65536)
            if not data:
                break  # closed by the server, after its answer
            frames.extend(dec.feed(data))
    assert len(frames) == 1 and frames[0].is_error
    err = decode_error(frames[0])
    assert isinstance(err, ProtocolError) and "claims 1000000 items" in str(err)
    with Client(srv.address, retries=0) as c:  # the server itself is fine
        c.call(Op.SEND_BATCH, {"messages": [message("short", b"x")] * 3})
    assert stored_count(srv.address, "short") == 3


# ---------------------------------------------------------------- group memberships


def test_group_memberships_are_limited_per_connection_and_per_group(start_server):
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_members_per_connection=5,
                                              max_members_per_group=3)))
    join = {"member_id": None, "topics": ["t"]}
    with Client(srv.address, retries=0) as a, Client(srv.address, retries=0) as b:
        ids = [a.call(Op.GROUP_JOIN, dict(join, group=f"g{i}"))["member_id"] for i in range(5)]
        with pytest.raises(InvalidArgument, match="max_members_per_connection"):
            a.call(Op.GROUP_JOIN, dict(join, group="g5"))
        a.call(Op.GROUP_LEAVE, {"group": "g0", "member_id": ids[0]})
        a.call(Op.GROUP_JOIN, dict(join, group="g5"))  # room again after a leave
        # A member's own heartbeats never count twice.
        a.call(Op.GROUP_HEARTBEAT, {"group": "g1", "member_id": ids[1], "topics": ["t"]})
        b.call(Op.GROUP_JOIN, dict(join, group="g1"))
        b.call(Op.GROUP_JOIN, dict(join, group="g1"))
        with pytest.raises(InvalidArgument, match="max_members_per_group"):
            b.call(Op.GROUP_JOIN, dict(join, group="g1"))
    # Both connections closed: every membership is gone with them.
    wait_until(lambda: server_stats(srv.address)["groups"] == {}, 10, "the groups to empty")


# ---------------------------------------------------------------- pull wake-ups


def test_a_commit_wakes_only_the_pullers_of_its_queues(start_server):
    srv = start_server(FAST)
    with Client(srv.address, retries=0, request_timeout=60) as c:
        def pull(topic: str):
            return c.submit(Op.PULL, {"topic": topic, "queue_id": 0, "offset": 0,
                                      "max_messages": 10, "wait_ms": 25_000})

        on_a, on_b = pull("wa"), pull("wb")
        wait_until(lambda: server_stats(srv.address)["pulls_waiting"] == 2, 10,
                   "both pulls to wait")
        tx = c.call(Op.PREPARE, {"producer_group": "pg", "tx_id": None,
                                 "messages": [message("wa", b"in-tx", queue_id=0)]})["tx_id"]
        assert not on_a.done()  # prepared is invisible: nothing to wake for
        c.call(Op.COMMIT, {"producer_group": "pg", "tx_id": tx})
        got = on_a.result(20)
        assert [m["body"] for m in got["messages"]] == [b"in-tx"]
        c.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "wb", "queue_id": 0,
                                  "next_offset": 0})
        c.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "wa", "queue_id": 0,
                                  "next_offset": 1})
        time.sleep(0.3)  # a wrongly woken pull would have read its queue by now
        stats = server_stats(srv.address)
        assert not on_b.done() and stats["pulls_waiting"] == 1
        assert stats["pull_wakeups"] == 1  # on_a's; nothing woke on_b
        with Producer(srv.address, retries=0) as p:
            p.send("wb", b"for-b", queue_id=0)
        assert [m["body"] for m in on_b.result(20)["messages"]] == [b"for-b"]
        assert server_stats(srv.address)["pull_wakeups"] == 2


def test_idle_long_polls_cost_no_reads_while_sends_and_commits_complete(start_server):
    srv = start_server(FAST)
    pullers = [Client(srv.address, retries=0, request_timeout=60, max_in_flight=250)
               for _ in range(4)]
    try:
        pulls = [pullers[i % 4].submit(Op.PULL, {
            "topic": f"idle{i // 4}", "queue_id": i % 4, "offset": 0, "max_messages": 10,
            "wait_ms": 30_000}) for i in range(1000)]
        wait_until(lambda: server_stats(srv.address)["pulls_waiting"] == 1000, 30,
                   "1000 pulls to wait")
        reads_before = server_stats(srv.address)["pull_reads"]
        with Producer(srv.address, retries=0, request_timeout=60) as p:
            sent = [p.send("busy", b"x") for _ in range(200)]
            for _ in range(20):
                tx = p.call(Op.PREPARE, {"producer_group": "pg", "tx_id": None,
                                         "messages": [message("busy", b"t")]})["tx_id"]
                p.call(Op.COMMIT, {"producer_group": "pg", "tx_id": tx})
                p.call(Op.COMMIT_OFFSET, {"group": "cg", "topic": "busy", "queue_id": 0,
                                          "next_offset": 1})
        assert len(sent) == 200
        stats = server_stats(srv.address)
        assert not any(f.done() for f in pulls) and stats["pulls_waiting"] == 1000
        assert stats["pull_reads"] == reads_before == 1000  # no idle pull read again
        assert stats["pull_wakeups"] == 0
    finally:
        for c in pullers:
            c.close()


def test_a_closing_connection_ends_its_long_polls_only(start_server):
    srv = start_server(FAST)
    with Client(srv.address, retries=0, request_timeout=60) as stays:
        kept = stays.submit(Op.PULL, {"topic": "cl", "queue_id": 1, "offset": 0,
                                      "max_messages": 1, "wait_ms": 25_000})
        goes = Client(srv.address, retries=0, request_timeout=60)
        goes.submit(Op.PULL, {"topic": "cl", "queue_id": 1, "offset": 0, "max_messages": 1,
                              "wait_ms": 25_000})
        wait_until(lambda: server_stats(srv.address)["pulls_waiting"] == 2, 10,
                   "both pulls to wait")
        goes.close()
        wait_until(lambda: server_stats(srv.address)["pulls_waiting"] == 1, 10,
                   "the closed connection's pull to end")
        assert not kept.done()
        with Producer(srv.address, retries=0) as p:
            p.send("cl", b"late", queue_id=1)
        assert [m["body"] for m in kept.result(20)["messages"]] == [b"late"]


def test_limits_are_validated():
    from fmq.errors import ConfigError
    from fmq.server.config import ServerConfig

    for name in ("read_threads", "max_batch_messages", "max_topics_per_member",
                 "max_members_per_group", "max_members_per_connection"):
        with pytest.raises(ConfigError, match=name):
            ServerConfig(**{name: 0})
    with pytest.raises(FMQError):
        ServerConfig(max_batch_messages=-1)
