"""Transactional messages through the embedded API."""

from __future__ import annotations

import threading
import time

import pytest

import fmq
from fmq import Message, TxState
from fmq.datadir import LOG_DIR
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner


def cfg(**kw) -> fmq.BrokerConfig:
    base = dict(segment_size=16 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
                retention_interval_ms=0, tx_check_after_ms=100)
    base.update(kw)
    return fmq.BrokerConfig(**base)


def visible(b: fmq.Broker, topics=("t", "u")) -> list[bytes]:
    b.wait_indexed()
    return sorted(m.body for msgs in b.reads.all_messages(topics).values() for m in msgs)


def records(b: fmq.Broker) -> list:
    return [r for r in LogScanner(f"{b.path}/{LOG_DIR}") if r.type != RecordType.FILLER]


def msgs(*bodies: bytes, topic="t") -> list[Message]:
    return [Message(topic, body, key=f"k{i}") for i, body in enumerate(bodies)]


def test_prepare_writes_prepare_then_pre_messages_and_nothing_is_consumable(broker):
    tx = broker.transactions.prepare(msgs(b"a" * 300, b"b" * 300) + msgs(b"c" * 300, topic="u"),
                                     "g")
    types = [r.type for r in records(broker)]
    assert types == [RecordType.PREPARE] + [RecordType.PRE_MESSAGE] * 3
    assert visible(broker) == []
    [info] = broker.transactions.open_transactions()
    assert (info["tx_id"], info["messages"], info["state"]) == (tx, 3, "open")


def test_commit_makes_all_messages_consumable_exactly_once(broker):
    bodies = [bytes([65 + i]) * 300 for i in range(5)]
    tx = broker.transactions.prepare(msgs(*bodies[:3]) + msgs(*bodies[3:], topic="u"), "g")
    assert broker.transactions.commit(tx) == TxState.COMMIT
    assert visible(broker) == sorted(bodies)
    types = [r.type for r in records(broker)]
    assert types[-6:] == [RecordType.REF_MESSAGE] * 5 + [RecordType.COMMIT]  # REFs first
    assert broker.transactions.open_transactions() == []


def test_ref_entry_points_at_the_pre_message_body(broker):
    tx = broker.transactions.prepare(msgs(b"x" * 500), "g")
    broker.transactions.commit(tx)
    pre = next(r for r in records(broker) if r.type == RecordType.PRE_MESSAGE)
    broker.wait_indexed()
    [m] = [m for v in broker.reads.all_messages(["t"]).values() for m in v]
    assert m.offset == pre.log_offset and m.body == b"x" * 500 and m.key == "k0"


def test_rollback_hides_everything(broker):
    tx = broker.transactions.prepare(msgs(b"a" * 300, b"b"), "g")
    assert broker.transactions.rollback(tx) == TxState.ROLLBACK
    assert visible(broker) == []
    assert records(broker)[-1].type == RecordType.ROLLBACK


def test_idempotent_ends_and_conflicts(broker):
    a = broker.transactions.prepare(msgs(b"a" * 300), "g")
    b = broker.transactions.prepare(msgs(b"b" * 300), "g")
    assert broker.transactions.commit(a) == TxState.COMMIT
    assert broker.transactions.commit(a) == TxState.COMMIT  # answered with the final state
    assert broker.transactions.rollback(b) == TxState.ROLLBACK
    assert broker.transactions.rollback(b) == TxState.ROLLBACK
    with pytest.raises(fmq.TransactionConflict):
        broker.transactions.rollback(a)
    with pytest.raises(fmq.TransactionConflict):
        broker.transactions.commit(b)
    with pytest.raises(fmq.UnknownTransaction):
        broker.transactions.commit("never-prepared")
    with pytest.raises(fmq.DuplicateTransaction):
        broker.transactions.prepare(msgs(b"x"), "g", tx_id=a)
    assert visible(broker) == [b"a" * 300]


def test_open_transaction_limit(tmp_path):
    with fmq.Broker.open(str(tmp_path), cfg(max_open_transactions=2)) as b:
        t1 = b.transactions.prepare(msgs(b"1"), "g")
        b.transactions.prepare(msgs(b"2"), "g")
        end = b.stats()["log_end"]
        with pytest.raises(fmq.TooManyTransactions) as info:
            b.transactions.prepare(msgs(b"3"), "g")
        assert info.value.retriable and b.stats()["log_end"] == end  # nothing written
        b.transactions.commit(t1)
        b.transactions.prepare(msgs(b"3"), "g")


