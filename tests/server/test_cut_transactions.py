"""A server SIGKILLed while it writes a large transaction: the transactional producer,
retrying, never commits a transaction of which only a part is stored.

The server is the real one with the crash harness's file I/O (tests.workloads.crashing_server):
it kills itself at an exact write, then a normal server restarts on the same data directory
and port while the client is still retrying. 2000 messages over 256 KiB segments, so the
prepare and the commit each span several writes and segments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import fmq
from fmq.client import TransactionProducer

from .harness import ServerProcess, free_port, start_workload_server
from .test_crash_and_feedback import consume_all

CONFIG = {"segment_size": 256 * 1024, "max_message_size": 4096, "checkpoint_interval_ms": 0,
          "retention_interval_ms": 0, "tx_check_after_ms": 300}
COUNT = 2000
BODIES = [f"m{i:05d}-".encode().ljust(400, b"x") for i in range(COUNT)]


def start_crashing_server(tmp_path, port: int, arm: dict, arm_on: str,
                          config: dict | None = None) -> subprocess.Popen:
    spec = json.dumps({"config": config or CONFIG, "arm": arm, "arm_on": arm_on})
    return start_workload_server("crashing_server", [str(tmp_path / "data"), str(port), spec],
                                 f"127.0.0.1:{port}", str(tmp_path / "crashing-server.log"))


def crash_during_transaction(tmp_path, arm: dict, arm_on: str):
    """Run one 2000-message transaction against a server that dies at ``arm``; restart a
    normal server; return (the producer's result, local-transaction ids, the restarted
    server, everything consumable)."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    crashing = start_crashing_server(tmp_path, port, arm, arm_on)
    outcome: dict = {}
    local_ids: list[str] = []

    def local_transaction(tx_id: str, _arg: object) -> fmq.TxState:
        local_ids.append(tx_id)
        return fmq.TxState.COMMIT

    def produce() -> None:
        try:
            with TransactionProducer(address, "shop", lambda u: fmq.TxState.UNKNOWN,
                                     feedback=False, retries=80, request_timeout=30,
                                     connect_timeout=1, backoff_max=0.5) as tp:
                outcome["result"] = tp.send_in_transaction(
                    [fmq.Message("pay", b) for b in BODIES], local_transaction)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            outcome["error"] = exc

    client = threading.Thread(target=produce, daemon=True)
    client.start()
    try:
        assert crashing.wait(120) == -signal.SIGKILL, \
            (tmp_path / "crashing-server.log").read_text()
    finally:
        if crashing.poll() is None:
            crashing.kill()
    server = ServerProcess(str(tmp_path / "data"), CONFIG, port=port).start()
    client.join(120)
    assert not client.is_alive()
    assert "error" not in outcome, outcome
    got = consume_all(address, "pay", "audit", idle=2.0)
    return outcome["result"], local_ids, server, got


def test_prepare_cut_at_a_segment_boundary_is_rolled_back_and_prepared_again(tmp_path):
    # The prepare's first write (PREPARE + the PRE_MESSAGEs of the first segment) reaches the
    # file, the process dies before the second segment's: a prepare cut short.
    result, local_ids, server, got = crash_during_transaction(
        tmp_path, dict(op="pwrite", nth=2, mode="before"), "start")
    try:
        log = server.log()
        assert "cut its prepare short" in log, log
        # The client learned its first attempt was rolled back and prepared again under a
        # new id: the local transaction ran once, for the complete transaction.
        assert result.state == fmq.TxState.COMMIT
        assert local_ids == [result.tx_id]
        assert sorted(m.body for m in got) == BODIES  # all 2000, each once, nothing partial
    finally:
        server.kill()
    with fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(**CONFIG)) as b:
        assert b.transactions.open_transactions() == []


def test_commit_cut_inside_its_records_is_rolled_forward(tmp_path):
    # The commit's first write lands 50 whole REF/TX records and part of the next, then the
    # process dies: recovery must roll the commit forward, and the client's retried commit
    # is answered COMMIT.
    result, local_ids, server, got = crash_during_transaction(
        tmp_path, dict(op="pwrite", mode="records", records=50, extra=30), "commit")
    try:
        log = server.log()
        assert "rolled forward 1" in log, log
        assert result.state == fmq.TxState.COMMIT
        assert local_ids == [result.tx_id]
        assert sorted(m.body for m in got) == BODIES
    finally:
        server.kill()
    assert os.path.exists(tmp_path / "data")
