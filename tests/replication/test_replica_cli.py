"""``fmq replica status`` on a primary and a follower, and ``fmq replica bootstrap`` giving
a follower behind retention a fresh start."""

from __future__ import annotations

import json
import os
import time

from fmq.client import Client, Producer
from fmq.datadir import LOG_DIR
from fmq.message import Message
from fmq.protocol import Op
from tests.ops.test_metrics import scrape, value
from tests.server.harness import free_port, run_cli

from .cluster import SMALL, assert_identical_up_to, pull_all, wait_caught_up, wait_in_sync


def test_status_names_roles_offsets_and_the_in_sync_set(node):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    with Producer(primary.address) as p:
        p.send("t", b"x")
    end = wait_caught_up(follower, primary)
    out = run_cli("replica", "status", "--server", primary.address, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    name = f"127.0.0.1:{follower.port}"
    assert data["role"] == "primary" and data["in_sync"] == [name]
    [row] = data["followers"]
    assert row["name"] == name and row["in_sync"]
    text = run_cli("replica", "status", "--server", primary.address).stdout
    assert name in text and "in sync" in text
    out = run_cli("replica", "status", "--server", follower.address, "--json")
    data = json.loads(out.stdout)
    assert data["role"] == "follower" and data["primary"] == primary.address
    assert data["durable_end"] == end
    assert "follower of" in run_cli("replica", "status", "--server", follower.address).stdout


def test_bootstrap_starts_a_follower_at_the_primary_s_retained_log(node, tmp_path):
    config = {**SMALL, "retention_bytes": 2 * SMALL["segment_size"],
              "retention_interval_ms": 100, "checkpoint_interval_ms": 100,
              # idempotent sends keep their segment for dedup_window_ms: not here
              "dedup_window_ms": 1}
    primary = node("primary", config)
    first_segment = os.path.join(primary.data_dir, LOG_DIR, f"{0:020d}.seg")
    with Producer(primary.address) as p:
        # Topic "old" lies wholly in the segments retention deletes: its queues are empty
        # on the primary but keep their next offsets, and the follower must too.
        p.send_batch([Message("old", b"gone", queue_id=q) for q in range(4) for _ in range(3)])
        for n in range(10):
            p.send_batch([Message("t", f"m{n}-{i} ".encode() * 80) for i in range(100)])
    deadline = time.monotonic() + 20
    while os.path.exists(first_segment) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(first_segment)
    follower = node("follower", {**SMALL, "follow": primary.address}, start=False)
    out = run_cli("replica", "bootstrap", follower.data_dir, "--from", primary.address,
                  "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["first_offset"] > 0
    follower.start()
    end = wait_caught_up(follower, primary)
    assert_identical_up_to(primary, follower, end)
    assert pull_all(follower, "t", 4) == pull_all(primary, "t", 4)
    with Client(primary.address) as a, Client(follower.address) as b:
        for q in range(4):
            ask = {"topic": "old", "queue_id": q}
            assert b.call(Op.QUEUE_RANGE, ask) == a.call(Op.QUEUE_RANGE, ask) == {
                "min_offset": 3, "next_offset": 3}
    again = run_cli("replica", "bootstrap", follower.data_dir, "--from", primary.address)
    assert again.returncode == 1 and "already holds a log" in again.stderr
    assert "Traceback" not in again.stderr


def test_metrics_show_followers_lag_and_in_sync(node):
    port = free_port()
    primary = node("primary", {**SMALL, "server": {"metrics_port": port}})
    follower_metrics = free_port()
    follower = node("follower", {**SMALL, "follow": primary.address,
                                 "server": {"metrics_port": follower_metrics}})
    wait_in_sync(primary)
    name = f"127.0.0.1:{follower.port}"
    samples = scrape(port)
    assert value(samples, "fmq_follower_in_sync", follower=name) == 1
    assert value(samples, "fmq_follower_lag_bytes", follower=name) == 0
    assert ("fmq_not_enough_replicas_total", ()) in samples
    assert ("fmq_replica_lag_bytes", ()) in scrape(follower_metrics)


def test_status_of_a_group_shows_every_node_in_one_table(node):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    gone = f"127.0.0.1:{free_port()}"  # a node that does not answer
    wait_in_sync(primary)
    with Producer(primary.address) as p:
        p.send("t", b"x")
    end = wait_caught_up(follower, primary)
    both = f"{follower.address},{primary.address}"
    out = run_cli("replica", "status", "--server", both, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["address"] for r in rows] == [follower.address, primary.address]
    f, p_ = rows
    assert (f["role"], f["primary"], f["durable_end"], f["lag_bytes"], f["in_sync_member"]) \
        == ("follower", primary.address, end, 0, True)
    assert (p_["role"], p_["durable_end"], p_["lag_bytes"]) == ("primary", end, 0)
    assert f["epoch"] == p_["epoch"]
    text = run_cli("replica", "status", "--server", both).stdout
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["ADDRESS", "NODE", "ROLE", "EPOCH"]
    assert lines[1].startswith(follower.address) and f"follower of {primary.address}" in lines[1]
    assert lines[2].startswith(primary.address) and "primary (async" in lines[2]
    # A node that does not answer is a row with its error, and the exit status says so.
    out = run_cli("replica", "status", "--server", f"{both},{gone}", "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    rows = json.loads(out.stdout)
    assert rows[2]["address"] == gone and rows[2]["error"] and "role" not in rows[2]
    assert rows[0]["in_sync_member"] is True