def test_bad_transaction_input(broker):
    end = broker.stats()["log_end"]
    for call in (lambda: broker.transactions.prepare([], "g"),
                 lambda: broker.transactions.prepare(msgs(b"x"), ""),
                 lambda: broker.transactions.prepare(msgs(b"x"), "g", tx_id="bad\x00id"),
                 lambda: broker.transactions.prepare([Message("t", b"x" * 5000)], "g"),
                 lambda: broker.transactions.prepare([Message("t", b"x", queue_id=7)], "g")):
        with pytest.raises(fmq.InvalidArgument):
            call()
    assert broker.stats()["log_end"] == end


def test_ref_versus_tx_copy_decision(tmp_path):
    """A TX_MESSAGE copy when (1) the body is under tx_copy_threshold, (2) the PRE_MESSAGE
    lies in an older segment, (3) the REF would not fit in the current segment."""
    with fmq.Broker.open(str(tmp_path), cfg(tx_copy_threshold=100)) as b:
        # (1) small body copied, large body referenced
        tx = b.transactions.prepare([Message("t", b"s" * 10), Message("t", b"L" * 200)], "g")
        b.transactions.commit(tx)
        kinds = [r.type for r in records(b)][-3:-1]
        assert kinds == [RecordType.TX_MESSAGE, RecordType.REF_MESSAGE]
        # (2) the PRE_MESSAGE is in an older segment than the one being written
        tx = b.transactions.prepare([Message("t", b"old" * 100)], "g")
        seg = b._log.active_segment.base
        while b._log.active_segment.base == seg:
            b.send(Message("u", b"f" * 1000))
        b.transactions.commit(tx)
        last = [r for r in records(b) if r.tx_id == tx]
        assert [r.type for r in last][-2:] == [RecordType.TX_MESSAGE, RecordType.COMMIT]
        assert last[-2].ref_offset == last[1].log_offset  # still points at its PRE_MESSAGE
        # (3) the PRE_MESSAGE is in the active segment but the REF does not fit behind it
        tx = b.transactions.prepare([Message("t", b"R" * 300)], "g")
        seg = b._log.active_segment
        assert seg.base <= b.transactions.open_transactions()[0]["prepare_offset"]

        def usable():  # bytes left for records (the filler's room is reserved)
            return seg.end - b._log.next_offset - 72

        while usable() > 3000 + 73 + 200:
            b.send(Message("u", b"f" * 3000))
        b.send(Message("u", b"z" * (usable() - 73 - 10)))  # leaves 10 bytes: no REF fits
        assert b._log.active_segment is seg and usable() == 10
        b.transactions.commit(tx)
        last = [r for r in records(b) if r.tx_id == tx]
        assert [r.type for r in last][-2:] == [RecordType.TX_MESSAGE, RecordType.COMMIT]
        assert last[-2].log_offset >= seg.end  # written to the next segment, as a copy
        assert sorted(visible(b, ("t",))) == sorted([b"s" * 10, b"L" * 200, b"old" * 100,
                                                     b"R" * 300])


def test_checkpoint_is_held_back_by_an_open_transaction(broker):
    broker.send(Message("t", b"before"))
    tx = broker.transactions.prepare(msgs(b"a" * 300), "g")
    prepare_offset = broker.transactions.open_transactions()[0]["prepare_offset"]
    for _ in range(20):
        broker.send(Message("t", b"after"))
    broker.wait_indexed()
    cp = broker.checkpoint()
    assert cp.recovery_offset == prepare_offset < cp.applied_offset
    broker.transactions.commit(tx)
    broker.wait_indexed()
    assert broker.checkpoint().recovery_offset == broker.stats()["log_end"]


def test_open_transaction_survives_restart_and_commits_after(tmp_path):
    with fmq.Broker.open(str(tmp_path), cfg()) as b:
        tx = b.transactions.prepare(msgs(b"a" * 300, b"b" * 300), "g")
        for i in range(200):  # many segments after the PREPARE
            b.send(Message("u", str(i).encode() * 50))
    with fmq.Broker.open(str(tmp_path), cfg()) as b:
        assert b.recovery.start_offset <= b.transactions.open_transactions()[0]["prepare_offset"]
        [info] = b.transactions.open_transactions()
        assert (info["tx_id"], info["messages"]) == (tx, 2)
        assert visible(b, ("t",)) == []
        b.transactions.commit(tx)
        assert visible(b, ("t",)) == [b"a" * 300, b"b" * 300]
    with fmq.Broker.open(str(tmp_path), cfg()) as b:
        assert b.transactions.open_transactions() == []
        # finished ids are remembered across restart
        assert b.transactions.commit(tx) == TxState.COMMIT
        assert visible(b, ("t",)) == [b"a" * 300, b"b" * 300]


