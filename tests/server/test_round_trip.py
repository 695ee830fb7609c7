"""Produce and consume through a real server: the CLI and the SDK."""

from __future__ import annotations

import os
import threading
import time

import pytest

import fmq
from fmq.client import Client, Consumer, Producer, TransactionProducer
from fmq.errors import (
    InvalidArgument,
    MessageTooLarge,
    TransactionConflict,
    UnknownQueue,
    UnknownTransaction,
)
from fmq.protocol import Op

from .conftest import FAST
from .harness import json_lines, run_cli


def test_cli_produce_then_consume_round_trip(start_server):
    srv = start_server(FAST)
    out = run_cli("produce", "--server", srv.address, "--topic", "cli", "--body", "m-{i}",
                  "--count", "10", "--json")
    assert out.returncode == 0, out.stderr
    sent = json_lines(out.stdout)
    assert len(sent) == 10 and {s["queue_id"] for s in sent} == {0, 1, 2, 3}
    out = run_cli("produce", "--server", srv.address, "--topic", "cli", "--key", "k",
                  "--tags", "t1", "--json", input="line a\nline b\n")
    assert out.returncode == 0, out.stderr
    assert len(json_lines(out.stdout)) == 2
    out = run_cli("produce", "--server", srv.address, "--topic", "cli", "--body", "never",
                  "--tx", "rollback", "--json")
    assert json_lines(out.stdout)[0]["state"] == "rollback"
    out = run_cli("produce", "--server", srv.address, "--topic", "cli", "--body", "tx-yes",
                  "--tx", "commit", "--json")
    assert json_lines(out.stdout)[0]["state"] == "commit"

    out = run_cli("consume", "--server", srv.address, "--topic", "cli", "--group", "g1",
                  "--max", "13", "--json", timeout=30)
    assert out.returncode == 0, out.stderr
    got = json_lines(out.stdout)
    bodies = sorted(m["body"] for m in got)
    assert bodies == sorted([f"m-{i}" for i in range(10)] + ["line a", "line b", "tx-yes"])
    assert all(m["key"] == "k" and m["tags"] == "t1" for m in got if m["body"].startswith("line"))
    # Offsets were committed: the same group gets nothing more.
    out = run_cli("consume", "--server", srv.address, "--topic", "cli", "--group", "g1",
                  "--idle-timeout", "1", "--json")
    assert out.returncode == 0 and json_lines(out.stdout) == []
    # --from-beginning replays.
    out = run_cli("consume", "--server", srv.address, "--topic", "cli", "--group", "g1",
                  "--from-beginning", "--max", "13", "--json", timeout=30)
    assert len(json_lines(out.stdout)) == 13

    out = run_cli("stats", "--server", srv.address, "--json")
    stats = json_lines(out.stdout)[0]
    assert stats["open_transactions"] == 0 and stats["log_failed"] is None
    assert stats["server"]["requests"] > 0


