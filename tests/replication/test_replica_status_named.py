"""``fmq replica status`` over a group elected through etcd, whose nodes have names
(``--node n1``) besides their addresses: the group view must say the followers are in sync
exactly when the primary's own view does."""

from __future__ import annotations

import json
import os

import pytest

from tests.etcdkit import ETCD
from tests.server.harness import run_cli

from .failover_kit import FailoverGroup, role_of

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


def test_group_status_counts_named_followers_in_sync(tmp_path):
    group = FailoverGroup(str(tmp_path)).start()
    try:
        primary = group.wait_whole()
        in_sync = set(role_of(primary)["in_sync"])
        out = run_cli("replica", "status", "--server", group.servers, "--json")
        assert out.returncode == 0, out.stderr
        rows = {r["address"]: r for r in json.loads(out.stdout)}
        assert {r["node"] for r in rows.values()} == {"n1", "n2", "n3"}
        for follower in group.others(primary):
            row = rows[follower.address]
            assert row["role"] == "follower"
            # The primary's own view counts this follower in sync; the group view agrees.
            assert follower.address in in_sync
            assert row["in_sync_member"] is True, row
        text = run_cli("replica", "status", "--server", group.servers).stdout
        follower_lines = [line for line in text.splitlines() if "follower of" in line]
        assert len(follower_lines) == 2
        # ... IN SYNC  ERROR: "yes", then "-" (no error)
        assert all(line.split()[-2:] == ["yes", "-"] for line in follower_lines), text
    finally:
        group.stop()
