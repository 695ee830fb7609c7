"""The transaction writer: the REF-versus-copy rule uses the codec's own size of a record;
the pipelined commit (place, then done) against concurrent enders; the codec's append and
overwrite paths."""

from __future__ import annotations

import threading

import pytest

from fmq import Broker, BrokerConfig, Message, TxState
from fmq.errors import InvalidArgument, TransactionConflict
from fmq.log.record import Record, RecordType, encode, encode_into, encoded_length


def test_encoded_length_of_a_ref_record_is_what_encode_writes():
    ref = Record(RecordType.REF_MESSAGE, queue_id=1, queue_offset=7, ref_offset=100,
                 ref_size=300, topic="orders", tx_id="tx-1", key="k\u00e9y", tags="t")
    assert encoded_length(ref) == len(encode(ref))


def test_encoded_length_counts_body_and_properties_of_a_copy():
    rec = Record(RecordType.TX_MESSAGE, topic="pay", tx_id="tx-2", producer_group="shop",
                 properties={"a": "b"}, body=b"x" * 33)
    assert encoded_length(rec) == len(encode(rec))


# ---------------------------------------------------------------- the pipelined write path

@pytest.fixture
def tx_broker(tmp_path):
    b = Broker.open(str(tmp_path / "data"), BrokerConfig(checkpoint_interval_ms=0,
                                                         retention_interval_ms=0))
    yield b
    b.close()


def test_place_commit_leaves_a_transaction_another_thread_is_ending_to_that_thread(tx_broker):
    w = tx_broker._tx_writer
    tx_id = tx_broker.transactions.prepare([Message("t", b"x" * 400)], "g")
    open_tx = tx_broker._tx.open["g", tx_id]
    with open_tx.busy:  # a rollback or relocation holds it
        assert w.place_commit("g", tx_id) is None
    placed, end = w.place_commit("g", tx_id)
    tx_broker.wait_durable(end)
    w.commit_done(placed)
    assert not open_tx.busy.locked()
    assert w.place_commit("g", tx_id) is TxState.COMMIT  # ended: its state, nothing placed


def test_racing_commits_and_rollbacks_end_each_transaction_exactly_once(tx_broker):
    ids = [tx_broker.transactions.prepare([Message("t", b"y" * 300)], "g") for _ in range(40)]
    outcomes: dict[str, list] = {i: [] for i in ids}

    def commit_all() -> None:
        w = tx_broker._tx_writer
        for i in ids:
            try:
                placed = w.place_commit("g", i)
            except TransactionConflict:
                continue  # rolled back first
            if isinstance(placed, tuple):
                tx_broker.wait_durable(placed[1])
                w.commit_done(placed[0])
                outcomes[i].append("commit")

    def rollback_all() -> None:
        for i in ids:
            try:
                if tx_broker.transactions.rollback(i) is TxState.ROLLBACK:
                    outcomes[i].append("rollback")
            except TransactionConflict:
                pass  # committed (or committing) first

    threads = [threading.Thread(target=commit_all), threading.Thread(target=rollback_all)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not tx_broker._tx.open
    for i in ids:
        final = tx_broker._tx.finished["g", i]
        assert outcomes[i] == ["commit" if final is TxState.COMMIT else "rollback"]
    tx_broker.wait_indexed()
    stored = sum(len(v) for v in tx_broker.reads.all_messages(["t"]).values())
    assert stored == sum(1 for i in ids if tx_broker._tx.finished["g", i] is TxState.COMMIT)


def test_a_producer_group_is_still_checked_after_a_valid_one_was_remembered(tx_broker):
    tx_broker.transactions.prepare([Message("t", b"z")], "good")
    with pytest.raises(InvalidArgument, match="control character"):
        tx_broker.transactions.prepare([Message("t", b"z")], "bad\ngroup")
    with pytest.raises(InvalidArgument, match="must be a string"):
        tx_broker.transactions.prepare([Message("t", b"z")], ["good"])
    tx_broker.transactions.prepare([Message("t", b"z")], "good")


def test_encode_into_names_the_field_longer_than_the_format_allows():
    rec = Record(RecordType.MESSAGE, topic="t", key="k" * 70000)
    with pytest.raises(ValueError, match="^key is longer than 65535 bytes"):
        encode_into(bytearray(), 0, rec)


def test_encode_into_over_existing_bytes_writes_what_an_append_writes():
    rec = Record(RecordType.MESSAGE, topic="t", key="k", tags="a", properties={"p": "q"},
                 body=b"payload", queue_id=2, queue_offset=5)
    appended = bytearray(b"head")
    encode_into(appended, 4, rec)
    overwritten = bytearray(b"head" + b"\xff" * 300)
    n = encode_into(overwritten, 4, rec)
    assert bytes(overwritten[:4 + n]) == bytes(appended)


# ---------------------------------------------------------------- a turn's writes finished together

def _manager_state(b) -> tuple:
    """What the manager holds: the open transactions (prepared or not, their state, busy)
    and the finished ids, in order."""
    txm = b._tx
    return ({k: (t.prepared, t.state, t.busy.locked()) for k, t in txm.open.items()},
            list(txm.finished.items()))


def _turn(b, together: bool, failure: BaseException | None) -> tuple:
    """A turn of PREPAREs (one a retry of a prepared id), then of COMMITs, each finished
    one by one (``prepare_done``, ``commit_done``) or together (``prepares_done``,
    ``commits_done``); the answers and what the manager holds after each."""
    t = b.transactions
    t.prepare([Message("t", b"x" * 400)], "g", "first")
    placed = t.place_prepares([([Message("t", b"y" * 400)], "g", f"p{i}") for i in range(3)]
                              + [([Message("t", b"x" * 400)], "g", "first")])
    txs = [p[0] for p in placed]
    b.wait_durable(max(p[1] for p in placed))
    ids = t.prepares_done(txs, failure) if together else [t.prepare_done(tx, failure)
                                                          for tx in txs]
    after_prepares = _manager_state(b)
    committed = t.place_commits([("g", i) for i in ["first", *(() if failure else ("p0",
                                                                                     "p2"))]])
    ctxs = [c[0] for c in committed]
    b.wait_durable(max(c[1] for c in committed))
    done = t.commits_done(ctxs, failure) if together else [t.commit_done(tx, failure)
                                                           for tx in ctxs]
    return ids, after_prepares, done, _manager_state(b)


@pytest.mark.parametrize("failure", [None, OSError("the flush failed")])
def test_a_turns_writes_finished_together_leave_what_one_by_one_leaves(tmp_path, failure):
    """``prepares_done``/``commits_done`` (one hold of the manager's lock for a turn's
    writes of a kind) against ``prepare_done``/``commit_done`` per write: the same answers,
    the same open and finished transactions, a retried PREPARE left prepared and every
    ``busy`` lock released, when the flush succeeded and when it failed."""
    got = []
    for together in (False, True):
        b = Broker.open(str(tmp_path / f"data-{together}"),
                        BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0))
        try:
            got.append(_turn(b, together, failure))
        finally:
            b.close()
    assert got[0] == got[1]
    ids, after_prepares, _done, (open_after, finished) = got[1]
    assert ids == ["p0", "p1", "p2", "first"]
    assert after_prepares[0][("g", "first")][0] is True  # the retry undid nothing stored
    assert all(not busy for _p, _s, busy in open_after.values())
    assert (("g", "p0") in after_prepares[0]) is (failure is None)
    assert finished == ([] if failure else [(("g", "first"), TxState.COMMIT),
                                            (("g", "p0"), TxState.COMMIT),
                                            (("g", "p2"), TxState.COMMIT)])
