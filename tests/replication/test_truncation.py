"""Fail-over by hand with real server processes: a follower promoted online starts a new
epoch; the old primary, holding records of its own that the new primary never had, comes
back as a follower, cuts them (KIP-101) and ends byte-identical to the new primary."""

from __future__ import annotations

import json
import re
import time

from fmq.client import Client, Producer, TransactionProducer
from fmq.log.record import RecordType
from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from fmq.tx.state import TxState
from tests.server.harness import ServerProcess, run_cli

from .cluster import (
    SMALL,
    assert_identical_up_to,
    pull_all,
    record_on_disk,
    status,
    wait_caught_up,
)

QUEUES = 4


def send(address: str, tag: str, count: int) -> None:
    with Producer(address) as p:
        for i in range(count):
            p.send("t", f"{tag}-{i}".encode() * 50, key=f"k{i % 5}")


def test_returning_old_primary_cuts_its_own_records_and_follows(node, tmp_path):
    old = node("a", SMALL)
    new = node("b", {**SMALL, "follow": old.address})
    send(old.address, "both", 300)
    wait_caught_up(new, old)
    new.stop()
    send(old.address, "only-old", 120)  # never copied: the old primary's own tail
    old_end = status(old)["durable_end"]
    old.kill()

    new.start()  # a follower of a dead primary, promoted by hand
    promoted = run_cli("replica", "promote", "--server", new.address, "--json")
    assert promoted.returncode == 0, promoted.stderr
    st = status(new)
    assert st["role"] == "primary" and st["epoch"] == 1, st
    send(new.address, "only-new", 80)

    returning = ServerProcess(old.data_dir, {**SMALL, "follow": new.address}, port=old.port)
    try:
        returning.start()
        end = wait_caught_up(returning, new)
        cut = re.search(r"cut the log at (\d+)", returning.log())
        assert cut is not None, returning.log()
        cut_at = int(cut.group(1))
        # Cut exactly where the new primary's term starts, below the old primary's end.
        epoch_record = record_on_disk(new, cut_at)
        assert epoch_record.type == RecordType.EPOCH and epoch_record.queue_offset == 1
        assert cut_at < old_end
        assert_identical_up_to(new, returning, end)
        assert status(returning)["epoch"] == 1
        pulled = pull_all(returning, "t", QUEUES)
        assert pulled == pull_all(new, "t", QUEUES)
        bodies = [body for queue in pulled for _q, _o, body in queue]
        assert not any(b.startswith(b"only-old") for b in bodies)
        assert sum(b.startswith(b"only-new") for b in bodies) == 80
        assert sum(b.startswith(b"both") for b in bodies) == 300
    finally:
        returning.kill()


def test_offline_promotion_keeps_open_transactions_for_feedback(node, tmp_path):
    config = {**SMALL, "tx_check_after_ms": 200}
    primary = node("a", config)
    follower = node("b", {**config, "follow": primary.address})
    with TransactionProducer(primary.address, "g", None, feedback=False) as tp:
        tx_id = tp.prepare([Message("t", b"decided-by-feedback")])
    send(primary.address, "plain", 20)
    wait_caught_up(follower, primary)
    primary.kill()
    follower.stop()
    config_file = tmp_path / "promote.json"
    config_file.write_text(json.dumps(SMALL))
    promoted = run_cli("replica", "promote", follower.data_dir, "--node", "b",
                       "--config", str(config_file), "--json")
    assert promoted.returncode == 0, promoted.stderr
    assert json.loads(promoted.stdout)["epoch"] == 1
    again = run_cli("replica", "promote", str(tmp_path / "missing"))
    assert again.returncode != 0 and "Traceback" not in again.stderr

    serving = ServerProcess(follower.data_dir, config, port=follower.port)
    try:
        serving.start()
        assert status(serving)["role"] == "primary" and status(serving)["epoch"] == 1
        asked: list[str] = []

        def checker(uncertain) -> TxState:
            asked.append(uncertain.tx_id)
            return TxState.COMMIT

        with TransactionProducer(serving.address, "g", checker, feedback_interval=0.05):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    b == b"decided-by-feedback" for q in pull_all(serving, "t", QUEUES)
                    for _q, _o, b in q):
                time.sleep(0.1)
        assert asked and asked[0] == tx_id
        bodies = [b for q in pull_all(serving, "t", QUEUES) for _q, _o, b in q]
        assert bodies.count(b"decided-by-feedback") == 1
    finally:
        serving.kill()


def test_promoted_follower_answers_a_retried_idempotent_send_with_the_first_result(node):
    primary = node("a", SMALL)
    follower = node("b", {**SMALL, "follow": primary.address})
    props = {PRODUCER_ID_PROPERTY: "producer-7", SEQUENCE_PROPERTY: "5"}
    message = message_to_wire(Message("t", b"exactly-once", properties=props))
    with Client(primary.address, retries=0) as c:
        first = c.call(Op.SEND, {"message": message})["result"]
    send(primary.address, "later", 10)
    wait_caught_up(follower, primary)
    primary.kill()
    promoted = run_cli("replica", "promote", "--server", follower.address, "--json")
    assert promoted.returncode == 0, promoted.stderr
    with Client(follower.address, retries=0) as c:  # the producer retries on the new primary
        again = c.call(Op.SEND, {"message": message})["result"]
    assert again == first
    bodies = [b for q in pull_all(follower, "t", QUEUES) for _q, _o, b in q]
    assert bodies.count(b"exactly-once") == 1