def test_retention_never_deletes_an_open_transactions_messages(tmp_path):
    config = cfg(retention_bytes=32 * 1024)
    with fmq.Broker.open(str(tmp_path), config) as b:
        tx = b.transactions.prepare(msgs(b"keep me" * 50), "g")
        pre_segment = b._log.active_segment.base
        for i in range(300):
            b.send(Message("u", str(i).encode() * 60))
        b.wait_indexed()
        # The open transaction is relocated to the log head, so its old segment can go
        # while its messages stay (tests/tx/test_relocation.py has the crash cases).
        assert b.enforce_retention()
        assert b._log.first_offset > pre_segment
        [info] = b.transactions.open_transactions()
        assert info["prepare_offset"] >= b._log.first_offset and info["messages"] == 1
        b.transactions.commit(tx)
        assert visible(b, ("t",)) == [b"keep me" * 50]


def test_many_concurrent_transactions_interleaved_with_plain_sends(broker):
    outcome: dict[str, list[bytes]] = {"commit": [], "rollback": [], "plain": []}
    lock = threading.Lock()
    errors = []

    def tx_worker(n):
        try:
            for i in range(15):
                bodies = [f"tx{n}-{i}-{j}".encode() * 20 for j in range(1 + i % 3)]
                tx = broker.transactions.prepare([Message("t", bd, key=f"{n}") for bd in bodies],
                                                 f"g{n % 2}")
                decision = "commit" if (n + i) % 3 else "rollback"
                txs = broker.transactions
                (txs.commit if decision == "commit" else txs.rollback)(tx)
                with lock:
                    outcome[decision] += bodies
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def plain_worker(n):
        for i in range(40):
            body = f"plain{n}-{i}".encode()
            broker.send(Message("u", body))
            with lock:
                outcome["plain"].append(body)

    threads = [threading.Thread(target=tx_worker, args=(n,)) for n in range(6)]
    threads += [threading.Thread(target=plain_worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert visible(broker, ("t",)) == sorted(outcome["commit"])
    assert visible(broker, ("u",)) == sorted(outcome["plain"])
    broker.wait_indexed()
    for qid in range(4):  # dense queues
        got = broker.reads.all_messages(["t"])[("t", qid)]
        assert [m.queue_offset for m in got] == list(range(len(got)))


def test_feedback_offers_old_open_transactions_with_their_messages(broker):
    tx = broker.transactions.prepare(msgs(b"a" * 300, b"b"), "shop")
    broker.transactions.prepare(msgs(b"other"), "another-group")
    assert broker.transactions.poll_uncertain("shop", wait_ms=0) == []  # not old enough yet
    t0 = time.monotonic()
    [u] = broker.transactions.poll_uncertain("shop", wait_ms=3000)  # long poll until it is due
    assert time.monotonic() - t0 >= 0.05
    assert u.tx_id == tx and u.checks == 1
    # Message objects, as every other API gives (and still readable the old dict way).
    assert all(isinstance(m, fmq.Message) for m in u.messages)
    assert [(m.topic, m.body) for m in u.messages] == [("t", b"a" * 300), ("t", b"b")]
    assert all(m.offset >= u.prepare_offset for m in u.messages)
    assert u.messages[1]["body"] == b"b" and u.messages[1].get("offset") == u.messages[1].offset
    # leased to this poller: nobody else gets it meanwhile
    assert broker.transactions.poll_uncertain("shop", lease_ms=5000, wait_ms=0) == []
    assert broker.transactions.answer_uncertain(tx, TxState.COMMIT) == TxState.COMMIT
    assert visible(broker, ("t",)) == [b"a" * 300, b"b"]
    assert broker.stats()["feedback_checks_sent"] == 1
    assert broker.transactions.poll_uncertain("shop", wait_ms=300) == []  # nothing open any more


def test_unknown_answer_keeps_checking_with_back_off(broker):
    tx = broker.transactions.prepare(msgs(b"x" * 300), "g")
    [u] = broker.transactions.poll_uncertain("g", wait_ms=3000, lease_ms=10)
    assert broker.transactions.answer_uncertain(tx, TxState.UNKNOWN) == TxState.UNKNOWN
    [u2] = broker.transactions.poll_uncertain("g", wait_ms=5000)
    assert u2.tx_id == tx and u2.checks == 2
    assert broker.transactions.open_transactions()[0]["checks"] == 2
    assert visible(broker) == []  # never resolved by the broker itself
    broker.transactions.answer_uncertain(tx, TxState.ROLLBACK)
    assert broker.transactions.open_transactions() == []


def test_long_poll_wakes_when_a_transaction_becomes_due(broker):
    got = []
    poller = threading.Thread(
        target=lambda: got.extend(broker.transactions.poll_uncertain("g", wait_ms=5000)))
    poller.start()
    time.sleep(0.05)
    tx = broker.transactions.prepare(msgs(b"late" * 100), "g")
    poller.join(10)
    assert [u.tx_id for u in got] == [tx]


def test_stats_show_the_oldest_transaction_age(broker):
    broker.transactions.prepare(msgs(b"x"), "g")
    time.sleep(0.05)
    s = broker.stats()
    assert s["open_transactions"] == 1 and s["oldest_transaction_age_ms"] >= 40


def test_a_damaged_pre_message_body_is_corruption_not_a_skip(tmp_path):
    import os

    from fmq.datadir import CHECKPOINT_FILE, format_segment_name

    with fmq.Broker.open(str(tmp_path), cfg()) as b:
        b.transactions.prepare(msgs(b"precious" * 40), "g", tx_id="open-tx")
        pre = next(r for r in records(b) if r.type == RecordType.PRE_MESSAGE)
        for _ in range(5):
            b.send(Message("u", b"after" * 10))
    with open(os.path.join(tmp_path, LOG_DIR, format_segment_name(0)), "r+b") as f:
        f.seek(pre.log_offset + pre.size - 20)  # inside the body
        f.write(b"X")
    assert os.path.exists(tmp_path / CHECKPOINT_FILE)  # recovery starts at the PREPARE
    with pytest.raises(fmq.CorruptLog) as info:
        fmq.Broker.open(str(tmp_path), cfg())
    assert info.value.offset == pre.log_offset


def test_periodic_checkpoint_runs_in_the_background(tmp_path):
    with fmq.Broker.open(str(tmp_path), cfg(checkpoint_interval_ms=100)) as b:
        b.send(Message("t", b"x"))
        deadline = time.monotonic() + 10
        while b.last_checkpoint is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.last_checkpoint is not None
        assert b.last_checkpoint.recovery_offset == b.stats()["log_end"]


def test_a_retried_prepare_is_answered_from_the_first_and_written_once(broker):
    first = msgs(b"a" * 300, b"b" * 300) + [Message("u", b"c", tags="x", properties={"p": "1"})]
    tx = broker.transactions.prepare(first, "g", tx_id="tx-retried")
    end = broker.stats()["log_end"]
    again = msgs(b"a" * 300, b"b" * 300) + [Message("u", b"c", tags="x", properties={"p": "1"})]
    assert broker.transactions.prepare(again, "g", tx_id=tx) == tx
    assert broker.stats()["log_end"] == end  # nothing written twice
    for other in [
        again[:2],                                                    # a message fewer
        msgs(b"a" * 300, b"B" * 300) + again[2:],                     # a body differs
        again[:2] + [Message("u", b"c", tags="x", properties={"p": "2"})],
        again[:2] + [Message("t", b"c", tags="x", properties={"p": "1"})],
    ]:
        with pytest.raises(fmq.DuplicateTransaction):
            broker.transactions.prepare(other, "g", tx_id=tx)
    assert broker.stats()["log_end"] == end
    assert broker.transactions.commit(tx, "g") == TxState.COMMIT
    assert visible(broker) == [b"a" * 300, b"b" * 300, b"c"]  # one copy of each
    with pytest.raises(fmq.DuplicateTransaction):  # ended: a reused id
        broker.transactions.prepare(again[:2], "g", tx_id=tx)


def test_a_retried_prepare_of_a_transaction_committed_meanwhile_is_answered(tmp_path):
    # Feedback committed it (the checker said so) before the producer's retry came.
    with fmq.Broker.open(str(tmp_path), cfg(segment_size=4096, max_message_size=1024)) as b:
        first = [Message("t", bytes([i]) * 600, key=f"k{i}", properties={"i": str(i)})
                 for i in range(8)]  # across segments: fillers between the PRE_MESSAGEs
        tx = b.transactions.prepare(first, "g", tx_id="tx-done")
        assert b.transactions.commit(tx) == TxState.COMMIT
        b.wait_indexed()
        end = b.stats()["log_end"]
        assert b.transactions.prepare(list(first), "g", tx_id=tx) == tx
        assert b.stats()["log_end"] == end
        assert b.transactions.commit(tx) == TxState.COMMIT  # the producer goes on: nothing changes
        changed = first[:7] + [Message("t", bytes([7]) * 600, key="k7", properties={"i": "8"})]
        for other in [changed, first[:7]]:
            with pytest.raises(fmq.DuplicateTransaction):
                b.transactions.prepare(other, "g", tx_id=tx)
        rolled = b.transactions.prepare(msgs(b"r"), "g", tx_id="tx-rolled")
        b.transactions.rollback(rolled)
        b.wait_indexed()
        end = b.stats()["log_end"]
        with pytest.raises(fmq.TransactionRolledBack):  # never answered as stored
            b.transactions.prepare(msgs(b"r"), "g", tx_id=rolled)
        assert b.stats()["log_end"] == end
        assert visible(b) == sorted(m.body for m in first)
