"""``fmq bench`` against a real server on 127.0.0.1: the report's fields, the final count
check (including a run where it must fail), consumers, and bad input."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from fmq.client import Client, Producer, TransactionProducer
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState
from tests.server.harness import (
    FMQ,
    ServerProcess,
    json_lines,
    messages_stored,
    run_cli,
    server_stats,
)


def bench(server: ServerProcess, *args: str) -> tuple[int, dict]:
    proc = run_cli("bench", *args, "--server", server.address, "--json", timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    rows = json_lines(proc.stdout)
    assert len(rows) == 1, proc.stdout + proc.stderr
    return proc.returncode, rows[0]


def test_produce_reports_its_fields_and_the_broker_holds_every_acknowledged_message(server):
    rc, r = bench(server, "produce", "--topic", "p1", "--producers", "4", "--processes", "2",
                  "--duration", "1.5", "--size", "200")
    assert rc == 0, r
    assert r["messages"] > 0 and r["error_count"] == 0 and r["processes"] == 2
    assert r["count_check"] == "ok"
    assert r["broker_count"] == r["messages"] == messages_stored(server.address, "p1")
    assert r["msgs_per_s"] == pytest.approx(r["messages"] / r["elapsed_s"], rel=1e-3)
    assert r["bytes"] == 200 * r["messages"]
    assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"]
    assert r["server_cpu_us_per_msg"] > 0


def test_batched_produce_sends_whole_batches(server):
    rc, r = bench(server, "produce", "--topic", "p2", "--producers", "2", "--duration", "1",
                  "--batch-linger", "1", "--batch", "8", "--pipeline", "2")
    assert rc == 0, r
    assert r["batch"] == 8 and r["messages"] == 8 * r["operations"]
    assert messages_stored(server.address, "p2") == r["messages"]


def test_transactions_each_store_one_message(server):
    rc, r = bench(server, "tx", "--topic", "t1", "--producers", "3", "--duration", "1",
                  "--loop", "asyncio")
    assert rc == 0, r
    assert r["messages"] == r["operations"] > 0 and r["loop"] == "asyncio"
    assert messages_stored(server.address, "t1") == r["messages"]
    with Client(server.address) as c:
        assert c.call(Op.LIST_TX, {})["transactions"] == []


def test_transactions_whose_commit_rides_with_the_next_prepare_are_counted_as_stored(server):
    rc, r = bench(server, "tx", "--commit-with-next-prepare", "--topic", "t2", "--producers",
                  "4", "--processes", "2", "--duration", "1.5")
    assert rc == 0, r
    assert r["commit_with_next"] is True and r["count_check"] == "ok"
    assert r["messages"] == r["operations"] == r["broker_count"] > 0
    assert messages_stored(server.address, "t2") == r["messages"]
    with Client(server.address) as c:  # every PREPARE of the run was committed
        assert c.call(Op.LIST_TX, {})["transactions"] == []


def test_the_count_check_of_commits_with_the_next_prepare_fails_on_other_transactions(server):
    stop = threading.Event()

    def intruder() -> None:
        with TransactionProducer(server.address, "intruder", lambda u: TxState.UNKNOWN,
                                 feedback=False) as p:
            while not stop.is_set():
                p.commit(p.prepare([Message("t3", b"not from the benchmark")]))

    t = threading.Thread(target=intruder)
    t.start()
    try:
        rc, r = bench(server, "tx", "--commit-with-next-prepare", "--topic", "t3",
                      "--producers", "2", "--duration", "1")
    finally:
        stop.set()
        t.join(30)
    assert rc == 1
    assert r["count_check"].startswith("MISMATCH")
    assert r["broker_count"] > r["messages"]


def test_consume_reads_every_stored_message_once(server):
    with Producer(server.address) as p:
        for i in range(300):
            p.send("c1", b"m%d" % i)
    rc, r = bench(server, "consume", "--topic", "c1", "--producers", "3", "--duration", "20")
    assert rc == 0, r
    assert r["messages"] == 300 and r["count_check"] == "ok"


def test_the_count_check_fails_when_the_broker_holds_other_messages(server):
    stop = threading.Event()

    def intruder() -> None:
        with Producer(server.address) as p:
            while not stop.is_set():
                p.send("shared", b"not from the benchmark")

    t = threading.Thread(target=intruder)
    t.start()
    try:
        rc, r = bench(server, "produce", "--topic", "shared", "--producers", "2",
                      "--duration", "1")
    finally:
        stop.set()
        t.join(30)
    assert rc == 1
    assert r["count_check"].startswith("MISMATCH")
    assert r["broker_count"] > r["messages"]


@pytest.mark.parametrize("args, says", [
    (["consume", "--topic", "never-written"], "holds no messages"),
    (["produce", "--producers", "0"], "--producers must be at least 1"),
    (["produce", "--duration", "0"], "--duration must be more than 0"),
    (["produce", "--batch", "0", "--batch-linger", "1"], "--batch must be in"),
    (["produce", "--commit-with-next-prepare"], "applies to `fmq bench tx` only"),
])
def test_bad_input_gets_one_clear_line(server, args, says):
    proc = run_cli("bench", *args, "--server", server.address, timeout=60)
    assert proc.returncode == 1
    assert says in proc.stderr and "Traceback" not in proc.stderr


def test_an_unreachable_server_is_a_clear_error(tmp_path):
    proc = run_cli("bench", "produce", "--server", "127.0.0.1:1", "--duration", "1",
                   timeout=60)
    assert proc.returncode == 1
    assert "cannot connect" in proc.stderr and "Traceback" not in proc.stderr


def test_stats_carry_the_server_pid_and_its_cpu_seconds(server):
    proc = run_cli("stats", "--server", server.address, "--json")
    first = json_lines(proc.stdout)[0]
    assert first["pid"] == server.proc.pid
    assert first["process_cpu_s"] > 0
    run_cli("bench", "produce", "--topic", "cpu", "--server", server.address, "--duration", "1")
    later = json_lines(run_cli("stats", "--server", server.address, "--json").stdout)[0]
    assert later["process_cpu_s"] > first["process_cpu_s"]


def server_connections(address: str) -> int:
    return server_stats(address)["connections"]


def test_following_consumers_read_every_message_sent_during_the_run(server):
    baseline = server_connections(server.address)
    proc = subprocess.Popen([*FMQ, "bench", "consume", "--follow", "--topic", "f1",
                             "--producers", "4", "--duration", "6", "--server", server.address,
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        # The lanes connect after the queue ends were read: from then on nothing is missed.
        for _ in range(600):
            if server_connections(server.address) >= baseline + 4 or proc.poll() is not None:
                break
            time.sleep(0.05)
        with Producer(server.address) as p:
            for i in range(200):
                p.send("f1", b"m%d" % i)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    r = json_lines(out)[0]
    assert proc.returncode == 0, err
    assert r["messages"] == 200 and r["count_check"] == "ok"  # 4 consumers, 4 queues
