"""Issue 14, item 3 through a real server: a consumer group sees every stored message
after the server restarts with a lower ``queues_per_topic``."""

from __future__ import annotations

from tests.server.harness import json_lines, run_cli

from .conftest import FAST


def test_group_consumer_sees_all_messages_after_lowering_queues(start_server):
    srv = start_server({**FAST, "queues_per_topic": 4})
    out = run_cli("produce", "--server", srv.address, "--topic", "t", "--body", "m-{i}",
                  "--count", "4", "--json")
    assert sorted(s["queue_id"] for s in json_lines(out.stdout)) == [0, 1, 2, 3]
    assert srv.stop() == 0
    srv = start_server({**FAST, "queues_per_topic": 2})
    out = run_cli("consume", "--server", srv.address, "--topic", "t", "--group", "g",
                  "--max", "4", "--json", "--idle-timeout", "3", timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(m["body"] for m in json_lines(out.stdout)) == [f"m-{i}" for i in range(4)]
