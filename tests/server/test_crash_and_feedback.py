"""Crashes: the server killed under 16 producers, a transactional producer killed after
prepare, graceful shutdown."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import fmq
from fmq.client import Client, Consumer, Producer, TransactionProducer
from fmq.errors import FMQError
from fmq.protocol import Op
from tests.crashkit import ROOT, reap

from .conftest import FAST
from .harness import json_lines, run_cli


def consume_all(address: str, topic: str, group: str, idle: float = 1.5,
                limit: float = 60) -> list[fmq.StoredMessage]:
    """Every consumable message of ``topic`` (from the start), once nothing more comes."""
    got: list[fmq.StoredMessage] = []
    with Consumer(address, group, topic, start="earliest") as c:
        deadline = time.monotonic() + limit
        last = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            batch = c.poll(0.5)
            if batch:
                got.extend(batch)
                last = time.monotonic()
    return got


def test_sixteen_producers_while_the_server_is_killed_and_restarted(start_server):
    srv = start_server(FAST)
    stop = threading.Event()
    lock = threading.Lock()
    acked: list[bytes] = []
    acked_committed: list[bytes] = []
    rolled_back: list[bytes] = []
    phase = {"n": 0}
    per_phase = [0, 0]

    def producer(i: int) -> None:
        checker = lambda u: fmq.TxState.UNKNOWN  # noqa: E731 - feedback is off here
        with TransactionProducer(srv.address, f"grp-{i}", checker, feedback=False,
                                 retries=1, request_timeout=5, connect_timeout=1) as p:
            n = 0
            while not stop.is_set():
                n += 1
                body = f"p{i}-{n}".encode()
                try:
                    if i < 4 and n % 5 == 0:
                        rb = f"rb-{i}-{n}".encode()
                        with lock:
                            rolled_back.append(rb)
                        p.send_in_transaction(fmq.Message("crash", rb),
                                              lambda tx, arg: fmq.TxState.ROLLBACK)
                    elif i < 4 and n % 5 == 1:
                        tc = f"tc-{i}-{n}".encode()
                        res = p.send_in_transaction(fmq.Message("crash", tc),
                                                    lambda tx, arg: fmq.TxState.COMMIT)
                        if res.state == fmq.TxState.COMMIT:
                            with lock:
                                acked_committed.append(tc)
                    else:
                        p.send("crash", body)
                        with lock:
                            acked.append(body)
                            per_phase[phase["n"]] += 1
                except FMQError:
                    time.sleep(0.05)  # the server is down: not acknowledged, try on

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    srv.kill()
    phase["n"] = 1
    time.sleep(0.3)
    srv.start()
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert per_phase[0] > 50 and per_phase[1] > 50, per_phase
    assert "replayed" in srv.log()

    bodies = {m.body for m in consume_all(srv.address, "crash", "verify")}
    missing = [b for b in acked + acked_committed if b not in bodies]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    assert acked_committed, "no transaction was committed: the test proved nothing"
    leaked = [b for b in rolled_back if b in bodies]
    assert not leaked, f"rolled-back messages became visible: {leaked[:5]}"
    assert not [b for b in bodies if b.startswith(b"rb-")]


def test_producer_killed_after_prepare_is_resolved_through_feedback(start_server):
    srv = start_server(FAST)
    tx_ids = {}
    for body in ("commit-me", "rollback-me"):
        proc = subprocess.Popen([sys.executable, "-m", "tests.workloads.doomed_tx_producer",
                                 srv.address, body], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            line = proc.stdout.readline().strip()
            assert line, "the producer did not prepare"
            tx_ids[body] = line
        finally:
            proc.kill()
            reap(proc, 10)
    with Client(srv.address) as c:
        open_ids = {t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]}
    assert open_ids == set(tx_ids.values())
    # Nothing of an undecided transaction is consumable.
    assert consume_all(srv.address, "orders", "before", idle=0.5) == []

    asked: dict[str, int] = {}

    def checker(u: fmq.UncertainTx) -> fmq.TxState:
        asked[u.tx_id] = asked.get(u.tx_id, 0) + 1
        body = u.messages[0].body  # a Message, as everywhere else
        return fmq.TxState.COMMIT if body == b"commit-me" else fmq.TxState.ROLLBACK

    with TransactionProducer(srv.address, "shop", checker) as p2:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not p2.call(Op.LIST_TX, {})["transactions"]:
                break
            time.sleep(0.1)
        assert p2.call(Op.LIST_TX, {})["transactions"] == []
        # The checker of the same group was asked about each, once (answers are final).
        assert asked == {tx_ids["commit-me"]: 1, tx_ids["rollback-me"]: 1}
    got = consume_all(srv.address, "orders", "after", idle=0.5)
    assert [m.body for m in got] == [b"commit-me"]
    # A producer of another group is never asked.
    stats = json_lines(run_cli("stats", "--server", srv.address, "--json").stdout)[0]
    assert stats["feedback_checks_sent"] == 2


def test_graceful_shutdown_leaves_a_clean_checkpoint(start_server):
    srv = start_server(FAST)
    acked: list[bytes] = []
    stop = threading.Event()

    def keep_sending() -> None:
        with Producer(srv.address, retries=0) as p:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    p.send("grace", f"g{n}".encode())
                    acked.append(f"g{n}".encode())
                except FMQError:
                    return  # shutting down: ServerBusy or connection closed

    with TransactionProducer(srv.address, "g", lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as tp:
        tp.send_in_transaction(fmq.Message("grace", b"tx-c"), lambda t, a: fmq.TxState.COMMIT)
        tp.send_in_transaction(fmq.Message("grace", b"tx-r"), lambda t, a: fmq.TxState.ROLLBACK)
    senders = [threading.Thread(target=keep_sending) for _ in range(4)]
    for t in senders:
        t.start()
    time.sleep(0.7)
    assert srv.stop() == 0, srv.log()
    stop.set()
    for t in senders:
        t.join(10)
    assert len(acked) > 20
    assert "checkpoint" in srv.log() and "stopped after" in srv.log()

    cp = json_lines(run_cli("checkpoint", "show", srv.data_dir, "--json").stdout)[0]
    assert cp["recovery_offset"] == cp["log_end"] == cp["applied_offset"]
    srv.start()
    assert "replayed 0 records" in srv.log().split("---- start 2")[1]
    bodies = {m.body for m in consume_all(srv.address, "grace", "v", idle=1.0)}
    assert set(acked) <= bodies
    assert b"tx-c" in bodies and b"tx-r" not in bodies


def test_sigterm_answers_requests_in_flight_before_closing(start_server):
    import socket

    from fmq.protocol import FrameDecoder, decode_response, encode_request

    srv = start_server(FAST)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(encode_request(Op.PULL, 1, {"topic": "idle", "queue_id": 0, "offset": 0,
                                              "max_messages": 1, "wait_ms": 20000})
                  + encode_request(Op.POLL_UNCERTAIN, 2, {
                      "producer_group": "none", "max_items": 1, "lease_ms": 1000,
                      "wait_ms": 20000}))
        time.sleep(0.3)  # both long polls are waiting on the server
        t0 = time.monotonic()
        srv.proc.send_signal(15)
        dec = FrameDecoder()
        frames = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            frames.extend(dec.feed(data))
        took = time.monotonic() - t0
    assert sorted(f.request_id for f in frames) == [1, 2]
    assert not any(f.is_error for f in frames)  # answered (empty), not dropped
    assert decode_response(next(f for f in frames if f.request_id == 1))["messages"] == []
    assert took < 5, f"shutdown waited {took:.1f}s for long polls"
    assert srv.proc.wait(10) == 0


def test_feedback_asks_again_after_unknown_and_a_raising_checker(start_server):
    srv = start_server(FAST)
    with TransactionProducer(srv.address, "later", lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as p:
        res = p.send_in_transaction(fmq.Message("later", b"eventually"),
                                    lambda tx, arg: fmq.TxState.UNKNOWN)
    assert res.state == fmq.TxState.OPEN
    answers = iter(["unknown", "raise", "commit"])
    asked: list[int] = []

    def checker(u: fmq.UncertainTx) -> fmq.TxState:
        asked.append(u.checks)
        answer = next(answers)
        if answer == "raise":
            raise RuntimeError("local database unreachable")
        return fmq.TxState(answer)

    with TransactionProducer(srv.address, "later", checker) as p2:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and p2.call(Op.LIST_TX, {})["transactions"]:
            time.sleep(0.1)
    assert asked == [1, 2, 3]  # the server counted each check it sent
    assert [m.body for m in consume_all(srv.address, "later", "v", idle=0.5)] == [b"eventually"]


def test_a_consumer_group_keeps_going_across_a_server_kill(start_server):
    """At-least-once through a crash: a consumer polling and committing while the server is
    SIGKILLed and restarted gets every acknowledged message (duplicates allowed)."""
    srv = start_server(FAST)
    acked: list[bytes] = []
    consumed: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        with Producer(srv.address, retries=0, connect_timeout=1) as p:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    p.send("live", f"l{n}".encode())
                    acked.append(f"l{n}".encode())
                except FMQError:
                    time.sleep(0.05)

    c = Consumer(srv.address, "live-group", "live", connect_timeout=1)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            consumed.extend(m.body for m in c.poll(0.2))
            c.commit()
        srv.kill()
        time.sleep(0.3)
        srv.start()
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:
            try:
                consumed.extend(m.body for m in c.poll(0.2))
                c.commit()
            except FMQError:
                time.sleep(0.05)  # the server was down for a moment
        stop.set()
        producer.join(10)
        deadline = time.monotonic() + 20
        while not set(acked) <= set(consumed) and time.monotonic() < deadline:
            consumed.extend(m.body for m in c.poll(0.5))
            c.commit()
    finally:
        stop.set()
        c.close()
    assert len(acked) > 50
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} acknowledged messages never consumed"
