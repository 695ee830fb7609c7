"""``fmq groups reset-offsets``: a plan unless --execute, and a group's retry and
dead-letter topics move only when named (rewinding %DLQ%G would redrive its dead letters
again)."""

from __future__ import annotations

import threading
import time

import pytest

import fmq
from fmq.client import Consumer, Producer
from tests.server.harness import json_lines, run_cli
from tests.server.test_scheduled_and_retries import FAST_RETRIES, _wait_for_dead_letter

pytestmark = pytest.mark.timeout(120)


def _committed(srv, group: str) -> dict[tuple[str, int], int]:
    out = run_cli("groups", group, "--server", srv.address, "--json")
    assert out.returncode == 0, out.stderr
    (g,) = json_lines(out.stdout)
    return {(r["topic"], r["queue_id"]): r["committed"] for r in g["offsets"]}


def _fail_until_dead(srv) -> None:
    """Group shop's consumer fails on "bad" until it is dead-lettered (again)."""

    def handler(m: fmq.StoredMessage) -> None:
        if m.body == b"bad":
            raise ValueError("cannot process")

    c = Consumer(srv.address, "shop", "orders")
    runner = threading.Thread(target=c.run, args=(handler,))
    runner.start()
    try:
        _wait_for_dead_letter(srv.address, "shop")
    finally:
        c.close()
        runner.join(10)


def _dead_letter_then_redrive(srv) -> None:
    """Group shop: "good" consumed, "bad" retried through %RETRY%shop, dead, redriven."""
    with Producer(srv.address) as p:
        p.send("orders", b"bad", key="o-1")
        p.send("orders", b"good")
    _fail_until_dead(srv)
    out = run_cli("dlq", "redrive", "shop", "--server", srv.address)
    assert out.returncode == 0, out.stderr


def test_reset_offsets_plans_first_and_leaves_retry_and_dead_letters_alone(start_server):
    srv = start_server(FAST_RETRIES)
    _dead_letter_then_redrive(srv)
    before = _committed(srv, "shop")
    assert {t for t, _q in before} == {"orders", "%RETRY%shop", "%DLQ%shop"}
    args = ("groups", "reset-offsets", "shop", "--to-earliest", "--server", srv.address)

    # Without --execute: the plan, and nothing moves.
    plan = run_cli(*args)
    assert plan.returncode == 0, plan.stderr
    assert "OLD" in plan.stdout and "NEW" in plan.stdout
    assert "nothing changed; add --execute" in plan.stdout
    planned = json_lines(run_cli(*args, "--json").stdout)
    assert planned and all(c["executed"] is False for c in planned)
    assert _committed(srv, "shop") == before

    # --execute moves the group's own topic only; the redriven dead letter stays redriven.
    done = json_lines(run_cli(*args, "--execute", "--json").stdout)
    assert {c["topic"] for c in done} == {"orders"}
    assert all(c["executed"] is True and c["new"] == 0 for c in done)
    after = _committed(srv, "shop")
    assert {k: v for k, v in after.items() if k[0] != "orders"} == \
        {k: v for k, v in before.items() if k[0] != "orders"}
    listed = run_cli("dlq", "list", "shop", "--server", srv.address, "--json")
    assert json_lines(listed.stdout) == [], "a redriven dead letter reappeared"
    with Consumer(srv.address, "shop", "orders") as again:
        got: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + 10
        while len([t for t, _b in got if t == "orders"]) < 2 and time.monotonic() < deadline:
            got += [(m.topic, m.body) for m in again.poll(0.5)]
        # The topic itself was rewound (the redriven "bad" waits in %RETRY%shop besides).
        assert sorted(b for t, b in got if t == "orders") == [b"bad", b"good"]

    # Named, an internal topic moves: the dead letter is listed again.
    named = run_cli(*args, "--topic", "%DLQ%shop", "--execute", "--json")
    assert named.returncode == 0, named.stderr
    assert {c["topic"] for c in json_lines(named.stdout)} == {"%DLQ%shop"}
    listed = json_lines(run_cli("dlq", "list", "shop", "--server", srv.address,
                                "--json").stdout)
    assert [d["body"] for d in listed] == ["bad"]
    assert srv.stop() == 0
    assert "reset group 'shop' offset of %DLQ%shop/" in srv.log()
