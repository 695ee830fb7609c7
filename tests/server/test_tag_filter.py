"""Tag filtering on consume against a real server: a consumer group subscribed with a tag
expression gets exactly the matching messages of every queue and none of the others; its
committed offsets pass the messages it skipped (the group is not stuck behind them); a
waiting filtered pull wakes for a match only; old PULL is unchanged; `fmq consume --tags`."""

from __future__ import annotations

import json
import threading
import time

import pytest

from fmq import Message
from fmq.client import Client, Consumer, Producer
from fmq.errors import InvalidArgument
from fmq.protocol import Op

from .conftest import FAST
from .harness import run_cli

TAGS = ["a", "b", "c", None]


def consume(address: str, group: str, tags: str | None, idle: float = 1.0) -> list:
    got = []
    with Consumer(address, group, "t", start="earliest", tags=tags) as c:
        last = time.monotonic()
        deadline = last + 30
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            batch = c.poll(0.3)
            if batch:
                got += batch
                last = time.monotonic()
        c.commit()
    return got


def test_a_group_gets_exactly_the_matching_messages_and_moves_past_the_rest(start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as p:
        results = p.send_batch([Message("t", b"m%03d" % i, tags=TAGS[(i // 3) % 4])
                                for i in range(200)])
    assert len({r.queue_id for r in results}) == 4  # spread over every queue
    got = consume(srv.address, "ab", "a || b")
    assert sorted(m.body for m in got) == [b"m%03d" % i for i in range(200)
                                           if (i // 3) % 4 < 2]
    assert {m.tags for m in got} == {"a", "b"}
    group = json.loads(run_cli("groups", "ab", "--server", srv.address, "--json").stdout)
    assert len(group["offsets"]) == 4
    assert all(r["lag"] == 0 for r in group["offsets"])  # not stuck on the skipped ones
    # another group with every message, and one with a tag nobody uses
    assert len(consume(srv.address, "all", "*")) == 200
    assert consume(srv.address, "none", "zzz", idle=0.5) == []


def test_a_waiting_filtered_pull_returns_only_a_match(start_server):
    srv = start_server(FAST)
    with Client(srv.address, retries=0) as c, Producer(srv.address) as p:
        p.send("t", b"first", tags="b", queue_id=0)
        answer: dict = {}

        def pull() -> None:
            answer.update(c.call(Op.PULL_TAGGED, {
                "topic": "t", "queue_id": 0, "offset": 0, "max_messages": 10,
                "wait_ms": 10_000, "tags": "a"}, timeout=15))

        waiter = threading.Thread(target=pull)
        waiter.start()
        time.sleep(0.3)
        p.send("t", b"other", tags="c", queue_id=0)  # wakes it; no match: it waits on
        time.sleep(0.3)
        assert waiter.is_alive()
        p.send("t", b"match", tags="a", queue_id=0)
        waiter.join(15)
        assert [m["body"] for m in answer["messages"]] == [b"match"]
        assert answer["resume_offset"] == 3 == answer["next_offset"]
        with pytest.raises(InvalidArgument):
            c.call(Op.PULL_TAGGED, {"topic": "t", "queue_id": 0, "offset": 0,
                                    "max_messages": 1, "wait_ms": 0, "tags": "a ||"})
        plain = c.call(Op.PULL, {"topic": "t", "queue_id": 0, "offset": 0,
                                 "max_messages": 10, "wait_ms": 0})
        assert [m["body"] for m in plain["messages"]] == [b"first", b"other", b"match"]
        assert "resume_offset" not in plain


def test_consume_command_takes_tags(start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as p:
        for i, tag in enumerate(["a", "b", "a", "c"]):
            p.send("t", b"m%d" % i, tags=tag)
    out = run_cli("consume", "--server", srv.address, "--topic", "t", "--tags", "a",
                  "--from-beginning", "--idle-timeout", "1", "--json")
    assert out.returncode == 0, out.stderr
    bodies = sorted(json.loads(line)["body"] for line in out.stdout.splitlines())
    assert bodies == ["m0", "m2"]
    bad = run_cli("consume", "--server", srv.address, "--topic", "t", "--tags", "a ||",
                  "--idle-timeout", "0.5")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "tag expression" in bad.stderr
