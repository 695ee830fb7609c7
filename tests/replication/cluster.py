"""A primary and its followers as real ``fmq server`` processes on 127.0.0.1, and what
the replication tests ask of them."""

from __future__ import annotations

import json
import os
import time

from fmq.client import Client
from fmq.datadir import LOG_DIR
from fmq.errors import FMQError
from fmq.log.record import Record, decode
from fmq.protocol import Op
from tests.server.harness import ServerProcess

#: Small segments, so a run crosses several of them (FILLER records included).
SMALL = {"segment_size": 128 * 1024, "max_message_size": 32 * 1024,
         "checkpoint_interval_ms": 500, "max_lag_ms": 1500}


def status(server: ServerProcess) -> dict:
    with Client(server.address, retries=0, request_timeout=5) as c:
        return json.loads(c.call(Op.REPL_STATUS, {})["json"])


def wait_caught_up(follower: ServerProcess, primary: ServerProcess, timeout: float = 30.0
                   ) -> int:
    """Wait until the follower holds the primary's whole durable log; returns that end. A
    node changing role (it cuts its log and reopens) refuses for a moment: asked again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            end = status(primary)["durable_end"]
            if status(follower)["durable_end"] == end:
                return end
        except FMQError as exc:
            if not exc.retriable:
                raise
        time.sleep(0.05)
    raise AssertionError(f"follower not caught up: {status(follower)} vs {status(primary)}")


def segment_files(server: ServerProcess) -> dict[str, bytes]:
    directory = os.path.join(server.data_dir, LOG_DIR)
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def assert_identical_up_to(primary: ServerProcess, follower: ServerProcess, end: int) -> None:
    """The follower's segment files are byte for byte the primary's below ``end``."""
    mine, theirs = segment_files(primary), segment_files(follower)
    assert sorted(theirs) == sorted(n for n in mine if int(n.split(".")[0]) < end)
    for name, data in theirs.items():
        base = int(name.split(".")[0])
        upto = min(len(data), end - base)
        assert len(data) == len(mine[name]), name
        assert data[:upto] == mine[name][:upto], f"{name} differs below {end}"


def pull_all(server: ServerProcess, topic: str, queues: int) -> list[list[tuple]]:
    """Every message of every queue of ``topic``, as (queue offset, log offset, body)."""
    out = []
    with Client(server.address, retries=0, request_timeout=10) as c:
        for q in range(queues):
            got: list[tuple] = []
            while True:
                ans = c.call(Op.PULL, {"topic": topic, "queue_id": q, "offset": len(got),
                                       "max_messages": 1000, "wait_ms": 0})
                if not ans["messages"]:
                    break
                got += [(m["queue_offset"], m["offset"], m["body"]) for m in ans["messages"]]
            out.append(got)
    return out


def wait_in_sync(primary: ServerProcess, count: int = 1, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(status(primary)["in_sync"]) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"no follower in sync: {status(primary)}")


def record_on_disk(server: ServerProcess, offset: int) -> Record:
    """The record at log ``offset`` in ``server``'s segment files, read from the file."""
    for name, data in segment_files(server).items():
        base = int(name.split(".")[0])
        if base <= offset < base + len(data):
            return decode(data, offset - base, base_offset=base)
    raise AssertionError(f"no segment of {server.data_dir} holds offset {offset}")
