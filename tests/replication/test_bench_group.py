"""``fmq bench produce|tx`` given a broker group's addresses loads its primary, found as the
SDK finds it (HELLO's role and primary), even when a follower is listed first."""

from __future__ import annotations

import pytest

from tests.server.harness import json_lines, run_cli

from .cluster import SMALL, pull_all, wait_caught_up


@pytest.mark.parametrize("kind", ["produce", "tx"])
def test_bench_against_a_group_loads_the_primary(node, kind):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address})
    topic = f"bench-{kind}"
    proc = run_cli("bench", kind, "--server", f"{follower.address},{primary.address}",
                   "--topic", topic, "--producers", "2", "--processes", "1",
                   "--duration", "1", "--size", "100", "--json", timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    [report] = json_lines(proc.stdout)
    assert proc.returncode == 0, report
    assert report["server"] == primary.address
    assert report["messages"] > 0 and report["error_count"] == 0
    assert report["count_check"] == "ok" and report["broker_count"] == report["messages"]
    wait_caught_up(follower, primary)
    for server in (primary, follower):  # stored once, on the primary, and copied
        assert sum(len(q) for q in pull_all(server, topic, 4)) == report["messages"]