def test_sdk_round_trip_and_queries(start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as p:
        r = p.send("sdk", b"one", key="order-1", tags="a", properties={"x": "1"})
        batch = p.send_batch([fmq.Message("sdk", f"b{i}".encode(), key=f"k{i}")
                              for i in range(20)])
        assert len(batch) == 20 and r.queue_offset == 0
        with Client(srv.address) as c:
            hits = c.call(Op.QUERY_KEY, {"topic": "sdk", "key": "order-1", "limit": 10})
            assert [m["body"] for m in hits["messages"]] == [b"one"]
            rng = c.call(Op.QUEUE_RANGE, {"topic": "sdk", "queue_id": r.queue_id})
            assert rng["min_offset"] == 0 and rng["next_offset"] >= 1
            t = c.call(Op.OFFSET_FOR_TIME, {"topic": "sdk", "queue_id": r.queue_id,
                                            "timestamp_ms": 0})
            assert t["offset"] == 0
    with Consumer(srv.address, "g", ["sdk"]) as c:
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 21 and time.monotonic() < deadline:
            got.extend(c.poll(1.0))
        c.commit()
    assert sorted(m.body for m in got) == sorted([b"one"] + [f"b{i}".encode() for i in range(20)])
    first = next(m for m in got if m.body == b"one")
    assert (first.key, first.tags, first.properties) == ("order-1", "a", {"x": "1"})


def test_server_errors_arrive_as_the_embedded_classes(start_server):
    srv = start_server(FAST)
    with TransactionProducer(srv.address, "errs", lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as p:
        with pytest.raises(InvalidArgument, match="invalid topic"):
            p.send("bad topic!", b"x")
        with pytest.raises(InvalidArgument, match="reserved"):
            p.send("%DLQ%g", b"x")
        with pytest.raises(InvalidArgument, match="reserved"):
            p.send_in_transaction([fmq.Message("%DLQ%g", b"x")],
                                  lambda tx, arg: fmq.TxState.COMMIT)
        with pytest.raises(UnknownQueue):
            p.send("t", b"x", queue_id=99)
        with pytest.raises(MessageTooLarge):
            p.send("t", b"x" * (4 * 1024 * 1024 + 1))
        with pytest.raises(UnknownTransaction):
            p.commit("no-such-tx")
        res = p.send_in_transaction([fmq.Message("t", b"r")], lambda tx, arg: fmq.TxState.ROLLBACK)
        assert res.state == fmq.TxState.ROLLBACK
        with pytest.raises(TransactionConflict) as info:
            p.commit(res.tx_id)
        assert not info.value.retriable
        assert p.rollback(res.tx_id) == fmq.TxState.ROLLBACK  # idempotent


def test_transaction_context_manager_and_local_transaction_outcomes(start_server):
    srv = start_server(FAST)
    with TransactionProducer(srv.address, "ctx", lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as p:
        with p.transaction() as tx:
            tx.send("ctx", b"c1")
            tx.send("ctx", b"c2")
        assert tx.result.state == fmq.TxState.COMMIT
        with pytest.raises(RuntimeError), p.transaction() as tx2:
            tx2.send("ctx", b"never-1")
            raise RuntimeError("application failure")
        assert tx2.result is None

        def boom(tx_id, arg):
            raise ValueError("local db down")

        res = p.send_in_transaction(fmq.Message("ctx", b"open-1"), boom)
        assert res.state == fmq.TxState.OPEN and isinstance(res.error, ValueError)
        res2 = p.send_in_transaction(fmq.Message("ctx", b"yes"), lambda t, a: a, arg=fmq.TxState.COMMIT)
        assert res2.state == fmq.TxState.COMMIT
        txs = p.call(Op.LIST_TX, {})["transactions"]
        assert [t["tx_id"] for t in txs] == [res.tx_id]
    with Consumer(srv.address, "g", "ctx") as c:
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
        got.extend(c.poll(0.5))
    assert sorted(m.body for m in got) == [b"c1", b"c2", b"yes"]


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_long_poll_delivers_promptly(start_server, writer):
    srv = start_server({**FAST, "index_writer": writer})
    with Consumer(srv.address, "lp", "lp", start="latest") as c, Producer(srv.address) as p:
        assert c.poll(0.3) == []
        sent_at = {}

        def later():
            time.sleep(0.5)
            sent_at["t"] = time.monotonic()
            p.send("lp", b"wake")

        sender = threading.Thread(target=later)
        sender.start()
        t0 = time.monotonic()
        got = c.poll(10.0)
        took = time.monotonic() - sent_at["t"]
        sender.join(10)
    assert [m.body for m in got] == [b"wake"]
    assert time.monotonic() - t0 < 5
    assert took < 0.5, f"long poll answered {took:.3f}s after the send"


def test_second_server_on_the_same_dir_fails_clearly(start_server):
    srv = start_server(FAST)
    out = run_cli("server", "--data-dir", srv.data_dir, "--port", "0", timeout=30)
    assert out.returncode == 1
    assert "in use by another FMQ process" in out.stderr
    assert srv.alive


def test_large_messages_are_split_over_pull_answers(start_server):
    srv = start_server(FAST)
    big = [bytes([i]) * (3 * 1024 * 1024) for i in range(4)]
    with Producer(srv.address) as p:
        for b in big:
            p.send("big", b, queue_id=0)
    with Client(srv.address) as c:
        first = c.call(Op.PULL, {"topic": "big", "queue_id": 0, "offset": 0,
                                 "max_messages": 100, "wait_ms": 0})
        assert 1 <= len(first["messages"]) < 4  # kept under the answer budget
    with Consumer(srv.address, "big", "big") as c:
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            got.extend(c.poll(1.0))
    assert [m.body for m in got] == big


def test_cli_tx_list_and_resolve_against_a_server(start_server):
    srv = start_server(FAST)
    out = run_cli("produce", "--server", srv.address, "--topic", "op", "--body", "held",
                  "--tx", "unknown", "--json")
    tx_id = json_lines(out.stdout)[0]["tx_id"]
    assert json_lines(out.stdout)[0]["state"] == "open"
    listed = json_lines(run_cli("tx", "list", "--server", srv.address, "--json").stdout)
    assert [t["tx_id"] for t in listed] == [tx_id] and listed[0]["state"] == "open"
    out = run_cli("tx", "resolve", "--server", srv.address, "--group", "fmq-cli", tx_id,
                  "commit", "--json")
    assert out.returncode == 0 and json_lines(out.stdout) == [{"tx_id": tx_id, "state": "commit"}]
    out = run_cli("tx", "resolve", "--server", srv.address, "--group", "fmq-cli", tx_id,
                  "rollback")
    assert out.returncode == 1 and "already ended with commit" in out.stderr
    assert "resolved transaction" in srv.log()
    out = run_cli("tx", "list", "--server", srv.address)
    assert out.stdout.strip() == "no open transactions"
    os.environ["FMQ_SERVER"] = srv.address  # neither DATA_DIR nor --server: FMQ_SERVER
    try:
        out = run_cli("tx", "list")
    finally:
        del os.environ["FMQ_SERVER"]
    assert out.returncode == 0 and out.stdout.strip() == "no open transactions", out
    got = run_cli("consume", "--server", srv.address, "--topic", "op", "--max", "1", "--json")
    assert json_lines(got.stdout)[0]["body"] == "held"


def test_request_timeout_is_retriable_and_the_connection_survives(start_server):
    from fmq.errors import RequestTimeout

    srv = start_server(FAST)
    with Client(srv.address, request_timeout=0.3, retries=0) as c:
        t0 = time.monotonic()
        with pytest.raises(RequestTimeout) as info:
            c.call(Op.PULL, {"topic": "idle", "queue_id": 0, "offset": 0, "max_messages": 1,
                             "wait_ms": 3000})
        assert info.value.retriable and time.monotonic() - t0 < 2
        assert c.ping()["protocol_version"] == 1  # a late answer is dropped, not misrouted


def test_client_reports_an_unreachable_server_clearly():
    from fmq.errors import ConnectionLost

    from .harness import free_port

    with pytest.raises(ConnectionLost, match="fmq server"), \
            Producer(f"127.0.0.1:{free_port()}", retries=1, backoff_initial=0.01) as p:
        p.send("t", b"x")


def test_many_threads_share_one_producer_without_server_busy(start_server):
    """64 threads pipeline on one connection: answers are matched by request id, and the
    client keeps its requests in flight below the server's limit."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_in_flight=16)))
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    with Producer(srv.address, retries=0, max_in_flight=16) as p:  # the server's limit

        def work(i: int) -> None:
            try:
                results[i] = [p.send("shared", f"{i}-{n}".encode(), key=f"k{i}")
                              for n in range(10)]
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []
    # Each thread's messages went to its key's queue in order: the answers were not mixed up.
    for rs in results.values():
        assert len({r.queue_id for r in rs}) == 1
        assert [r.queue_offset for r in rs] == sorted(r.queue_offset for r in rs)
    assert sum(len(rs) for rs in results.values()) == 640


def test_consumer_iteration_ends_when_closed_from_another_thread(start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as p:
        p.send("it", b"one")
    c = Consumer(srv.address, "it", "it")
    got = []
    threading.Timer(1.5, c.close).start()
    t0 = time.monotonic()
    for m in c:
        got.append(m.body)
        c.commit()
    assert got == [b"one"] and time.monotonic() - t0 < 10


def test_prepare_with_a_duplicate_id_is_refused(start_server):
    from fmq.errors import DuplicateTransaction

    srv = start_server(FAST)
    with TransactionProducer(srv.address, "dup", lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as p:
        tx = p.prepare([fmq.Message("dup", b"a")], tx_id="order-42")
        assert tx == "order-42"
        with pytest.raises(DuplicateTransaction):
            p.prepare([fmq.Message("dup", b"b")], tx_id="order-42")
        assert p.rollback(tx) == fmq.TxState.ROLLBACK


def test_server_list_fails_over_to_a_live_server(start_server):
    from fmq.client import parse_servers

    from .harness import free_port

    assert parse_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_servers(["h"]) == [("h", 9876)]
    with pytest.raises(InvalidArgument):
        parse_servers("host:notaport")
    srv = start_server(FAST)
    with Producer([f"127.0.0.1:{free_port()}", srv.address], retries=2,
                  backoff_initial=0.01) as p:
        assert p.send("fo", b"x").queue_offset == 0


def test_fmq_server_environment_variable(start_server):
    import os
    import subprocess

    from .harness import FMQ

    srv = start_server(FAST)
    env = dict(os.environ, FMQ_SERVER=srv.address)
    out = subprocess.run([*FMQ, "produce", "--topic", "env", "--body", "e", "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json_lines(out.stdout)[0]["queue_offset"] == 0
