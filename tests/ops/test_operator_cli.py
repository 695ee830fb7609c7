"""``fmq topics``, ``fmq groups``, ``fmq groups reset-offsets`` and ``fmq stats`` against a
real server."""

from __future__ import annotations

import json
import time

from fmq.client import Consumer
from tests.server.harness import json_lines, run_cli

from .conftest import FAST


def produce(srv, topic: str, n: int) -> list[dict]:
    out = run_cli("produce", "--server", srv.address, "--topic", topic, "--body", "m-{i}",
                  "--count", str(n), "--json")
    assert out.returncode == 0, out.stderr
    return json_lines(out.stdout)


def consume(srv, group: str, n: int, topic: str = "t") -> list[dict]:
    out = run_cli("consume", "--server", srv.address, "--topic", topic, "--group", group,
                  "--max", str(n), "--idle-timeout", "3", "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    return json_lines(out.stdout)


def groups(srv, group: str) -> dict:
    out = run_cli("groups", group, "--server", srv.address, "--json")
    assert out.returncode == 0, out.stderr
    (g,) = json_lines(out.stdout)
    return g


def test_topics_lists_queues_messages_bytes_and_store_times(start_server):
    srv = start_server(FAST)
    before = int(time.time() * 1000)
    produce(srv, "t", 10)
    produce(srv, "u", 3)
    out = run_cli("topics", "--server", srv.address, "--json")
    assert out.returncode == 0, out.stderr
    by_name = {t["topic"]: t for t in json_lines(out.stdout)}
    assert set(by_name) == {"t", "u"}
    t = by_name["t"]
    assert (t["queues"], t["messages"]) == (4, 10)
    assert t["bytes"] > 10 * len("m-0")
    assert before <= t["first_store_time"] <= t["last_store_time"] <= time.time() * 1000
    human = run_cli("topics", "--server", srv.address)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].split()[:4] == ["TOPIC", "QUEUES", "MESSAGES", "BYTES"]
    assert lines[1].split()[:3] == ["t", "4", "10"] and " UTC" in lines[1]
    assert "disk: log " in human.stdout and "MiB" in human.stdout


def test_groups_show_committed_offsets_and_lag(start_server):
    srv = start_server(FAST)
    produce(srv, "t", 8)
    assert len(consume(srv, "g", 8)) == 8
    produce(srv, "t", 4)  # one more in each queue: lag 1 per queue
    g = groups(srv, "g")
    assert g["members"] == {}
    assert sorted(r["queue_id"] for r in g["offsets"]) == [0, 1, 2, 3]
    assert all((r["committed"], r["next_offset"], r["lag"]) == (2, 3, 1) for r in g["offsets"])
    assert all(r["lag_ms"] >= 0 for r in g["offsets"])
    human = run_cli("groups", "g", "--server", srv.address)
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("group g: 0 members")
    assert "COMMITTED" in human.stdout and "{" not in human.stdout


def test_reset_offsets_moves_the_group_and_is_refused_while_members_live(start_server):
    srv = start_server(FAST)
    produce(srv, "t", 8)
    consume(srv, "g", 8)
    reset = run_cli("groups", "reset-offsets", "g", "--to-earliest", "--execute", "--server",
                    srv.address, "--json")
    assert reset.returncode == 0, reset.stderr
    assert {(c["old"], c["new"]) for c in json_lines(reset.stdout)} == {(2, 0)}
    assert sorted(m["body"] for m in consume(srv, "g", 8)) == sorted(f"m-{i}" for i in range(8))
    t_mid = int(time.time() * 1000)
    time.sleep(0.01)
    produce(srv, "t", 4)
    reset = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--to-time", str(t_mid),
                    "--execute", "--server", srv.address, "--json")
    assert {c["new"] for c in json_lines(reset.stdout)} == {2}
    reset = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--queue", "1",
                    "--to-offset", "1", "--execute", "--server", srv.address, "--json")
    assert [(c["queue_id"], c["new"]) for c in json_lines(reset.stdout)] == [(1, 1)]
    assert {(r["queue_id"], r["committed"]) for r in groups(srv, "g")["offsets"]} == {
        (0, 2), (1, 1), (2, 2), (3, 2)}

    with Consumer(srv.address, "g", ["t"]) as live:
        live.poll(0.5)
        described = groups(srv, "g")
        assert list(described["members"]) == [live.member_id]
        assert {r["owner"] for r in described["offsets"]} == {live.member_id}
        refused = run_cli("groups", "reset-offsets", "g", "--to-latest", "--server",
                          srv.address)
        assert refused.returncode == 1
        assert "live members" in refused.stderr and "--force" in refused.stderr
        assert "Traceback" not in refused.stderr
        forced = run_cli("groups", "reset-offsets", "g", "--to-latest", "--force",
                         "--execute", "--server", srv.address, "--json")
        assert forced.returncode == 0, forced.stderr
        assert {c["new"] for c in json_lines(forced.stdout)} == {3}
    assert srv.stop() == 0
    assert "reset group 'g' offset of t/1: 1 -> 3 (to latest with --force)" in srv.log()


def test_reset_offsets_bad_input_is_a_clear_error(start_server):
    srv = start_server(FAST)
    for args, text in [
        (["--to-earliest", "--to-offset", "3"], "exactly one"),
        ([], "exactly one"),
        (["--to-time", "yesterday"], "neither ms since the epoch"),
        (["--topic", "t", "--queue", "9", "--to-earliest"], "does not exist"),
        (["--to-earliest"], "no committed offsets"),
    ]:
        out = run_cli("groups", "reset-offsets", "nobody", *args, "--server", srv.address)
        assert out.returncode != 0 and text in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr


def test_stats_shows_topics_groups_disk_and_errors(start_server):
    srv = start_server(FAST)
    produce(srv, "t", 4)
    consume(srv, "g", 2)
    out = run_cli("stats", "--server", srv.address, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [t["topic"] for t in data["topics"]] == ["t"]
    assert [g["group"] for g in data["consumer_groups"]] == ["g"]
    assert data["disk"]["log_bytes"] > 0 and data["disk"]["segment_files"] >= 1
    by_op = data["server"]["requests_by_op"]
    assert by_op.get("SEND_BATCH", 0) + by_op.get("SEND", 0) >= 1 and by_op["PULL"] >= 1
    assert "bad_records_read" in data and "log_end" in data  # the broker's keys stay
    human = run_cli("stats", "--server", srv.address)
    assert human.returncode == 0, human.stderr
    for title in ("BROKER", "TOPICS", "GROUPS", "ERRORS", "SERVER"):
        assert f"\n{title}\n" in f"\n{human.stdout}"
    assert "{" not in human.stdout and "None" not in human.stdout
    assert " MiB" in human.stdout or " KiB" in human.stdout
